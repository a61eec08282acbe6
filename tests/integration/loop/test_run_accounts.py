"""Recording the account a run learnt from its cluster (``scheduler.loop.run_accounts``): once
per attempt, never over a recorded one, never onto an attempt or run the job has moved past.
What the cluster answers is tested on a real Slurm (``test_team_account_runs_on_slurm.py``)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler.backends import get_backend
from scheduler.loop.run_accounts import job_run_account_record, learn_run_accounts
from scheduler.models import Job
from scheduler.states import JobState

pytestmark = pytest.mark.django_db


def _running(cluster, teams, alice, priorities, *, attempts=1, accounts=None) -> Job:
    return Job.objects.create(
        team=teams["vision"],
        submitter=alice,
        name="j",
        workers=1,
        gpus_per_worker=1,
        priority_class=priorities["research"],
        state=JobState.RUNNING,
        attempts=attempts,
        cluster=cluster,
        submitted_at=timezone.now(),
        backend_ref="4242",
        backend_accounts=accounts or {},
    )


def test_an_attempt_without_an_account_records_the_one_learnt_once(
    cluster, teams, alice, priorities
):
    job = _running(cluster, teams, alice, priorities, attempts=2, accounts={"1": "gp-old"})
    assert job_run_account_record(job=job, account="gp-vision")
    assert job.backend_accounts == {"1": "gp-old", "2": "gp-vision"}
    job.refresh_from_db()
    assert job.backend_accounts == {"1": "gp-old", "2": "gp-vision"}
    # Learnt again (another pass, another answer): the record stays as it was.
    assert not job_run_account_record(job=job, account="gp-other")
    job.refresh_from_db()
    assert job.backend_accounts == {"1": "gp-old", "2": "gp-vision"}


def test_the_service_accounts_run_is_recorded_as_such_so_it_is_not_asked_about_again(
    cluster, teams, alice, priorities
):
    job = _running(cluster, teams, alice, priorities)
    assert job_run_account_record(job=job, account="")
    job.refresh_from_db()
    assert job.backend_accounts == {"1": ""}


def test_nothing_is_recorded_for_a_job_that_moved_on_since_it_was_read(
    cluster, teams, alice, priorities
):
    job = _running(cluster, teams, alice, priorities)
    # Requeued and started again meanwhile: what was learnt is about the old run.
    Job.objects.filter(pk=job.pk).update(attempts=2, backend_ref="4343")
    assert not job_run_account_record(job=job, account="gp-vision")
    job.refresh_from_db()
    assert job.backend_accounts == {}
    assert (job.attempts, job.backend_ref) == (2, "4343")


def test_a_cluster_that_runs_everything_as_itself_records_nothing(
    cluster, teams, alice, priorities
):
    job = _running(cluster, teams, alice, priorities)
    jobs = list(Job.objects.select_related("team", "cluster").filter(pk=job.pk))
    assert learn_run_accounts(backend=get_backend(cluster), jobs=jobs) == []
    job.refresh_from_db()
    assert job.backend_accounts == {}
