"""Which recorded accounts the stale-run sweep asks its backend about
(``scheduler.loop.stale_runs.recorded_accounts``): those of the jobs whose runs may still live,
read only for a backend that uses them; and a run recorded as the platform's own identity."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.backends import get_backend
from scheduler.loop.cycle import run_cycle
from scheduler.loop.stale_runs import (
    RECORDED_ACCOUNTS_HORIZON,
    cancel_stale_runs,
    recorded_accounts,
)
from scheduler.models import Cluster, Job
from scheduler.states import JobState
from scheduler.transitions import job_requeue

pytestmark = pytest.mark.django_db


def _job(cluster, teams, alice, priorities, *, state, accounts, finished_ago=None) -> Job:
    now = timezone.now()
    return Job.objects.create(
        team=teams["vision"],
        submitter=alice,
        name="j",
        workers=1,
        gpus_per_worker=1,
        priority_class=priorities["research"],
        state=state,
        attempts=len(accounts),
        cluster=cluster,
        submitted_at=now,
        finished_at=None if finished_ago is None else now - finished_ago,
        backend_accounts=accounts,
    )


def test_the_accounts_of_jobs_not_over_or_just_over_on_this_cluster(
    cluster, teams, alice, priorities
):
    other = Cluster.objects.create(name="other", backend_kind="simulated", backend_config={})
    make = lambda **kw: _job(cluster, teams, alice, priorities, **kw)  # noqa: E731
    make(state=JobState.RUNNING, accounts={"1": "gp-old", "2": "gp-new"})
    make(state=JobState.PENDING, accounts={"1": "gp-requeued"})
    make(state=JobState.SUCCEEDED, accounts={"1": "gp-recent"}, finished_ago=timedelta(hours=1))
    make(
        state=JobState.FAILED,
        accounts={"1": "gp-long-ago"},
        finished_ago=RECORDED_ACCOUNTS_HORIZON + timedelta(hours=1),
    )
    make(state=JobState.RUNNING, accounts={})
    _job(other, teams, alice, priorities, state=JobState.RUNNING, accounts={"1": "gp-elsewhere"})
    assert recorded_accounts(cluster=cluster, now=timezone.now()) == {
        "gp-old",
        "gp-new",
        "gp-requeued",
        "gp-recent",
    }


def test_a_stale_run_recorded_as_the_platforms_own_is_cancelled_and_no_account_is_read(
    platform, submit
):
    """Every run records the account it was submitted as, "" for the platform's own identity
    (here every run: a simulated cluster). Such a run is judged and cancelled as before, when
    nothing was recorded for it. Those records are no reason to read every live job's accounts
    on every sync: a backend whose runs are all its own ignores the accounts it is given, so
    the sweep no longer reads them for it (it read them once "" made every record non-empty)."""
    cluster = platform["cluster"]
    job_id = submit(
        platform["alice"], team="vision", gpu_model="h100-80gb", simulated_duration_s=100_000
    ).json()["id"]
    run_cycle()
    job = Job.objects.select_related("team", "cluster").get(pk=job_id)
    assert job.state == JobState.RUNNING and job.backend_accounts == {"1": ""}
    assert job_requeue(job=job, now=timezone.now(), reason="test: the platform moved on")

    with CaptureQueriesContext(connection) as captured:
        cancelled = cancel_stale_runs(
            cluster=cluster, backend=get_backend(cluster), now=timezone.now()
        )

    assert cancelled == [(str(job.pk), 1, "the job was requeued and is pending")]
    # recorded_accounts is the sweep's one query that reads jobs by when they finished.
    assert not [q["sql"] for q in captured.captured_queries if "finished_at" in q["sql"]]
    assert (
        cancel_stale_runs(cluster=cluster, backend=get_backend(cluster), now=timezone.now()) == []
    )
