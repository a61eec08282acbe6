"""Every change of a job's state, in one module: start, preempt, requeue, finish, fail, cancel.

The loop's stages (``scheduler.loop``), the API, the portal and arrays all move jobs through these
services and nothing else writes ``Job.state``, except ``services.job_submit`` and array
submission, which create rows already pending. Each service is keyword-only and atomic, and
moves a job with a conditional UPDATE guarded by the state machine (``scheduler.states``), so two
workers racing on one job cannot both win and a repeated call changes nothing. GPUs are released
in the same transaction as the state change that frees them; a run on a backend is stopped only
after commit (``backend_cancel_after_commit``), and the next sync repeats that if it fails. Every
change is an event in the job's timeline and a ``job.status`` message to its team after commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from core import streams
from core.errors import Conflict, Forbidden, NotFound
from tenants.permissions import can_submit_to

from .backends import backend_run_ref, get_backend
from .backends.base import BackendError
from .models import Allocation, Job, JobEvent, Node
from .outcomes import interruption_limit_reason
from .states import (
    HOLDING_STATES,
    LIVE_STATES,
    IllegalTransition,
    JobState,
    check_transition,
    sources_for,
)
from .triggers import request_cycle

log = logging.getLogger(__name__)


# --- Timeline and stream ---------------------------------------------------------------------


def event_record(
    *,
    job: Job,
    kind: str,
    message: str = "",
    data: dict[str, Any] | None = None,
    time: datetime | None = None,
) -> JobEvent:
    """Append an event to the job's timeline."""
    return JobEvent.objects.create(
        job=job, kind=kind, message=message, data=data or {}, time=time or timezone.now()
    )


def job_event_kind(job: Job, placement: dict[str, list[int]] | None = None) -> str:
    """The transition a ``publish_job`` of ``job`` (just moved) announces, from its row: a start
    carries its placement; a running job published without one was resized (nothing resizes a
    running job since no backend can: kept for the one that will); a pending one was requeued
    if it has run before, else just submitted; any other state names itself."""
    if placement:
        return "started"
    if job.state == JobState.RUNNING:
        return "resized"
    if job.state == JobState.PENDING:
        return "requeued" if job.requeued else "submitted"
    return str(job.state)


def job_payload(
    job: Job, placement: dict[str, list[int]] | None = None
) -> streams.JobStatusPayload:
    return {
        "type": "job.status",
        "job": job.pk,
        "team": job.team.slug,
        "name": job.name,
        "state": job.state,
        "why": job.why_pending,
        "estimated_start": job.estimated_start.isoformat() if job.estimated_start else None,
        "placement": placement or {},
        "event": job_event_kind(job, placement),
        "time": timezone.now().isoformat(),
    }


def publish_job(job: Job, placement: dict[str, list[int]] | None = None) -> None:
    # (a dict of its own: streams.publish takes a plain dict, which a TypedDict is not to mypy)
    streams.publish(streams.team_group(job.team_id), dict(job_payload(job, placement)))


# --- Building blocks ---------------------------------------------------------------------------


def job_transition(*, job: Job, target: JobState, **fields: Any) -> bool:
    """Move ``job`` to ``target`` if its current state allows it, as one conditional UPDATE.

    Returns False (and changes nothing) when another worker already moved it elsewhere.
    """
    updated = Job.objects.filter(pk=job.pk, state__in=sources_for(target)).update(
        state=target, **fields
    )
    if updated:
        job.state = target
        for key, value in fields.items():
            setattr(job, key, value)
    return bool(updated)


def release_allocations(*, job: Job, at: datetime | None = None) -> int:
    """End the job's live allocations (its GPUs become free). Idempotent."""
    return Allocation.objects.filter(job=job, ended_at__isnull=True).update(
        ended_at=at or timezone.now()
    )


def backend_cancel_after_commit(job: Job) -> None:
    """Stop the job's current run on its backend once the state change has committed.

    Safe to repeat: a crash or a backend error here is healed by the next sync, whose stale-run
    sweep cancels a live run of a job that no longer holds GPUs."""
    cluster, run = job.cluster, backend_run_ref(job)
    if cluster is None:  # no run to stop (every caller checks the job's cluster_id first)
        return

    def _cancel() -> None:
        try:
            get_backend(cluster).cancel(run)
        except BackendError:
            # The sync reconciles: a run still alive for a cancelled job is cancelled again.
            log.warning(
                "backend cancel of job %s failed; sync will retry", run.job_id, exc_info=True
            )
        except Exception:  # after commit: the state change stands; the stale-run sweep retries
            log.exception("backend cancel of job %s raised; sync will retry", run.job_id)

    transaction.on_commit(_cancel)


