"""Idle-job flagging of the telemetry app: running jobs whose GPUs stayed unused over the idle
window are flagged (and cleared when busy again or ended), each change a ``JobEvent`` published
to the job's team.

``idle_evaluate`` is idempotent: re-running it with the same ``now`` changes nothing more.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal, TypedDict

from django.db import connection, transaction

from core import streams
from scheduler.models import Allocation, Job, JobEvent
from scheduler.states import JobState

from . import conf
from .models import GpuRollup, JobIdleFlag


class JobIdlePayload(TypedDict):
    """Published to the job's team group when a job is flagged idle or busy again."""

    type: Literal["job.idle"]
    job: int
    team: str
    name: str
    idle: bool
    since: str | None
    utilization: float | None
    time: str


def _idle_candidates(now: datetime) -> dict[int, tuple[int, float | None, float | None]]:
    """job id -> (minutes with telemetry, max per-GPU-minute utilization, average) over the idle
    window, for running jobs holding GPUs, read from the rollups in one query."""
    window = timedelta(seconds=conf.get("TELEMETRY_IDLE_WINDOW_SECONDS"))
    alloc, rollup, job = (
        Allocation._meta.db_table,
        GpuRollup._meta.db_table,
        Job._meta.db_table,
    )
    sql = f"""
        SELECT a.job_id, COUNT(DISTINCT r.bucket), MAX(r.util_avg), AVG(r.util_avg),
               MIN(a.started_at)
        FROM {alloc} a
        JOIN {job} j ON j.id = a.job_id
        LEFT JOIN {rollup} r ON r.node_id = a.node_id AND r.gpu_index = a.gpu_index
             AND r.bucket >= %s AND r.bucket < %s AND r.bucket >= a.started_at
        WHERE a.ended_at IS NULL AND j.state = %s
        GROUP BY a.job_id
    """
    with connection.cursor() as cursor:
        at = connection.ops.adapt_datetimefield_value  # as the ORM stores them (SQLite: text)
        cursor.execute(sql, [at(now - window), at(now), JobState.RUNNING.value])
        rows = cursor.fetchall()
    out = {}
    for job_id, minutes, peak, avg, started in rows:
        if isinstance(started, str):  # SQLite hands back text for an aggregate of datetimes
            started = datetime.fromisoformat(started)
            if started.tzinfo is None:
                started = started.replace(tzinfo=UTC)
        if started > now - window:
            continue  # not running long enough to judge
        out[job_id] = (minutes, peak, avg)
    return out


def idle_evaluate(*, now: datetime) -> tuple[list[int], list[int]]:
    """Flag running jobs whose every GPU stayed below ``TELEMETRY_IDLE_UTILIZATION_PCT`` in
    every minute of the last ``TELEMETRY_IDLE_WINDOW_SECONDS`` (with telemetry for at least
    ``TELEMETRY_IDLE_MIN_COVERAGE`` of those minutes); clear flags of jobs busy again or ended.
    Each change is a ``JobEvent`` (``idle`` / ``idle_cleared``) published to the job's team.
    Returns (flagged job ids, cleared job ids). Idempotent."""
    threshold = conf.get("TELEMETRY_IDLE_UTILIZATION_PCT")
    window_s = conf.get("TELEMETRY_IDLE_WINDOW_SECONDS")
    need = max(1, int(conf.get("TELEMETRY_IDLE_MIN_COVERAGE") * window_s / 60))
    candidates = _idle_candidates(now)
    idle = {
        job_id: avg
        for job_id, (minutes, peak, avg) in candidates.items()
        # (the average is None exactly when the peak is: no rollup in the window)
        if minutes >= need and peak is not None and avg is not None and peak < threshold
    }
    flagged_now = set(
        JobIdleFlag.objects.filter(cleared_at__isnull=True).values_list("job_id", flat=True)
    )
    new = sorted(set(idle) - flagged_now)
    gone = sorted(flagged_now - set(idle))
    jobs = Job.objects.select_related("team").in_bulk(new + gone)
    since = now - timedelta(seconds=window_s)
    flagged: list[int] = []
    for job_id in new:
        job = jobs.get(job_id)
        if job is None:
            continue
        with transaction.atomic():
            # Locked until flagged: a job cancelled or ended since its utilization was read is
            # over, not idle, and its team is not told it wastes GPUs.
            running = Job.objects.select_for_update(no_key=True).filter(
                pk=job_id, state=JobState.RUNNING
            )
            if running.values_list("pk", flat=True).first() is None:
                continue
            JobIdleFlag.objects.update_or_create(
                job=job,
                defaults={
                    "idle_since": since,
                    "flagged_at": now,
                    "utilization": round(idle[job_id], 2),
                    "cleared_at": None,
                },
            )
            message = (
                f"GPUs below {threshold:g}% utilization for {window_s / 60:.0f} min "
                f"(average {idle[job_id]:.1f}%)"
            )
            JobEvent.objects.create(
                job=job,
                kind="idle",
                time=now,
                message=message,
                data={"utilization_pct": round(idle[job_id], 2), "since": since.isoformat()},
            )
            _publish_idle(job, True, since, idle[job_id], now)
        flagged.append(job_id)
    for job_id in gone:
        job = jobs.get(job_id)
        if job is None:
            continue
        with transaction.atomic():
            if not JobIdleFlag.objects.filter(job_id=job_id, cleared_at__isnull=True).update(
                cleared_at=now
            ):
                continue
            if job.state == JobState.RUNNING and job_id in candidates:
                JobEvent.objects.create(
                    job=job,
                    kind="idle_cleared",
                    time=now,
                    message=f"GPU utilization back above {threshold:g}%",
                )
            _publish_idle(job, False, None, None, now)
    return flagged, gone


def _publish_idle(
    job: Job, idle: bool, since: datetime | None, utilization: float | None, now: datetime
) -> None:
    payload: JobIdlePayload = {
        "type": "job.idle",
        "job": job.pk,
        "team": job.team.slug,
        "name": job.name,
        "idle": idle,
        "since": since.isoformat() if since else None,
        "utilization": round(utilization, 2) if utilization is not None else None,
        "time": now.isoformat(),
    }
    # (a dict of its own: streams.publish takes a plain dict, which a TypedDict is not to mypy)
    streams.publish(streams.team_group(job.team_id), dict(payload))
