"""Reads of the telemetry app for the portal, billing and the admin views.

- ``job_idle_status(job)``: whether the job is flagged idle (for its page).
- ``job_utilization(job, minutes)``: its GPUs' average utilization per minute (rollups).
- ``job_idle_gpu_seconds(start, end, job_ids)``: idle GPU-seconds per job over a time range,
  from one-minute rollups (billing's idle cost).
- ``billing_idle_fractions(slices)``: the same data in billing's ``IdleSource`` shape
  (``BILLING_IDLE_SOURCE = "telemetry.selectors.billing_idle_fractions"``).
- ``node_health(node)``: score, reasons and the agent's last report.

Utilization is in percent. A minute without telemetry is unknown, never idle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from scheduler.models import Allocation, Job, Node

from . import conf
from .models import GpuRollup, JobIdleFlag, NodeTelemetry

BUCKET_S = 60.0


def job_idle_status(job: Job) -> dict[str, Any]:
    """``{"idle": bool, "since", "flagged_at", "utilization_pct", "threshold_pct",
    "window_s"}`` for ``job`` (the caller has already checked the user may see the job)."""
    flag = JobIdleFlag.objects.filter(job_id=job.pk, cleared_at__isnull=True).first()
    return {
        "idle": flag is not None,
        "since": flag.idle_since if flag else None,
        "flagged_at": flag.flagged_at if flag else None,
        "utilization_pct": flag.utilization if flag else None,
        "threshold_pct": conf.get("TELEMETRY_IDLE_UTILIZATION_PCT"),
        "window_s": conf.get("TELEMETRY_IDLE_WINDOW_SECONDS"),
    }


def job_utilization(
    job: Job, *, minutes: int = 60, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Per-minute average utilization (percent) over the job's GPUs for the last ``minutes``,
    oldest first: ``[{"time": datetime, "utilization_pct": float, "gpus": int}]``. One query."""
    now = now or timezone.now()
    since = now - timedelta(minutes=minutes)
    allocations = list(
        Allocation.objects.filter(job=job)
        .filter(_overlaps(since, now))
        .values_list("node_id", "gpu_index", "started_at", "ended_at")
    )
    if not allocations:
        return []
    held: dict[tuple[int, int], list[tuple[datetime, datetime | None]]] = defaultdict(list)
    for node_id, gpu, start, end in allocations:
        held[(node_id, gpu)].append((start, end))
    per_minute: dict[datetime, list[float]] = defaultdict(list)
    rows = GpuRollup.objects.filter(
        node_id__in={n for n, _ in held}, bucket__gte=since, bucket__lt=now
    ).values_list("node_id", "gpu_index", "bucket", "util_avg")
    for node_id, gpu, bucket, util in rows:
        spans = held.get((node_id, gpu))
        if spans and any(s <= bucket and (e is None or bucket < e) for s, e in spans):
            per_minute[bucket].append(util)
    return [
        {"time": b, "utilization_pct": round(sum(v) / len(v), 2), "gpus": len(v)}
        for b, v in sorted(per_minute.items())
    ]


def _overlaps(start: datetime, end: datetime) -> Q:

    return Q(started_at__lt=end) & (Q(ended_at__isnull=True) | Q(ended_at__gt=start))


