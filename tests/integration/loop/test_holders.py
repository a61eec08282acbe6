"""The sync reads its running jobs as rows and applies a run's status only when it has news
(``scheduler.loop.holders.has_news``). Skipping is safe only if applying a status without news
would change nothing: every combination of a job's state and a status is applied to a real job
here, and each one ``has_news`` skips leaves the job, its events and its allocations as they
were."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.backends import backend_run_ref
from scheduler.backends.base import BackendJobState, BackendJobStatus
from scheduler.loop.holders import has_news, holders_read, holding_jobs
from scheduler.loop.observe import _sync_job
from scheduler.models import Allocation, Job, JobEvent
from scheduler.states import JobState

pytestmark = pytest.mark.django_db


def _holding(cluster, teams, alice, priorities, *, state, pending_since, progress_s=120.0) -> Job:
    now = timezone.now()
    job = Job.objects.create(
        team=teams["vision"],
        submitter=alice,
        name="j",
        workers=1,
        gpus_per_worker=1,
        priority_class=priorities["research"],
        state=state,
        attempts=1,
        cluster=cluster,
        submitted_at=now - timedelta(hours=1),
        started_at=now - timedelta(minutes=30),
        backend_ref="gp-1-a1",
        backend_accounts={"1": ""},
        checkpointed_progress_s=progress_s,
        cluster_pending_since=pending_since,
        preempt_deadline=now + timedelta(minutes=5) if state == JobState.PREEMPTED else None,
    )
    node = cluster.nodes.first()
    Allocation.objects.create(job=job, node=node, gpu_index=0, started_at=job.started_at)
    return job


def _trace(job: Job) -> tuple:
    row = Job.objects.filter(pk=job.pk).values().get()
    return (
        row,
        list(JobEvent.objects.filter(job=job).values_list("kind", "message")),
        list(Allocation.objects.filter(job=job).values_list("ended_at", flat=True)),
    )


COMBINATIONS = list(
    itertools.product(
        [JobState.RUNNING, JobState.PREEMPTED],
        list(BackendJobState),
        [None, 120.0, 600.0],  # the status' checkpointed progress: none, as recorded, more
        [False, True],  # held by the cluster
        [False, True],  # the job recorded as waiting on the cluster
    )
)


@pytest.mark.parametrize(("state", "backend_state", "progress", "held", "waited"), COMBINATIONS)
def test_a_status_the_sync_skips_would_have_changed_nothing(
    cluster, teams, alice, priorities, state, backend_state, progress, held, waited
):

    now = timezone.now()
    job = _holding(
        cluster, teams, alice, priorities, state=state, pending_since=now if waited else None
    )
    [holder] = holders_read(cluster)
    ref = backend_run_ref(job)
    assert holder.run_ref("") == ref  # the rows name runs as the full job does
    status = BackendJobStatus(
        job_id=ref.job_id,
        attempt=1,
        state=backend_state,
        checkpointed_progress_s=progress,
        held_by_cluster=held,
        started_at=now.timestamp(),
    )
    if has_news(holder, status):
        return  # applied as before: the full job is read and _sync_job runs
    before = _trace(job)
    [full] = holding_jobs(cluster, [holder])
    _sync_job(full, status, now + timedelta(seconds=10))
    assert _trace(job) == before


def test_the_full_jobs_read_leaves_out_a_job_that_moved_to_another_attempt(
    cluster, teams, alice, priorities
):
    job = _holding(cluster, teams, alice, priorities, state=JobState.RUNNING, pending_since=None)
    [holder] = holders_read(cluster)
    Job.objects.filter(pk=job.pk).update(attempts=2)
    assert holding_jobs(cluster, [holder]) == []
    Job.objects.filter(pk=job.pk).update(attempts=1, state=JobState.PENDING)
    assert holding_jobs(cluster, [holder]) == []


def test_the_combinations_include_statuses_the_sync_skips():
    from scheduler.loop.holders import Holder

    skipped = [
        combination
        for state, backend_state, progress, held, waited in COMBINATIONS
        for combination in [(state, backend_state, progress, held, waited)]
        if not has_news(
            Holder(1, 1, state, "vision", "gp-1-a1", {}, 120.0, timezone.now() if waited else None),
            BackendJobStatus(
                "1", 1, backend_state, checkpointed_progress_s=progress, held_by_cluster=held
            ),
        )
    ]
    assert len(skipped) >= 10, skipped  # the test above checks something