# --- pending → running (the apply stage) -------------------------------------------------------


@dataclass(frozen=True)
class JobStart:
    """One start the engine decided, resolved to database ids: the job, the one cluster its
    placement lies in, the placement (node name → GPU indices, ordered by node name: worker i
    runs on the i-th node) and, for an elastic job started below its requested size, the number
    of workers it starts with."""

    job_pk: int
    cluster_id: int
    placement: dict[str, list[int]]
    workers: int | None = None


def job_start_many(
    *, starts: list[JobStart], nodes: Mapping[str, Node], now: datetime
) -> list[int]:
    """Start every pending job of ``starts`` on its placement (``nodes``: the node rows by name);
    returns the ids started. Jobs no longer pending are skipped.

    A few statements for the whole set; if a racing cycle took one of the GPUs (the database
    refuses the double allocation), one savepoint per job, so the others still start. Call it
    inside the apply stage's transaction."""
    if not starts:
        return []
    try:
        with transaction.atomic():
            return _start_batch(starts, nodes, now)
    except IntegrityError:
        log.warning("a batch start lost a race for GPUs; starting jobs one at a time")
        return [start.job_pk for start in starts if _start_one(start, nodes, now)]


_START_FIELDS = {
    "state": JobState.RUNNING,
    "why_pending": "",
    "estimated_start": None,
    "backend_ref": "",
    "preempt_deadline": None,
    "finished_at": None,
}


def _start_batch(starts: list[JobStart], nodes: Mapping[str, Node], now: datetime) -> list[int]:
    ids = [start.job_pk for start in starts]
    claimable = set(
        Job.objects.select_for_update()
        .filter(pk__in=ids, state=JobState.PENDING)
        .values_list("id", flat=True)
    )
    by_cluster: dict[int, list[int]] = {}
    for start in starts:
        if start.job_pk in claimable:
            by_cluster.setdefault(start.cluster_id, []).append(start.job_pk)
    for cluster_id, pks in by_cluster.items():
        Job.objects.filter(pk__in=pks, state=JobState.PENDING).update(
            started_at=now, attempts=F("attempts") + 1, cluster_id=cluster_id, **_START_FIELDS
        )
    for start in starts:
        if start.job_pk in claimable and start.workers is not None:
            # An elastic job started below its requested size runs with that many workers.
            Job.objects.filter(pk=start.job_pk).update(workers=start.workers)
    jobs = Job.objects.select_related("team").in_bulk(list(claimable))
    allocations, events, started = [], [], []
    for start in starts:
        if start.job_pk not in claimable:
            continue
        job = jobs[start.job_pk]
        allocations.extend(_allocations(job, start.placement, nodes, now))
        events.append(_started_event(job, start.placement, now))
        publish_job(job, start.placement)
        started.append(start.job_pk)
    Allocation.objects.bulk_create(allocations, batch_size=2000)
    JobEvent.objects.bulk_create(events, batch_size=2000)
    return started


def _start_one(start: JobStart, nodes: Mapping[str, Node], now: datetime) -> bool:
    try:
        with transaction.atomic():  # a savepoint: a lost race undoes only this job
            moved = Job.objects.filter(pk=start.job_pk, state=JobState.PENDING).update(
                started_at=now,
                attempts=F("attempts") + 1,
                cluster_id=start.cluster_id,
                **_START_FIELDS,
            )
            if not moved:
                return False
            if start.workers is not None:
                Job.objects.filter(pk=start.job_pk).update(workers=start.workers)
            job = Job.objects.select_related("team").get(pk=start.job_pk)
            Allocation.objects.bulk_create(_allocations(job, start.placement, nodes, now))
            _started_event(job, start.placement, now).save()
            publish_job(job, start.placement)
            return True
    except IntegrityError:
        # Another cycle took one of these GPUs first: the database refused the double allocation.
        log.warning("start of job %s lost a race for its GPUs; it stays pending", start.job_pk)
        return False


def _allocations(
    job: Job, placement: dict[str, list[int]], nodes: Mapping[str, Node], now: datetime
) -> list[Allocation]:
    return [
        Allocation(
            job=job,
            node=nodes[name],
            gpu_index=gpu,
            worker_index=worker,
            attempt=job.attempts,
            started_at=now,
        )
        for worker, (name, gpus) in enumerate(placement.items())
        for gpu in gpus
    ]


