"""The observe stage on a run its cluster stopped by itself: Slurm's own preemption (PREEMPTED)
and a node that failed to boot (BOOT_FAIL) requeue the job from its checkpoint, each counted as
the loss it is, instead of ending it as cancelled or as the user's failure. The statuses are the
Slurm backend's own reading of those state words; the jobs run on the simulated cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.backends import backend_run_id
from scheduler.backends.slurm_parsers import SlurmJob, job_status
from scheduler.loop.cycle import run_cycle
from scheduler.loop.observe import _sync_job
from scheduler.models import Job
from scheduler.outcomes import loss_cause
from scheduler.states import JobState

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("word", "cause"), [("PREEMPTED", "preemption"), ("BOOT_FAIL", "node_failure")]
)
def test_a_run_the_cluster_stopped_is_requeued_not_ended(platform, submit, word, cause):
    job_id = submit(platform["alice"], team="vision", simulated_duration_s=100_000).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(started_at=now - timedelta(hours=1))
    job.refresh_from_db()
    run = SlurmJob("42", f"gp-{backend_run_id(job)}-a1", word)
    _sync_job(job, job_status(run, backend_run_id(job), job.attempts), now)

    job.refresh_from_db()
    assert (job.state, job.requeued) == (JobState.PENDING, True)
    assert not job.allocations.filter(ended_at__isnull=True).exists()
    assert job.lost_gpu_seconds == pytest.approx(3600 * job.total_gpus)
    event = job.events.get(kind="requeued")
    assert loss_cause(event.data["reason"]) == cause
    assert not job.events.filter(kind__in=["cancelled", "failed"]).exists()


@pytest.mark.parametrize("how", ["preemption grace over", "node down"])
def test_a_run_whose_state_the_backend_cannot_read_is_still_stopped(
    platform, submit, monkeypatch, how
):
    """A backend leaves a run it cannot read out of its poll (a newer Slurm's state word). The
    loop stops such a run all the same when it must (a preemption's grace is over, its node is
    down), requeued from the checkpoint it last saw: it unpacked exactly one status and failed
    the job instead."""
    from scheduler.backends import get_backend
    from scheduler.loop.enforce import reconcile
    from scheduler.loop.observe import _requeue_jobs_on

    job_id = submit(platform["alice"], team="vision", simulated_duration_s=100_000).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING
    backend = get_backend(job.cluster)
    monkeypatch.setattr(backend, "poll_jobs", lambda runs: [])
    now = timezone.now()
    if how == "node down":
        _requeue_jobs_on(job.allocations.first().node, now)
    else:
        Job.objects.filter(pk=job.pk).update(
            state=JobState.PREEMPTED, preempt_deadline=now - timedelta(seconds=1)
        )
        job.events.create(kind="preempted", time=now - timedelta(seconds=60), message="test")
        reconcile(now=now)

    job.refresh_from_db()
    assert (job.state, job.requeued) == (JobState.PENDING, True)
    assert not job.allocations.filter(ended_at__isnull=True).exists()
    assert not job.events.filter(kind="failed").exists()
