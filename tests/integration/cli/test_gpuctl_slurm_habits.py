"""``gpuctl`` as a Slurm user types it: ``--state`` in any case and with Slurm's short codes for
the states that map exactly (``squeue -t PD``)."""

from __future__ import annotations

import json

import pytest

from scheduler.models import Job


@pytest.fixture
def dora(teams):
    """A second member of vision, so ``--mine`` has someone else's job to leave alone."""
    from django.contrib.auth import get_user_model

    from tenants.models import Membership

    user = get_user_model().objects.create_user(username="dora", password="pw-dora")
    Membership.objects.create(user=user, team=teams["vision"], role="member")
    return user


@pytest.fixture
def mixed(platform, submit, dora):
    """alice's pending and running jobs, dora's pending one in the same team, bob's in nlp."""
    made = {}
    for user, name, team in (
        (platform["alice"], "sweep-1", "vision"),
        (platform["alice"], "sweep-2", "vision"),
        (platform["alice"], "eval", "vision"),
        (dora, "sweep-3", "vision"),
        (platform["bob"], "sweep-9", "nlp"),
    ):
        response = submit(user, name=name, team=team)
        assert response.status_code == 201, response.json()
        made[name] = response.json()["id"]
    Job.objects.filter(pk=made["sweep-2"]).update(state="running")
    return made


def _states(made):
    return {name: Job.objects.get(pk=job_id).state for name, job_id in made.items()}


# --- --state as Slurm spells it ----------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["PENDING", "PD", "pd", "Pending"])
def test_ls_state_takes_any_case_and_slurms_short_codes(as_alice, mixed, spelling):
    """Before: ``ls --state PENDING`` was a 400 from the server (unknown state), exit 2."""
    result = as_alice("ls", "--state", spelling, "--json")
    assert result.code == 0, result.err
    assert {job["name"] for job in json.loads(result.out)} == {"sweep-1", "eval", "sweep-3"}


def test_ls_state_maps_each_exact_slurm_code(as_alice, mixed):
    Job.objects.filter(pk=mixed["eval"]).update(state="succeeded")
    Job.objects.filter(pk=mixed["sweep-3"]).update(state="failed")
    Job.objects.filter(pk=mixed["sweep-1"]).update(state="cancelled")
    for code, name in (("R", "sweep-2"), ("CD", "eval"), ("F", "sweep-3"), ("CA", "sweep-1")):
        listed = json.loads(as_alice("ls", "-s", code, "--json").out)
        assert [job["name"] for job in listed] == [name], code
    both = json.loads(as_alice("ls", "-s", "r,COMPLETED", "--json").out)
    assert {job["name"] for job in both} == {"sweep-2", "eval"}


@pytest.mark.parametrize("spelling", ["PR", "TO", "bogus"])
def test_a_state_that_does_not_map_exactly_is_bad_usage_naming_the_accepted(as_alice, spelling):
    """Slurm's PREEMPTED is final, ours is on the way back to pending: not mapped."""
    result = as_alice("ls", "--state", spelling)
    assert result.code == 2
    assert result.err.startswith(f"error: --state: unknown state {spelling!r}"), result.err
    assert "PD" in result.err and "preempted" in result.err