def _started_event(job: Job, placement: dict[str, list[int]], now: datetime) -> JobEvent:
    return JobEvent(
        job=job,
        kind="started",
        time=now,
        message=f"attempt {job.attempts} on {', '.join(placement)}",
        data={"placement": placement, "attempt": job.attempts},
    )


# --- running → preempted → pending ------------------------------------------------------------


# The latest preemption deadline written. The policy's grace may be any finite number (a huge
# one says "never stop a victim before it checkpoints") but datetime ends in the year 9999;
# past this date the deadline never comes, which is what such a grace means.
LATEST_PREEMPT_DEADLINE = datetime(9000, 1, 1, tzinfo=UTC)


def _preempt_deadline(now: datetime, grace_s: float) -> datetime:
    try:
        return min(now + timedelta(seconds=grace_s), LATEST_PREEMPT_DEADLINE)
    except OverflowError:
        return LATEST_PREEMPT_DEADLINE


def job_preempt(*, job_pk: int, reason: str, grace_s: float, now: datetime) -> bool:
    """Mark a running preemptible job as a preemption victim with ``grace_s`` seconds to write a
    final checkpoint; the enforce stage asks for the checkpoint and requeues it when the grace
    ends (a grace reaching past ``LATEST_PREEMPT_DEADLINE`` ends never, not with an error).
    False when the job is no longer running (or not preemptible)."""
    deadline = _preempt_deadline(now, grace_s)
    moved = Job.objects.filter(pk=job_pk, state=JobState.RUNNING, preemptible=True).update(
        state=JobState.PREEMPTED, preempt_deadline=deadline
    )
    if moved:
        job = Job.objects.select_related("team").get(pk=job_pk)
        event_record(
            job=job,
            kind="preempted",
            time=now,
            message=f"{reason}; checkpoint grace {grace_s:.0f} s",
            data={"reason": reason, "grace_s": grace_s, "attempt": job.attempts},
        )
        publish_job(job)
    return bool(moved)


def job_requeue(
    *, job: Job, now: datetime, reason: str, checkpointed_progress_s: float | None = None
) -> bool:
    """Put a running or preempted job back in the queue to resume from its last checkpoint.

    Releases its GPUs, records the work lost since the checkpoint (GPU-seconds) and an event, all
    in one transaction; returns False if the job had already left those states. A job past its
    interruption limit (``outcomes.interruption_limit_reason``) is failed instead.
    """
    with transaction.atomic():
        locked = Job.objects.select_for_update().filter(pk=job.pk).first()
        if locked is None or locked.state not in (JobState.RUNNING, JobState.PREEMPTED):
            return False
        # Attempts the cluster never started were not interrupted.
        final = interruption_limit_reason(
            attempts=locked.attempts - locked.unstarted_attempts, reason=reason
        )
        if final:
            return job_fail(job=locked, reason=final, now=now)
        started = locked.started_at or now
        progress = locked.checkpointed_progress_s
        if checkpointed_progress_s is not None:
            progress = max(progress, checkpointed_progress_s)
        ran_s = max(0.0, (now - started).total_seconds())
        since_checkpoint = (
            now - max(started, locked.last_checkpoint_at or started)
        ).total_seconds()
        lost = max(0.0, since_checkpoint) * locked.total_gpus
        Job.objects.filter(pk=locked.pk).update(
            state=JobState.PENDING,
            workers=Coalesce("requested_workers", "workers"),
            requeued=True,
            backend_ref="",
            preempt_deadline=None,
            checkpointed_progress_s=progress,
            lost_gpu_seconds=F("lost_gpu_seconds") + lost,
            earlier_runs_s=F("earlier_runs_s") + ran_s,
            why_pending="requeued: waiting to resume from its last checkpoint",
        )
        release_allocations(job=locked, at=now)
        locked.refresh_from_db()
        event_record(
            job=locked,
            kind="requeued",
            time=now,
            message=f"{reason}; resumes from its checkpoint, lost {lost / 3600:.2f} GPU-h",
            data={
                "reason": reason,
                "lost_gpu_s": lost,
                "resume_from_s": progress,
                "attempt": locked.attempts,
            },
        )
        publish_job(locked)
    return True


# --- a run the cluster kept pending ------------------------------------------------------------


