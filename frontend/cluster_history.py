"""The cluster page's utilization history: GPUs in use and unavailable, hour by hour.

Totals only, never whose jobs: every signed-in user sees the cluster page. Read from the
allocations and node events of the window in two queries and swept in Python, so the cost is the
window's rows, not the cluster's whole past.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q

from scheduler.models import Allocation, Node, NodeEvent

HISTORY_DAYS = 35
_DOWN = {NodeEvent.Kind.FAILED: True, NodeEvent.Kind.QUARANTINED: True}
# Retired: the node left the capacity, it is no longer unavailable capacity.
_UP = {NodeEvent.Kind.RECOVERED, NodeEvent.Kind.RELEASED, NodeEvent.Kind.RETIRED}


@dataclass(frozen=True)
class UsageHistory:
    times: list[str]
    in_use: list[float]
    unavailable: list[float]


def _hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def cluster_usage_history(*, now: datetime, days: int = HISTORY_DAYS) -> UsageHistory:
    """Average GPUs in use and GPUs on unavailable nodes per hour over the last ``days`` days
    (the hour in progress excluded: the live chart goes on from ``now``). Empty when nothing
    ran."""
    end = _hour(now)
    start = end - timedelta(days=days)
    hours = int((end - start).total_seconds() // 3600)
    busy = [0.0] * hours
    rows = Allocation.objects.filter(started_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)
    )
    first_used: datetime | None = None
    # A gang's GPUs share their times: one row per (start, end), weighted by the GPUs.
    spans = rows.values_list("started_at", "ended_at").annotate(gpus=Count("id")).order_by()
    for began, ended, count in spans.iterator(chunk_size=5000):
        _spread(busy, start, max(began, start), min(ended or end, end), weight=count)
        first_used = began if first_used is None else min(first_used, began)
    if first_used is None:
        return UsageHistory([], [], [])
    down = [0.0] * hours
    gpus = dict(Node.objects.values_list("pk", "gpu_count"))
    since: dict[int, datetime] = {}
    for node_id, kind, time in (
        NodeEvent.objects.filter(time__lt=end, time__gte=start - timedelta(days=7))
        .order_by("time", "id")
        .values_list("node_id", "kind", "time")
    ):
        if kind in _DOWN:
            since.setdefault(node_id, time)
        elif kind in _UP and node_id in since:
            began = since.pop(node_id)
            _spread(down, start, max(began, start), min(time, end), weight=gpus.get(node_id, 0))
    # Skip the empty hours before the cluster's first job.
    offset = max(0, int((_hour(max(first_used, start)) - start).total_seconds() // 3600))
    return UsageHistory(
        times=[(start + timedelta(hours=h)).isoformat() for h in range(offset, hours)],
        in_use=[round(v, 1) for v in busy[offset:]],
        unavailable=[round(v, 1) for v in down[offset:]],
    )


def _spread(
    series: list[float], start: datetime, lo: datetime, hi: datetime, weight: float = 1
) -> None:
    """Add ``weight`` x the share of each hour of ``series`` that [lo, hi) covers."""
    t = lo
    while t < hi:
        index = int((t - start).total_seconds() // 3600)
        upto = min(hi, start + timedelta(hours=index + 1))
        series[index] += weight * (upto - t).total_seconds() / 3600
        t = upto
