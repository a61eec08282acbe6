"""Observe: a running job whose run the cluster keeps waiting (Slurm PENDING).

The platform counts a job as running, and bills its GPUs, from the moment it places it. A
cluster may still keep the run waiting: a maintenance reservation its time limit reaches into
(``ReqNodeNotAvail, Reserved for maintenance``), a QOS or association limit
(``QOSMaxGRESPerUser``), its nodes busy with the cluster's other work. Then:

- the first time the loop sees it, the job's ``cluster_pending_since`` is set, and once the
  cluster gives a reason, one ``held_pending`` event says it ("held pending on the cluster:
  <reason>");
- if the run starts within ``SCHEDULER_BACKEND_PENDING_GRACE_SECONDS``, the marker is cleared
  and billing starts at the cluster's own start time when the backend reports it
  (``transitions.job_run_started_late``);
- past the grace, the run is cancelled and the job put back in the queue
  (``transitions.job_requeue_unstarted``): not an interruption, no lost work, nothing billed.
  When the reason was about the run's nodes, no new run is placed on them for
  ``SCHEDULER_BACKEND_PENDING_AVOID_SECONDS`` (``Node.avoid_until``), so the job goes elsewhere;
  when it was about the job or its account (a QOS limit), the job itself is not placed again for
  as long (``Job.retry_after``): placed at once, it would only hold GPUs through another grace.

Only a run the backend says the cluster holds (``held_by_cluster``): a Kubernetes run whose pods
are pulling their image is left alone, one whose pull failed and is retried is held.

Every write is conditional on the job still running the attempt that was polled, so a sync
repeated after a crash changes nothing more.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings

from ..backends.base import BackendJobState, BackendJobStatus
from ..models import Job, Node, NodeEvent
from ..services import node_event_record
from ..states import JobState
from ..transitions import event_record, job_requeue_unstarted, job_run_started_late

log = logging.getLogger(__name__)


def sync_cluster_pending(job: Job, status: BackendJobStatus, now: datetime) -> bool:
    """Apply what ``status`` says about ``job``'s run waiting on the cluster; True when the job
    was put back in the queue (the caller has nothing more to apply)."""
    if job.state != JobState.RUNNING:
        return False  # a preemption victim is stopped by the enforce stage anyway
    if status.state == BackendJobState.PENDING and status.held_by_cluster:
        return _still_pending(job, status, now)
    if status.state == BackendJobState.RUNNING and job.cluster_pending_since is not None:
        started = now
        if status.started_at is not None:
            started = datetime.fromtimestamp(status.started_at, tz=UTC)
        job_run_started_late(job=job, started_at=started, now=now)
    return False


def _still_pending(job: Job, status: BackendJobStatus, now: datetime) -> bool:
    reason = status.reason[:300]
    attempt = Job.objects.filter(pk=job.pk, state=JobState.RUNNING, attempts=job.attempts)
    if job.cluster_pending_since is None:
        if not attempt.filter(cluster_pending_since__isnull=True).update(cluster_pending_since=now):
            return False
        job.cluster_pending_since = now
    # One event per wait: the first reason the cluster gives (Slurm's is "None" for a moment
    # after submission, until its scheduler has looked at the run).
    first_reason = reason and not job.cluster_pending_reason
    if first_reason and attempt.filter(cluster_pending_reason="").update(
        cluster_pending_reason=reason
    ):
        job.cluster_pending_reason = reason
        event_record(
            job=job,
            kind="held_pending",
            time=now,
            message=f"held pending on the cluster: {reason}",
            data={"reason": reason, "attempt": job.attempts},
        )
    grace = timedelta(seconds=settings.SCHEDULER_BACKEND_PENDING_GRACE_SECONDS)
    if now - job.cluster_pending_since < grace:
        return False
    # The cause holds for a while: its node (a reason about the node) or the job (about the job
    # or its account) is not tried again before then.
    until = now + timedelta(seconds=settings.SCHEDULER_BACKEND_PENDING_AVOID_SECONDS)
    nodes = []
    if status.pending_on_nodes:
        live = Node.objects.filter(allocations__job=job, allocations__ended_at__isnull=True)
        nodes = list(live.distinct())
    waited_s = (now - job.cluster_pending_since).total_seconds()
    why = job.cluster_pending_reason or reason or "no reason given"
    if not job_requeue_unstarted(
        job=job,
        now=now,
        reason=f"the cluster kept its run pending for {waited_s:.0f} s ({why})",
        retry_after=None if status.pending_on_nodes else until,
    ):
        return False
    _avoid(nodes, job, why, until, now)
    log.info("job %s: run pending on the cluster for %.0f s (%s): requeued", job.pk, waited_s, why)
    return True


def _avoid(nodes: list[Node], job: Job, why: str, until: datetime, now: datetime) -> None:
    """No new run on ``nodes`` before ``until``: the cluster would keep it waiting the same way."""
    if not nodes:
        return
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(avoid_until=until)
    for node in nodes:
        node.avoid_until = until
        node_event_record(
            node=node,
            kind=NodeEvent.Kind.DRAINED,
            message=f"the cluster kept job {job.pk}'s run pending here ({why}); no new run "
            f"here until {until:%Y-%m-%d %H:%M:%S} UTC"[:500],
            now=now,
        )