def job_requeue_unstarted(
    *, job: Job, now: datetime, reason: str, retry_after: datetime | None = None
) -> bool:
    """Put a running job whose run the cluster never started back in the queue; its run is
    cancelled after commit. Not an interruption: no work was lost (it never ran), the
    interruption limit does not count it (``unstarted_attempts``) and each GPU's allocation
    ends where it began, so nothing is billed for the time the run waited on the cluster.
    With ``retry_after``, the job is not placed again before then.

    Returns False (nothing written) when the job is no longer running on the attempt read."""
    with transaction.atomic():
        locked = (
            Job.objects.select_for_update(of=("self",))
            .select_related("team", "cluster")
            .filter(pk=job.pk)
            .first()
        )
        if locked is None or locked.state != JobState.RUNNING or locked.attempts != job.attempts:
            return False
        Job.objects.filter(pk=locked.pk).update(
            state=JobState.PENDING,
            workers=Coalesce("requested_workers", "workers"),
            requeued=True,  # it was chosen to start already: it keeps its place ahead of peers
            backend_ref="",
            preempt_deadline=None,
            cluster_pending_since=None,
            cluster_pending_reason="",
            unstarted_attempts=F("unstarted_attempts") + 1,
            retry_after=retry_after,
            why_pending=f"its run never started on the cluster ({reason}); to be placed again"
            + (f" after {retry_after:%Y-%m-%d %H:%M:%S} UTC" if retry_after else ""),
        )
        Allocation.objects.filter(job=locked, ended_at__isnull=True).update(
            ended_at=F("started_at")
        )
        locked.refresh_from_db()
        event_record(
            job=locked,
            kind="requeued",
            time=now,
            message=f"{reason}; it never ran: nothing lost, nothing billed",
            data={
                "reason": reason,
                "lost_gpu_s": 0.0,
                "never_ran": True,
                "resume_from_s": locked.checkpointed_progress_s,
                "attempt": locked.attempts,
            },
        )
        publish_job(locked)
        if locked.cluster_id:
            backend_cancel_after_commit(locked)
    request_cycle()
    return True


def job_run_started_late(*, job: Job, started_at: datetime, now: datetime) -> bool:
    """The cluster started the job's run at ``started_at``, after keeping it waiting: its GPUs'
    allocations are closed at their start (nothing billed for the wait) and opened again from
    ``started_at`` (clamped to [the platform's start, ``now``]), the job's start moved there
    (lost work and run time count from it), and the pending marker cleared.

    Returns False when the job is no longer running on the attempt read."""
    with transaction.atomic():
        locked = Job.objects.select_for_update(of=("self",)).filter(pk=job.pk).first()
        if locked is None or locked.state != JobState.RUNNING or locked.attempts != job.attempts:
            return False
        live = list(Allocation.objects.filter(job=locked, ended_at__isnull=True).order_by("id"))
        begin = min((a.started_at for a in live), default=locked.started_at or now)
        started_at = min(max(started_at, begin), now)
        waited_s = (started_at - begin).total_seconds()
        Job.objects.filter(pk=locked.pk).update(
            cluster_pending_since=None,
            cluster_pending_reason="",
            started_at=max(started_at, locked.started_at or started_at),
        )
        if waited_s > 0 and live:
            Allocation.objects.filter(pk__in=[a.pk for a in live]).update(ended_at=F("started_at"))
            Allocation.objects.bulk_create(
                [
                    Allocation(
                        job_id=a.job_id,
                        node_id=a.node_id,
                        gpu_index=a.gpu_index,
                        worker_index=a.worker_index,
                        attempt=a.attempt,
                        started_at=started_at,
                    )
                    for a in live
                ]
            )
        # A run Slurm starts within its first scheduling pass waited under its clock's second:
        # not worth an event on every job.
        if waited_s >= 1.0:
            event_record(
                job=locked,
                kind="cluster_started",
                time=now,
                message=f"started on the cluster after waiting {waited_s:.0f} s; billed from then",
                data={"attempt": locked.attempts, "waited_s": waited_s},
            )
    return True


# --- to a final state --------------------------------------------------------------------------


def job_finish(
    *, job: Job, target: JobState, now: datetime, exit_code: int | None = None, message: str = ""
) -> bool:
    """Move a running (or preempted) job to the final state its backend reported and free its
    GPUs; a cycle is requested after commit (the GPUs can go to the queue). Idempotent."""
    with transaction.atomic():
        moved = Job.objects.filter(
            pk=job.pk, state__in=[JobState.RUNNING, JobState.PREEMPTED]
        ).update(state=target, finished_at=now, exit_code=exit_code, preempt_deadline=None)
        if not moved:
            return False
        release_allocations(job=job, at=now)
        job.refresh_from_db()
        event_record(
            job=job,
            kind=target.value,
            time=now,
            message=message or (f"exit code {exit_code}" if exit_code is not None else ""),
        )
        publish_job(job)
    request_cycle()
    return True


