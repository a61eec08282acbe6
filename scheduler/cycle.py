"""One scheduling cycle: Observe → Decide → Enforce.

``run_cycle`` holds the single-flight lock (``scheduler.locks``), then

1. syncs every enabled cluster's backend (``scheduler.sync``): finished runs, node failures,
   checkpoints, quarantine and probation;
2. builds the snapshot (``scheduler.snapshot``) and asks the pure policy engine to decide;
3. applies the decisions in ONE transaction: allocations, state transitions, events. Every
   transition is a conditional UPDATE and every GPU is guarded by the database's partial unique
   constraint, so applying the same decisions twice changes nothing and a racing cycle cannot
   double-allocate;
4. after commit, reconciles the backend with the database (``reconcile``): submits runs that are
   RUNNING in the database but not yet on the backend, asks preemption victims to checkpoint and
   stops them when their grace ends. Because this step reads state rather than remembering what the
   decide step did, a worker killed between commit and backend call is healed by the next cycle.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduler.policy import Decisions, decide, decisions_to_dict, snapshot_to_dict

from . import streams
from .backends import backend_run_id, get_backend
from .backends.base import BackendError, BackendJobSpec
from .locks import scheduler_lock
from .models import Allocation, Cluster, Job, JobEvent
from .services import event_record, publish_job, release_allocations
from .snapshot import SnapshotIndex, build_snapshot
from .states import JobState

log = logging.getLogger(__name__)

# The last cycle's snapshot and decisions, for `dump_snapshot` and the admin endpoint.
LAST_CYCLE_CACHE_KEY = "scheduler:last-cycle"


@dataclass
class CycleResult:
    ran: bool
    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pending: int = 0
    decide_ms: float = 0.0
    total_ms: float = 0.0


def run_cycle(*, now: datetime | None = None, sync: bool = True) -> CycleResult:
    """Run one cycle unless another is running (then return ``ran=False`` at once)."""
    with scheduler_lock() as acquired:
        if not acquired:
            return CycleResult(ran=False)
        t0 = time.perf_counter()
        if sync:
            from .sync import sync_all

            sync_all()
        now = now or timezone.now()
        snapshot, index = build_snapshot(now=now)
        t1 = time.perf_counter()
        decisions = decide(snapshot)
        decide_ms = (time.perf_counter() - t1) * 1000
        result = apply_decisions(decisions, index=index, now=now)
        _remember(snapshot, decisions)
        reconcile(now=timezone.now())
        result.decide_ms = decide_ms
        result.total_ms = (time.perf_counter() - t0) * 1000
        _observe_cycle(result)
        return result


def _observe_cycle(result: CycleResult) -> None:
    try:
        from .metrics import observe_cycle
    except ImportError:
        return
    observe_cycle(result)


def _remember(snapshot, decisions: Decisions) -> None:
    from django.core.cache import cache

    try:
        cache.set(
            LAST_CYCLE_CACHE_KEY,
            {"snapshot": snapshot_to_dict(snapshot), "decisions": decisions_to_dict(decisions)},
            timeout=24 * 3600,
        )
    except Exception:  # a cache outage must not stop scheduling
        log.warning("could not store the last cycle's snapshot", exc_info=True)


def apply_decisions(decisions: Decisions, *, index: SnapshotIndex, now: datetime) -> CycleResult:
    """Write the decisions in one transaction. Idempotent: re-applying changes nothing."""
    result = CycleResult(ran=True)
    with transaction.atomic():
        result.started = _apply_starts(decisions.start, index, now)
        for preempt in decisions.preempt:
            job_pk = index.job_pk.get(preempt.job)
            if job_pk is not None and _apply_preempt(job_pk, preempt, now):
                result.preempted.append(job_pk)
        for resize in decisions.resize:
            job_pk = index.job_pk.get(resize.job)
            if job_pk is not None and resize.placement is not None:
                _apply_resize(job_pk, resize, index, now)
        result.pending = _apply_pending(decisions, index)
    return result


def _apply_starts(starts, index: SnapshotIndex, now: datetime) -> list[int]:
    """Start every job of the decision set in a few statements; if a racing cycle took one of
    the GPUs (the database refuses the double allocation), fall back to one savepoint per job so
    the others still start."""
    candidates = []
    for start in starts:
        job_pk = index.job_pk.get(start.job)
        if job_pk is None:
            continue
        clusters = {index.node_by_name[name].cluster_id for name in start.placement}
        if len(clusters) != 1:
            log.error("engine placed job %s across clusters %s; not started", job_pk, clusters)
            continue
        candidates.append((job_pk, start, clusters.pop()))
    if not candidates:
        return []
    try:
        with transaction.atomic():
            return _start_batch(candidates, index, now)
    except IntegrityError:
        log.warning("a batch start lost a race for GPUs; starting jobs one at a time")
        return [pk for pk, start, _ in candidates if _apply_start(pk, start, index, now)]


def _start_batch(candidates, index: SnapshotIndex, now: datetime) -> list[int]:
    ids = [job_pk for job_pk, _, _ in candidates]
    claimable = set(
        Job.objects.select_for_update()
        .filter(pk__in=ids, state=JobState.PENDING)
        .values_list("id", flat=True)
    )
    by_cluster: dict[int, list[int]] = {}
    for job_pk, _, cluster_id in candidates:
        if job_pk in claimable:
            by_cluster.setdefault(cluster_id, []).append(job_pk)
    for cluster_id, pks in by_cluster.items():
        Job.objects.filter(pk__in=pks, state=JobState.PENDING).update(
            state=JobState.RUNNING,
            started_at=now,
            attempts=F("attempts") + 1,
            cluster_id=cluster_id,
            why_pending="",
            estimated_start=None,
            backend_ref="",
            preempt_deadline=None,
            finished_at=None,
        )
    for job_pk, start, _ in candidates:
        if job_pk in claimable and start.workers is not None:
            # An elastic job started below its requested size runs with that many workers.
            Job.objects.filter(pk=job_pk).update(workers=start.workers)
    jobs = Job.objects.select_related("team").in_bulk(list(claimable))
    allocations, events, started = [], [], []
    for job_pk, start, _ in candidates:
        if job_pk not in claimable:
            continue
        job = jobs[job_pk]
        placement = {n: list(g) for n, g in sorted(start.placement.items())}
        for worker, (name, gpus) in enumerate(placement.items()):
            node = index.node_by_name[name]
            allocations.extend(
                Allocation(
                    job=job,
                    node=node,
                    gpu_index=gpu,
                    worker_index=worker,
                    attempt=job.attempts,
                    started_at=now,
                )
                for gpu in gpus
            )
        events.append(
            JobEvent(
                job=job,
                kind="started",
                time=now,
                message=f"attempt {job.attempts} on {', '.join(placement)}",
                data={"placement": placement, "attempt": job.attempts},
            )
        )
        publish_job(job, placement)
        started.append(job_pk)
    Allocation.objects.bulk_create(allocations, batch_size=2000)
    JobEvent.objects.bulk_create(events, batch_size=2000)
    return started


def _apply_start(job_pk: int, start, index: SnapshotIndex, now: datetime) -> bool:
    nodes = [index.node_by_name[name] for name in start.placement]
    clusters = {node.cluster_id for node in nodes}
    if len(clusters) != 1:
        log.error("engine placed job %s across clusters %s; not started", job_pk, clusters)
        return False
    try:
        with transaction.atomic():  # a savepoint: a lost race undoes only this job
            moved = Job.objects.filter(pk=job_pk, state=JobState.PENDING).update(
                state=JobState.RUNNING,
                started_at=now,
                attempts=F("attempts") + 1,
                cluster_id=clusters.pop(),
                why_pending="",
                estimated_start=None,
                backend_ref="",
                preempt_deadline=None,
                finished_at=None,
            )
            if not moved:
                return False
            if start.workers is not None:
                Job.objects.filter(pk=job_pk).update(workers=start.workers)
            job = Job.objects.select_related("team").get(pk=job_pk)
            allocations = []
            for worker, (name, gpus) in enumerate(sorted(start.placement.items())):
                node = index.node_by_name[name]
                for gpu in gpus:
                    allocations.append(
                        Allocation(
                            job=job,
                            node=node,
                            gpu_index=gpu,
                            worker_index=worker,
                            attempt=job.attempts,
                            started_at=now,
                        )
                    )
            Allocation.objects.bulk_create(allocations)
            placement = {n: list(g) for n, g in sorted(start.placement.items())}
            event_record(
                job=job,
                kind="started",
                time=now,
                message=f"attempt {job.attempts} on {', '.join(placement)}",
                data={"placement": placement, "attempt": job.attempts},
            )
            publish_job(job, placement)
            return True
    except IntegrityError:
        # Another cycle took one of these GPUs first: the database refused the double allocation.
        log.warning("start of job %s lost a race for its GPUs; it stays pending", job_pk)
        return False


def _apply_preempt(job_pk: int, preempt, now: datetime) -> bool:
    deadline = now + timedelta(seconds=preempt.grace_s)
    moved = Job.objects.filter(pk=job_pk, state=JobState.RUNNING, preemptible=True).update(
        state=JobState.PREEMPTED, preempt_deadline=deadline
    )
    if moved:
        job = Job.objects.select_related("team").get(pk=job_pk)
        event_record(
            job=job,
            kind="preempted",
            time=now,
            message=f"{preempt.reason}; checkpoint grace {preempt.grace_s:.0f} s",
            data={"reason": preempt.reason, "grace_s": preempt.grace_s},
        )
        publish_job(job)
    return bool(moved)


def _apply_resize(job_pk: int, resize, index: SnapshotIndex, now: datetime) -> None:
    """Move an elastic running job to ``resize.workers`` workers on ``resize.placement``.

    ``Job.workers`` holds an elastic job's current size, so the next snapshot sees the job as it
    now runs; a resize outside the job's range or of the wrong GPU count is ignored."""
    job = Job.objects.select_related("team").filter(pk=job_pk, state=JobState.RUNNING).first()
    if job is None or job.elastic_min_workers is None or resize.workers == job.workers:
        return
    if not job.elastic_min_workers <= resize.workers <= job.elastic_max_workers:
        log.error("engine resized job %s outside its range to %s", job_pk, resize.workers)
        return
    wanted = {(index.node_by_name[n].pk, g) for n, gpus in resize.placement.items() for g in gpus}
    if len(wanted) != resize.workers * job.gpus_per_worker:
        log.error("engine resized job %s to a placement of %s GPUs", job_pk, len(wanted))
        return
    live = {(a.node_id, a.gpu_index): a for a in job.allocations.filter(ended_at__isnull=True)}
    try:
        with transaction.atomic():
            Allocation.objects.filter(
                pk__in=[a.pk for key, a in live.items() if key not in wanted]
            ).update(ended_at=now)
            Allocation.objects.bulk_create(
                Allocation(
                    job=job, node_id=node_id, gpu_index=g, attempt=job.attempts, started_at=now
                )
                for node_id, g in sorted(wanted - set(live))
            )
            Job.objects.filter(pk=job.pk).update(workers=resize.workers)
    except IntegrityError:
        log.warning("resize of job %s lost a race for GPUs; unchanged", job_pk)
        return
    previous, job.workers = job.workers, resize.workers
    event_record(
        job=job,
        kind="resized",
        time=now,
        message=f"elastic resize from {previous} to {resize.workers} workers",
        data={"workers": resize.workers, "previous": previous},
    )
    publish_job(job)


