"""``gpuctl`` as a Slurm user types it: ``cancel`` by filter (``scancel -u $USER -t PENDING``),
and ``--state`` in any case and with Slurm's short codes for the states that map exactly
(``squeue -t PD``)."""

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


# --- cancel by filter --------------------------------------------------------------------------


def test_cancel_mine_in_a_state_cancels_only_those(as_alice, mixed):
    """``cancel --mine --state PD``: alice's pending jobs, not her running one nor dora's.
    Before: ``--mine`` was an unknown option (exit 2), cancel took ids only."""
    result = as_alice("cancel", "--mine", "--state", "PD")
    assert result.code == 0, result.err
    assert f"job {mixed['sweep-1']} (sweep-1) cancelled" in result.out
    assert f"job {mixed['eval']} (eval) cancelled" in result.out
    assert result.out.endswith("2 jobs cancelled\n"), result.out
    assert _states(mixed) == {
        "sweep-1": "cancelled",
        "sweep-2": "running",
        "eval": "cancelled",
        "sweep-3": "pending",
        "sweep-9": "pending",
    }


def test_cancel_by_name_glob_and_team_as_one_json_document(as_alice, mixed):
    """``--name`` is a shell-style glob (exact when it has no ``*?[``), matched on the whole name
    and case-sensitively; every live state is cancelled when ``--state`` is not given."""
    result = as_alice("cancel", "--team", "vision", "--name", "sweep-*", "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert sorted(job["id"] for job in document["cancelled"]) == sorted(
        [mixed["sweep-1"], mixed["sweep-2"], mixed["sweep-3"]]
    )
    assert document["dry_run"] is False and document["finished_meanwhile"] == []
    assert _states(mixed)["eval"] == "pending"
    assert _states(mixed)["sweep-9"] == "pending"  # bob's team: never listed

    exact = as_alice("cancel", "--name", "eval", "--dry-run")
    assert exact.code == 0, exact.err
    assert f"would cancel job {mixed['eval']} (eval)" in exact.out
    assert _states(mixed)["eval"] == "pending"


def test_dry_run_lists_and_changes_nothing(as_alice, mixed):
    result = as_alice("cancel", "--mine", "--dry-run", "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["dry_run"] is True
    assert {job["name"] for job in document["would_cancel"]} == {"sweep-1", "sweep-2", "eval"}
    assert "cancelled" not in document
    assert set(_states(mixed).values()) == {"pending", "running"}


def test_nothing_matching_is_no_error(as_alice, mixed):
    result = as_alice("cancel", "--name", "nothing-*")
    assert (result.code, result.out) == (0, "no live job matches; nothing cancelled\n")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["cancel"], "JOB_ID"),
        (["cancel", "7", "--mine"], "JOB_ID"),
        (["cancel", "--state", "CD"], "--state"),
        (["cancel", "--dry-run"], "JOB_ID"),
        (["cancel", "7", "--dry-run"], "--dry-run"),
    ],
)
def test_ids_with_filters_no_filter_or_a_finished_state_is_bad_usage(as_alice, mixed, args, field):
    """Nothing is sent: a bare ``cancel`` must not mean "everything I can cancel"."""
    result = as_alice(*args, "--json")
    assert result.code == 2, result
    error = json.loads(result.err)
    assert error["kind"] == "usage" and field in error["fields"], error
    assert set(_states(mixed).values()) == {"pending", "running"}


def test_a_job_finished_between_listing_and_cancel_is_said_not_an_error(
    as_alice, mixed, monkeypatch
):
    """scancel is silent about a job that ended meanwhile; a 409 there is not a failure."""
    from gpuctl.client import Client

    real_post = Client.post

    def finish_first_then_post(self, path, body=None):
        if path == f"/api/v1/jobs/{mixed['sweep-1']}/cancel/":
            Job.objects.filter(pk=mixed["sweep-1"]).update(state="succeeded")
        return real_post(self, path, body)

    monkeypatch.setattr(Client, "post", finish_first_then_post)
    result = as_alice("cancel", "--mine", "--state", "pending")
    assert result.code == 0, result.err
    assert f"job {mixed['sweep-1']} (sweep-1) had already ended (succeeded)" in result.out
    assert f"job {mixed['eval']} (eval) cancelled" in result.out
    assert result.err == ""

    as_json = as_alice("cancel", "--mine", "--json")  # sweep-2 is left, running
    assert as_json.code == 0, as_json.err
    assert [job["name"] for job in json.loads(as_json.out)["cancelled"]] == ["sweep-2"]


def test_a_job_the_caller_may_not_cancel_is_an_error_and_the_rest_go_on(
    platform, live_server, gpuctl, mixed
):
    """charlie views vision: listed, refused one by one, exit 1, one error object with --json."""
    login = gpuctl(
        "login", "--url", live_server.url, "--username", "charlie", "--password-stdin",
        stdin="pw-charlie\n",
    )  # fmt: skip
    assert login.code == 0, login.err
    result = gpuctl("cancel", "--name", "eval", "--json")
    assert result.code == 1
    assert json.loads(result.out)["cancelled"] == []
    error = json.loads(result.err)
    assert list(error["fields"]) == [str(mixed["eval"])]
    assert _states(mixed)["eval"] == "pending"


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