def job_fail(*, job: Job, reason: str, now: datetime | None = None) -> bool:
    """Fail a live job the platform cannot run, alone: the loop calls it when one job's data or
    one backend error about that job would otherwise stop the cycle for everyone.

    The owner reads ``reason`` in the job's ``failed`` event and its ``why``. Its GPUs are freed
    in the same transaction; a run it held is cancelled on the backend after commit. Idempotent:
    False (and nothing written) when the job is no longer live.
    """
    now = now or timezone.now()
    reason = reason[:2000]
    with transaction.atomic():
        locked = (
            Job.objects.select_for_update(of=("self",))
            .select_related("team", "cluster")
            .filter(pk=job.pk)
            .first()
        )
        if locked is None or locked.state not in LIVE_STATES:
            return False
        was_holding = locked.state in HOLDING_STATES
        if not job_transition(
            job=locked,
            target=JobState.FAILED,
            finished_at=now,
            why_pending=reason,
            estimated_start=None,
            preempt_deadline=None,
        ):
            return False
        release_allocations(job=locked, at=now)
        event_record(job=locked, kind="failed", message=reason, time=now)
        publish_job(locked)
        if was_holding and locked.cluster_id:
            backend_cancel_after_commit(locked)
    log.warning("job %s failed by the platform: %s", job.pk, reason)
    return True


def job_cancel(*, user: User, job_id: int) -> Job:
    """Cancel a live job of one of the caller's teams.

    Another team's job is NotFound. A job already final is a Conflict. The backend is told to stop
    after commit; GPUs are released in the same transaction as the state change.

    The job is read under its row lock: a cancel that read it pending while a cycle was starting
    it went on to cancel the running job without stopping its run (only the next sync's
    stale-run sweep did, while the freed GPUs could already be handed on).
    """
    with transaction.atomic():
        job: Job | None = (
            Job.objects.visible_to(user)
            # As strong as the conditional UPDATE it precedes, no stronger: events and
            # allocations of the job written meanwhile do not wait for it.
            .select_for_update(no_key=True, of=("self",))
            # Not the cluster: a row joined to one that changed while we waited for its lock
            # is the one read before the wait (the job's cluster is loaded from the fresh row).
            .select_related("team")
            .filter(pk=job_id)
            .first()
        )
        if job is None:
            raise NotFound("no such job", field="id")
        if not can_submit_to(user, job.team):
            raise Forbidden("viewers cannot cancel jobs", field="id")
        try:
            check_transition(job.state, JobState.CANCELLED)
        except IllegalTransition as exc:
            raise Conflict(f"job is already {job.state}", field="state") from exc
        was_holding = job.state in (JobState.RUNNING, JobState.PREEMPTED)
        now = timezone.now()
        if not job_transition(job=job, target=JobState.CANCELLED, finished_at=now, why_pending=""):
            raise Conflict("job changed state meanwhile; try again", field="state")
        release_allocations(job=job, at=now)
        event_record(job=job, kind="cancelled", message=f"cancelled by {user.get_username()}")
        publish_job(job)
        if was_holding and job.cluster_id:
            backend_cancel_after_commit(job)
        request_cycle()
    return job


def jobs_cancel_locked(*, jobs: list[Job], message: str, now: datetime) -> None:
    """Cancel ``jobs`` (live, already locked by the caller in id order, e.g. an array's members)
    in a few statements: GPUs released and a ``cancelled`` event each, in the caller's
    transaction; runs stopped on their backends after commit."""
    ids = [job.pk for job in jobs]
    Job.objects.filter(pk__in=ids, state__in=sources_for(JobState.CANCELLED)).update(
        state=JobState.CANCELLED, finished_at=now, why_pending=""
    )
    Allocation.objects.filter(job_id__in=ids, ended_at__isnull=True).update(ended_at=now)
    JobEvent.objects.bulk_create(
        [JobEvent(job=job, kind="cancelled", message=message, time=now) for job in jobs],
        batch_size=1000,
    )
    for job in jobs:
        if job.state in HOLDING_STATES:
            if job.cluster_id:
                backend_cancel_after_commit(job)
            job.state, job.why_pending = JobState.CANCELLED, ""
            publish_job(job)
