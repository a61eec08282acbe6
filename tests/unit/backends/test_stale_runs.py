"""Which live runs the sync cancels (scheduler.loop.stale_runs) and how run names are read back.

The cancelling itself, against the real local Slurm, is in
tests/integration/slurm/test_platform_on_slurm.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.backends.base import backend_job_name, parse_backend_job_name
from scheduler.loop.stale_runs import is_jobs_run, job_pk_of, judge_run


@given(
    job_id=st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40
    ),
    attempt=st.integers(min_value=0, max_value=10**6),
)
def test_run_names_read_back_to_their_identity(job_id, attempt):
    assert parse_backend_job_name(backend_job_name(job_id, attempt)) == (job_id, attempt)


@pytest.mark.parametrize(
    "name",
    ["wrap", "gp-17", "gp--a1", "gp-17-a", "gp-17-ax", "xgp-17-a1", "weird|name with space", ""],
)
def test_other_names_are_not_runs(name):
    assert parse_backend_job_name(name) is None


def test_names_with_dashes_keep_the_last_attempt_suffix():
    assert parse_backend_job_name("gp-prod-a2-17-a3") == ("prod-a2-17", 3)


@pytest.mark.parametrize(
    ("job_id", "namespace", "pk"),
    [
        ("17", "", 17),
        ("prod-17", "prod-", 17),
        ("prod-17", "", None),  # another database's run, seen from one without a namespace
        ("test-17", "prod-", None),
        ("prod-", "prod-", None),
        ("prod-1x", "prod-", None),
        ("prod-١٢", "prod-", None),  # Arabic-Indic digits are digits to str.isdigit, not to us
    ],
)
def test_job_pk_only_from_our_namespace(job_id, namespace, pk):
    assert job_pk_of(job_id, namespace) == pk


@pytest.mark.parametrize(
    ("attempt", "state", "attempts", "cancel", "why"),
    [
        # The run the platform wants: the current attempt of a job holding GPUs.
        (2, "running", 2, False, ""),
        (2, "preempted", 2, False, ""),  # still in its checkpoint grace
        # Superseded: the platform resumed the job as a newer attempt.
        (1, "running", 2, True, "superseded: the job is on attempt 2"),
        (1, "pending", 3, True, "superseded: the job is on attempt 3"),
        (1, "succeeded", 2, True, "superseded: the job is on attempt 2"),
        # The job is over in the platform.
        (2, "succeeded", 2, True, "the job is succeeded"),
        (2, "failed", 2, True, "the job is failed"),
        (2, "cancelled", 2, True, "the job is cancelled"),
        # Requeued: the platform released the run's GPUs and waits for the next attempt.
        (2, "pending", 2, True, "the job was requeued and is pending"),
        # Not ours to judge.
        (3, "running", 2, False, "newer than the job's attempt 2"),
        (1, None, 0, False, "no such job in this database"),
    ],
)
def test_judge_run(attempt, state, attempts, cancel, why):
    assert judge_run(attempt=attempt, job_state=state, job_attempts=attempts) == (cancel, why)


@pytest.mark.parametrize(
    ("live_account", "run_account", "ours"),
    [
        ("", "", True),  # one identity for every run (no team accounts)
        ("", "gp-vision", True),  # the service account's run, from before team_accounts
        ("gp-vision", "gp-vision", True),  # the account the attempt was submitted as
        ("gp-nlp", "gp-vision", False),  # another team's account named a job like the run
        ("gp-vision", "", False),  # a team account's job, for a run of the service account
    ],
)
def test_a_live_run_is_its_jobs_only_as_the_account_it_was_submitted_as(
    live_account, run_account, ours
):
    assert is_jobs_run(live_account=live_account, run_account=run_account) is ours