def job_idle_gpu_seconds(
    *, start: datetime, end: datetime, job_ids: list[int] | None = None
) -> dict[int, float]:
    """Idle GPU-seconds per job within ``[start, end)``: each one-minute rollup of a GPU the job
    held whose average utilization is below ``TELEMETRY_IDLE_UTILIZATION_PCT`` counts 60 s.

    Minute resolution: a rollup minute counts when it starts inside both the range and the
    allocation. Jobs without any idle minute are absent (not zero) when they had no telemetry;
    billing should treat an absent job as "unknown". One query.
    """
    alloc, rollup = Allocation._meta.db_table, GpuRollup._meta.db_table
    # Raw SQL: adapt datetimes as the ORM stores them (SQLite compares them as text).
    at = connection.ops.adapt_datetimefield_value
    params: list[Any] = [
        conf.get("TELEMETRY_IDLE_UTILIZATION_PCT"),
        at(start),
        at(end),
        at(end),
        at(start),
    ]
    job_filter = ""
    if job_ids is not None:
        if not job_ids:
            return {}
        job_filter = f"AND a.job_id IN ({', '.join(['%s'] * len(job_ids))})"
        params.extend(job_ids)
    sql = f"""
        SELECT a.job_id, SUM(CASE WHEN r.util_avg < %s THEN 1 ELSE 0 END)
        FROM {alloc} a
        JOIN {rollup} r ON r.node_id = a.node_id AND r.gpu_index = a.gpu_index
             AND r.bucket >= a.started_at AND (a.ended_at IS NULL OR r.bucket < a.ended_at)
             AND r.bucket >= %s AND r.bucket < %s
        WHERE a.started_at < %s AND (a.ended_at IS NULL OR a.ended_at > %s) {job_filter}
        GROUP BY a.job_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {job_id: float(n or 0) * BUCKET_S for job_id, n in cursor.fetchall()}


class GpuSlice(Protocol):
    """One GPU of one allocation over ``[start, end)`` in one billed hour (billing's
    ``UsageSlice``, which telemetry does not import: billing reads telemetry, not the reverse)."""

    @property
    def allocation_id(self) -> int: ...
    @property
    def node_id(self) -> int: ...
    @property
    def gpu_index(self) -> int: ...
    @property
    def hour(self) -> datetime: ...
    @property
    def start(self) -> datetime: ...
    @property
    def end(self) -> datetime: ...


def billing_idle_fractions(slices: Iterable[GpuSlice]) -> dict[tuple[int, datetime], float]:
    """billing's ``IdleSource``: for each ``UsageSlice`` (one GPU of one allocation over
    ``[start, end)``) with telemetry, the share of the slice its GPU was idle (observed idle
    minutes x 60 s / slice length, so unobserved time is never billed as idle). Slices
    without any rollup are left out (unknown). One query."""
    slices = list(slices)
    if not slices:
        return {}
    threshold = conf.get("TELEMETRY_IDLE_UTILIZATION_PCT")
    lo, hi = min(s.start for s in slices), max(s.end for s in slices)
    by_gpu: dict[tuple[int, int], list[GpuSlice]] = defaultdict(list)
    for s in slices:
        by_gpu[(s.node_id, s.gpu_index)].append(s)
    rows = GpuRollup.objects.filter(
        node_id__in={s.node_id for s in slices}, bucket__gte=lo, bucket__lt=hi
    ).values_list("node_id", "gpu_index", "bucket", "util_avg")
    seen: dict[tuple[int, datetime], float] = {}
    for node_id, gpu, bucket, util in rows:
        for s in by_gpu.get((node_id, gpu), ()):
            if s.start <= bucket < s.end:
                key = (s.allocation_id, s.hour)
                seen[key] = seen.get(key, 0.0) + (BUCKET_S if util < threshold else 0.0)
    out: dict[tuple[int, datetime], float] = {}
    for s in slices:
        key = (s.allocation_id, s.hour)
        if key in seen:
            length = (s.end - s.start).total_seconds()
            out[key] = min(1.0, seen[key] / length) if length > 0 else 0.0
    return out


def node_health(node: Node) -> dict[str, Any]:
    """The node's score, why, and what its agent last reported."""
    t = NodeTelemetry.objects.filter(pk=node.pk).first()
    return {
        "health": node.health,
        "reasons": list(t.health_reasons) if t else [],
        "evaluated_at": t.health_evaluated_at if t else None,
        "last_sample_at": t.last_sample_at if t else None,
        "agent_version": t.agent_version if t else "",
        "agent_dropped": t.agent_dropped if t else 0,
    }
