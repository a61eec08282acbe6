"""The observe stage on a running job whose run the cluster keeps waiting (``scheduler.loop.
cluster_pending``): one ``held_pending`` event, the job put back in the queue after the grace
without an interruption, lost work or billing, its node avoided when the reason was about the
node; a run started within the grace is billed from the cluster's own start. The cluster is the
simulated one, told to keep runs on a node waiting (``pending_nodes``), or the Slurm backend's
own reading of a pending job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.meter import meter_run
from billing.models import UsageRecord
from scheduler.backends import backend_run_id, reset_backends
from scheduler.backends.base import BackendJobState, BackendJobStatus
from scheduler.backends.slurm_parsers import SlurmJob, job_status
from scheduler.loop.cycle import run_cycle
from scheduler.loop.observe import _sync_job
from scheduler.models import Job, Node, NodeEvent, SimulatedRun
from scheduler.states import JobState
from scheduler.transitions import job_requeue

pytestmark = pytest.mark.django_db

RESERVED = "ReqNodeNotAvail, Reserved for maintenance"


def start_job(platform, submit) -> Job:
    job_id = submit(
        platform["alice"], team="vision", gpu_model="h100-80gb", simulated_duration_s=100_000
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and job.backend_ref
    return job


def hold_on_cluster(cluster, nodes: dict[str, str]) -> None:
    cluster.backend_config = {**cluster.backend_config, "pending_nodes": nodes}
    cluster.save(update_fields=["backend_config"])
    reset_backends()


def test_a_run_held_pending_past_the_grace_is_requeued_unbilled_and_placed_elsewhere(
    platform, submit, settings, api_as
):
    settings.SCHEDULER_BACKEND_PENDING_GRACE_SECONDS = 120
    job = start_job(platform, submit)
    (held,) = {a.node.name for a in job.allocations.all()}
    hold_on_cluster(platform["cluster"], {held: RESERVED})

    run_cycle()
    run_cycle()  # seen twice: one event
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.cluster_pending_since is not None
    (event,) = job.events.filter(kind="held_pending")
    assert event.message == f"held pending on the cluster: {RESERVED}"

    # The grace is over.
    Job.objects.filter(pk=job.pk).update(
        cluster_pending_since=timezone.now() - timedelta(seconds=121)
    )
    run_cycle()  # observe requeues it; the same cycle places it again, elsewhere
    job.refresh_from_db()
    assert (job.state, job.attempts, job.unstarted_attempts) == (JobState.RUNNING, 2, 1)
    placed = {a.node.name for a in job.allocations.filter(attempt=2)}
    assert placed and held not in placed
    requeue = job.events.get(kind="requeued")
    assert requeue.data["never_ran"] is True and requeue.data["lost_gpu_s"] == 0.0
    assert RESERVED in requeue.data["reason"]
    assert (job.lost_gpu_seconds, job.earlier_runs_s) == (0.0, 0.0)
    assert job.cluster_pending_since is None and job.cluster_pending_reason == ""
    assert all(a.ended_at == a.started_at for a in job.allocations.filter(attempt=1))
    run = SimulatedRun.objects.get(job_id=backend_run_id(job), attempt=1)
    assert run.cancelled_at is not None
    node = Node.objects.get(name=held)
    assert node.avoid_until > timezone.now()
    assert "kept job" in NodeEvent.objects.filter(node=node).latest("time").message
    shown = api_as(platform["alice"]).get(f"/api/v1/nodes/{node.pk}/").json()
    assert shown["avoid_until"] == node.avoid_until.isoformat().replace("+00:00", "Z")
    meter_run()
    assert not UsageRecord.objects.filter(job_id=job.pk, attempt=1, gpu_seconds__gt=0).exists()


def test_a_run_started_within_the_grace_is_billed_from_the_clusters_start(platform, submit):
    job = start_job(platform, submit)
    begin = job.allocations.get().started_at
    name = backend_run_id(job)
    pending = BackendJobStatus(
        name, 1, BackendJobState.PENDING, reason="Priority", held_by_cluster=True
    )
    _sync_job(job, pending, begin + timedelta(seconds=5))
    meter_run(now=begin + timedelta(seconds=20))  # metered while it waits, as every minute
    job.refresh_from_db()
    assert job.cluster_pending_reason == "Priority"

    started = begin + timedelta(seconds=40)
    running = BackendJobStatus(name, 1, BackendJobState.RUNNING, started_at=started.timestamp())
    _sync_job(job, running, begin + timedelta(seconds=45))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.cluster_pending_since is None
    assert job.started_at == started
    live = job.allocations.get(ended_at__isnull=True)
    assert live.started_at == started
    assert job.events.filter(kind="cluster_started").exists()
    assert not job.events.filter(kind="requeued").exists()

    meter_run(now=begin + timedelta(seconds=100))
    billed = sum(UsageRecord.objects.filter(job_id=job.pk).values_list("gpu_seconds", flat=True))
    assert billed == pytest.approx(60.0)


def test_a_reason_about_the_account_holds_the_job_back_and_avoids_no_node(
    platform, submit, settings
):
    settings.SCHEDULER_BACKEND_PENDING_GRACE_SECONDS = 120
    settings.SCHEDULER_BACKEND_PENDING_AVOID_SECONDS = 600
    job = start_job(platform, submit)
    run = SlurmJob("7", f"gp-{backend_run_id(job)}-a1", "PENDING", reason_code="QOSMaxGRESPerUser")
    status = job_status(run, backend_run_id(job), 1)
    assert not status.pending_on_nodes
    now = timezone.now()
    _sync_job(job, status, now - timedelta(seconds=121))
    job.refresh_from_db()
    _sync_job(job, status, now)
    job.refresh_from_db()
    assert (job.state, job.unstarted_attempts) == (JobState.PENDING, 1)
    assert "QOSMaxGRESPerUser" in job.why_pending
    assert job.retry_after == now + timedelta(seconds=600)
    assert f"placed again after {job.retry_after:%Y-%m-%d %H:%M:%S} UTC" in job.why_pending
    assert not Node.objects.filter(avoid_until__isnull=False).exists()

    # Held back: placed at once, the run would only wait on the limit through another grace.
    run_cycle()
    job.refresh_from_db()
    assert (job.state, job.attempts) == (JobState.PENDING, 1)
    Job.objects.filter(pk=job.pk).update(retry_after=timezone.now() - timedelta(seconds=1))
    run_cycle()
    job.refresh_from_db()
    assert (job.state, job.attempts) == (JobState.RUNNING, 2)


def test_attempts_the_cluster_never_started_are_not_interruptions(platform, submit, settings):
    settings.JOB_MAX_INTERRUPTIONS = 2
    job = start_job(platform, submit)
    # Attempt 1 was given up on while pending on the cluster; this is attempt 2.
    Job.objects.filter(pk=job.pk).update(attempts=2, unstarted_attempts=1)
    job.refresh_from_db()
    assert job_requeue(job=job, now=timezone.now(), reason="preempted by Slurm")
    job.refresh_from_db()
    assert job.state == JobState.PENDING  # one interruption, below the limit of two


def test_a_run_pending_while_it_starts_is_left_alone(platform, submit, settings):
    """A Kubernetes run is pending while its pods pull their image: not held by the cluster."""
    settings.SCHEDULER_BACKEND_PENDING_GRACE_SECONDS = 120
    job = start_job(platform, submit)
    pulling = BackendJobStatus(
        backend_run_id(job), 1, BackendJobState.PENDING, reason="ContainerCreating"
    )
    _sync_job(job, pulling, timezone.now() + timedelta(seconds=600))
    job.refresh_from_db()
    assert (job.state, job.attempts, job.cluster_pending_since) == (JobState.RUNNING, 1, None)
    assert not job.events.filter(kind__in=["held_pending", "requeued"]).exists()


def test_a_run_started_on_the_clusters_first_pass_is_left_as_placed(platform, submit):
    """Slurm reports a fresh run PENDING (reason "None") until its first scheduling pass; one
    started in the same second it was placed keeps its allocations and gets no event."""
    job = start_job(platform, submit)
    placed = job.allocations.get()
    name = backend_run_id(job)
    fresh = BackendJobStatus(name, 1, BackendJobState.PENDING, reason="", held_by_cluster=True)
    _sync_job(job, fresh, placed.started_at + timedelta(seconds=1))
    job.refresh_from_db()
    assert job.cluster_pending_since is not None
    same_second = placed.started_at.replace(microsecond=0).timestamp()
    running = BackendJobStatus(name, 1, BackendJobState.RUNNING, started_at=same_second)
    _sync_job(job, running, placed.started_at + timedelta(seconds=2))
    job.refresh_from_db()
    assert job.cluster_pending_since is None
    assert list(job.allocations.all()) == [placed]
    assert not job.events.filter(kind__in=["held_pending", "cluster_started"]).exists()