PENDING_PUBLISH_MAX = 200


def _apply_pending(decisions: Decisions, index: SnapshotIndex) -> int:
    """Store each pending job's reason and estimate; only rows whose text changed are written.

    Estimates are rounded to the minute: users read them as "about when", and exact seconds
    would rewrite thousands of rows every cycle as reservations shift slightly.
    """
    wanted: dict[int, tuple[str, datetime | None]] = {}
    # Jobs of one shape waiting for one reason share the engine's text: convert each text once.
    shown_why: dict[str, str] = {}
    for item in decisions.pending:
        job_pk = index.job_pk.get(item.job)
        if job_pk is None:
            continue
        estimate = None
        if item.estimated_start is not None:
            estimate = datetime.fromtimestamp(round(item.estimated_start / 60) * 60, tz=UTC)
        why = shown_why.get(item.why)
        if why is None:
            why = shown_why[item.why] = _humanize_times(item.why)[:2000]
        wanted[job_pk] = (why, estimate)
    if not wanted:
        return 0
    changed: list[tuple[int, str, datetime | None, int, str, str]] = []
    for job_pk, (why, estimate) in wanted.items():
        shown = index.pending_shown.get(job_pk)
        if shown is None:
            continue
        team_id, team_slug, name, old_why, old_estimate = shown
        if old_why != why or old_estimate != estimate:
            changed.append((job_pk, why, estimate, team_id, team_slug, name))
    _write_pending_reasons([(pk, why, estimate) for pk, why, estimate, *_ in changed])
    # One jobs.status batch per team per cycle, not one message per job (capped: a backlog's
    # first cycle can change thousands of reasons; the pages re-read on connect anyway).
    now = timezone.now().isoformat()
    batches: dict[int, list[dict]] = {}
    for job_pk, why, estimate, team_id, team_slug, name in changed[:PENDING_PUBLISH_MAX]:
        batches.setdefault(team_id, []).append(
            {
                "type": "job.status",
                "job": job_pk,
                "team": team_slug,
                "name": name,
                "state": JobState.PENDING.value,
                "why": why,
                "estimated_start": estimate.isoformat() if estimate else None,
                "placement": {},
                "time": now,
            }
        )
    for team_id, jobs in batches.items():
        streams.publish(
            streams.team_group(team_id), {"type": "jobs.status", "jobs": jobs, "time": now}
        )
    return len(wanted)


