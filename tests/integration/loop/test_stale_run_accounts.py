"""Which recorded accounts the stale-run sweep asks its backend about
(``scheduler.loop.stale_runs.recorded_accounts``): those of the jobs whose runs may still live."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.loop.stale_runs import RECORDED_ACCOUNTS_HORIZON, recorded_accounts
from scheduler.models import Cluster, Job
from scheduler.states import JobState

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
