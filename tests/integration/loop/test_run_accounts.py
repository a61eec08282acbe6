"""Recording the account a run learnt from its cluster (``scheduler.loop.run_accounts``): once
per attempt, never over a recorded one, never onto an attempt or run the job has moved past.
What the cluster answers is tested on a real Slurm (``test_team_account_runs_on_slurm.py``)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler.backends import get_backend
from scheduler.loop.cycle import run_cycle
from scheduler.loop.observe import sync_all
from scheduler.loop.run_accounts import job_run_account_record, learn_run_accounts
from scheduler.models import Job
from scheduler.states import JobState

pytestmark = pytest.mark.django_db


def _running(cluster, teams, alice, priorities, *, attempts=1, accounts=None, ref="4242") -> Job:
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
        backend_ref=ref,
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


def test_a_cluster_that_runs_everything_as_itself_records_its_own_identity_once(
    cluster, teams, alice, priorities, monkeypatch
):
    """A run from before the platform recorded accounts, on a cluster that runs everything as
    itself (simulated; Kubernetes; Slurm without ``team_accounts``): the backend answered
    nothing, so the run stayed unrecorded and was asked about again on every sync until it
    ended. Now it records the backend's own identity ("") at the first sync, and is not asked
    about again."""
    job = _running(cluster, teams, alice, priorities)
    backend = get_backend(cluster)
    asked = []
    answer = backend.run_owners
    monkeypatch.setattr(backend, "run_owners", lambda runs: asked.append(runs) or answer(runs))

    def learn() -> list[int]:
        jobs = list(Job.objects.select_related("team", "cluster").filter(pk=job.pk))
        return learn_run_accounts(backend=backend, jobs=jobs)

    assert learn() == [job.pk]
    job.refresh_from_db()
    assert job.backend_accounts == {"1": ""}
    assert learn() == []
    assert len(asked) == 1


def test_a_run_records_the_platforms_own_identity_at_submission_and_is_never_looked_up(
    platform, submit, monkeypatch
):
    """The account a run is submitted as was recorded only when it was a team's, so every run
    submitted as the platform's own identity (every run of a simulated or Kubernetes cluster, of
    Slurm without ``team_accounts``) had none, and every sync asked the backend about every one
    of them. Now "" is recorded at submission, and the sync asks about none."""
    job_id = submit(
        platform["alice"], team="vision", gpu_model="h100-80gb", simulated_duration_s=100_000
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and job.backend_ref
    assert job.backend_accounts == {"1": ""}
    backend = get_backend(platform["cluster"])
    asked = []
    monkeypatch.setattr(backend, "run_owners", lambda runs: asked.append(runs) or {})
    for _ in range(2):
        sync_all()
    assert asked == []
    job.refresh_from_db()
    assert (job.state, job.attempts, job.backend_accounts) == (JobState.RUNNING, 1, {"1": ""})


def test_many_runs_learn_their_accounts_in_a_few_statements(
    cluster, teams, alice, priorities, django_assert_max_num_queries
):
    """The first sync after the upgrade records every live run of a cluster. One UPDATE per run
    took about a minute at 5,000 runs (benchmarks/run_accounts.py); now one locked read and one
    UPDATE per batch of runs whose records look the same, and still never onto a job that has
    moved on or over a record."""
    fresh = [_running(cluster, teams, alice, priorities, ref=str(5000 + i)) for i in range(30)]
    older = _running(
        cluster, teams, alice, priorities, attempts=2, accounts={"1": "gp-old"}, ref="4000"
    )
    moved = _running(cluster, teams, alice, priorities, ref="4001")
    jobs = list(Job.objects.select_related("team", "cluster").order_by("pk"))
    Job.objects.filter(pk=moved.pk).update(attempts=2, backend_ref="4343")

    # Two batches (attempt 1 with nothing recorded, attempt 2 over attempt 1's record): each a
    # savepoint, the locked read, the UPDATE and the release.
    with django_assert_max_num_queries(2 * 4):
        learnt = learn_run_accounts(backend=get_backend(cluster), jobs=jobs)

    assert learnt == sorted([job.pk for job in fresh] + [older.pk])
    assert all(job.backend_accounts == {"1": ""} for job in jobs[:30])
    assert dict(
        Job.objects.filter(pk__in=[older.pk, moved.pk]).values_list("pk", "backend_accounts")
    ) == {
        older.pk: {"1": "gp-old", "2": ""},
        moved.pk: {},
    }