_ENGINE_TIME = re.compile(r"\bt=(\d+(?:\.\d+)?)")


def _humanize_times(why: str) -> str:
    """The engine speaks in clock seconds (``t=1764685234``); people read ``14:05 UTC``."""
    return _ENGINE_TIME.sub(
        lambda m: datetime.fromtimestamp(round(float(m.group(1)) / 60) * 60, tz=UTC).strftime(
            "%Y-%m-%d %H:%M UTC"
        ),
        why,
    )


def _write_pending_reasons(rows: list[tuple[int, str, datetime | None]]) -> None:
    """One UPDATE … FROM unnest(arrays) on PostgreSQL (bulk_update's CASE chains dominated the
    cycle at 10,000 pending jobs); bulk_update elsewhere."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        Job.objects.bulk_update(
            [Job(pk=pk, why_pending=why, estimated_start=est) for pk, why, est in rows],
            ["why_pending", "estimated_start"],
            batch_size=500,
        )
        return
    table = Job._meta.db_table
    ids, whys, estimates = zip(*rows, strict=True)
    # Three array parameters whatever the row count: cheap to bind and to plan.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS j SET why_pending = v.why, estimated_start = v.est "
            "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS v(id, why, est) "
            "WHERE j.id = v.id AND j.state = 'pending'",
            [list(ids), list(whys), list(estimates)],
        )


# --- Enforce ---------------------------------------------------------------------------------


def job_spec(job: Job, placement: dict[str, list[int]]) -> BackendJobSpec:
    env = {str(k): str(v) for k, v in (job.env or {}).items()}
    if job.checkpoint_interval_s:
        env.setdefault("CHECKPOINT_INTERVAL_S", str(job.checkpoint_interval_s))
    service = job.simulated_duration_s
    if service is None and job.runtime_limit_s:
        service = job.runtime_limit_s * 0.6
    return BackendJobSpec(
        job_id=backend_run_id(job),
        attempt=job.attempts,
        name=job.name,
        team=job.team.slug,
        image=job.image,
        command=job.command,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        placement={n: tuple(g) for n, g in sorted(placement.items())},
        env=env,
        runtime_limit_s=job.runtime_limit_s,
        checkpoint_grace_s=120,
        service_time_s=service,
        resume_from_s=job.checkpointed_progress_s,
    )


def _mark_backend(cluster: Cluster, error: str = "") -> None:
    available = not error
    if cluster.backend_available != available or cluster.backend_error != error:
        Cluster.objects.filter(pk=cluster.pk).update(
            backend_available=available,
            backend_error=error[:2000],
            backend_checked_at=timezone.now(),
        )
        cluster.backend_available, cluster.backend_error = available, error


def reconcile(*, now: datetime) -> None:
    """Make each backend match the database. Safe to run any number of times."""
    # Runs that are RUNNING in the database but not yet submitted (or whose submit was lost).
    to_submit = list(
        Job.objects.filter(state=JobState.RUNNING, backend_ref="").select_related("team", "cluster")
    )
    placements: dict[int, dict[str, list[int]]] = {}
    for job_pk, name, gpu in (
        Allocation.objects.filter(job__in=to_submit, ended_at__isnull=True)
        .order_by("job_id", "node__name", "gpu_index")
        .values_list("job_id", "node__name", "gpu_index")
    ):
        placements.setdefault(job_pk, {}).setdefault(name, []).append(gpu)
    submitted: list[tuple[int, int, str]] = []
    for job in to_submit:
        if job.cluster is None:
            continue
        try:
            ref = get_backend(job.cluster).submit(job_spec(job, placements.get(job.pk, {})))
        except BackendError as exc:
            _mark_backend(job.cluster, f"submit failed: {exc}")
            continue
        _mark_backend(job.cluster)
        submitted.append((job.pk, job.attempts, ref))
    for job_pk, attempts, ref in submitted:
        Job.objects.filter(pk=job_pk, state=JobState.RUNNING, attempts=attempts).update(
            backend_ref=ref
        )
    # Preemption victims: ask for a checkpoint, then stop and requeue when the grace is over.
    for job in Job.objects.filter(state=JobState.PREEMPTED).select_related("team", "cluster"):
        backend = get_backend(job.cluster) if job.cluster else None
        try:
            if backend is not None and job.backend_ref:
                backend.checkpoint(backend_run_id(job), job.attempts)
            if job.preempt_deadline and job.preempt_deadline <= now:
                progress = None
                if backend is not None and job.backend_ref:
                    (status,) = backend.poll_jobs([(backend_run_id(job), job.attempts)])
                    progress = status.checkpointed_progress_s
                    backend.cancel(backend_run_id(job), job.attempts)
                job_requeue(job=job, now=now, reason="preempted", checkpointed_progress_s=progress)
        except BackendError as exc:
            if job.cluster:
                _mark_backend(job.cluster, f"preemption failed: {exc}")


def job_requeue(
    *, job: Job, now: datetime, reason: str, checkpointed_progress_s: float | None = None
) -> bool:
    """Put a running or preempted job back in the queue to resume from its last checkpoint.

    Releases its GPUs, records the work lost since the checkpoint (GPU-seconds) and an event, all
    in one transaction; returns False if the job had already left those states.
    """
    with transaction.atomic():
        locked = Job.objects.select_for_update().filter(pk=job.pk).first()
        if locked is None or locked.state not in (JobState.RUNNING, JobState.PREEMPTED):
            return False
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
            requeued=True,
            backend_ref="",
            preempt_deadline=None,
            checkpointed_progress_s=progress,
            lost_gpu_s=F("lost_gpu_s") + lost,
            # seconds, as the engine reads it (it multiplies by the job's GPUs itself)
            attained_service_s=F("attained_service_s") + ran_s,
            why_pending="requeued: waiting to resume from its last checkpoint",
        )
        release_allocations(job=locked, at=now)
        locked.refresh_from_db()
        event_record(
            job=locked,
            kind="requeued",
            time=now,
            message=f"{reason}; resumes from its checkpoint, lost {lost / 3600:.2f} GPU-h",
            data={"reason": reason, "lost_gpu_s": lost, "resume_from_s": progress},
        )
        publish_job(locked)
    return True


def last_cycle() -> dict | None:
    from django.core.cache import cache

    return cache.get(LAST_CYCLE_CACHE_KEY)
