"""The usage rollups (``UsageDaily`` per team and day, ``UsageJobMonth`` per job and month) that
dashboards, spend and statements' openings read: refreshed by the meter for the keys it touched
(``_refresh_rollups``), rebuilt for a whole month on demand (``usage_rollup_rebuild``). Both
recompute absolute values from the usage rows, so re-running either is harmless.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Case, F, FloatField, Sum, When
from django.db.models.functions import TruncDay

from . import calc
from .models import UsageDaily, UsageJobMonth, UsageRecord

_TELEMETERED = Case(When(idle_fraction__isnull=False, then=F("gpu_seconds")), default=0.0)
_DAILY_SUMS = {
    "s_secs": Sum("gpu_seconds"),
    "s_cost": Sum("cost"),
    "s_unpriced": Sum("unpriced_gpu_seconds"),
    "s_tel": Sum(_TELEMETERED, output_field=FloatField()),
    "s_idle_secs": Sum(F("gpu_seconds") * F("idle_fraction"), output_field=FloatField()),
    "s_idle_cost": Sum(F("cost") * F("idle_fraction"), output_field=FloatField()),
}


def _daily_row(team_id: int, day: date, r: Mapping[str, Any]) -> UsageDaily:
    return UsageDaily(
        team_id=team_id,
        day=day,
        gpu_model_id=r["gpu_model_id"],
        capacity=r["capacity"],
        cluster_id=r["cluster_id"],
        gpu_seconds=r["s_secs"] or 0.0,
        cost=r["s_cost"] or Decimal(0),
        unpriced_gpu_seconds=r["s_unpriced"] or 0.0,
        telemetry_gpu_seconds=r["s_tel"] or 0.0,
        idle_gpu_seconds=r["s_idle_secs"] or 0.0,
        idle_cost=Decimal(repr(r["s_idle_cost"] or 0.0)).quantize(calc.COST_QUANTUM),
    )


def _day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def _refresh_rollups(*, daily_keys: set[tuple[int, date]], job_keys: set[tuple[int, date]]) -> None:
    """Recompute the rollups of the given (team, day) and (job, month) keys from usage rows.
    Absolute recomputation, so re-running it is harmless."""
    teams_by_day: dict[date, set[int]] = defaultdict(set)
    for team_id, day in daily_keys:
        teams_by_day[day].add(team_id)
    for day, team_ids in teams_by_day.items():
        start, end = _day_bounds(day)
        fresh = [
            _daily_row(r["team_id"], day, r)
            for r in UsageRecord.objects.filter(team_id__in=team_ids, hour__gte=start, hour__lt=end)
            .values("team_id", "gpu_model_id", "capacity", "cluster_id")
            .annotate(**_DAILY_SUMS)
        ]
        UsageDaily.objects.filter(team_id__in=team_ids, day=day).delete()
        UsageDaily.objects.bulk_create(fresh)
    jobs_by_month: dict[date, set[int]] = defaultdict(set)
    for job_id, month in job_keys:
        jobs_by_month[month].add(job_id)
    for month, job_ids in jobs_by_month.items():
        start, end = calc.month_bounds(month)
        rows = [
            UsageJobMonth(
                job_id=r["job_id"],
                month=month,
                team_id=r["team_id"],
                gpu_seconds=r["s_secs"],
                cost=r["s_cost"],
            )
            for r in UsageRecord.objects.filter(job_id__in=job_ids, hour__gte=start, hour__lt=end)
            .values("job_id", "team_id")
            .annotate(s_secs=Sum("gpu_seconds"), s_cost=Sum("cost"))
        ]
        # A (job, month) whose usage rows were all deleted (a run the cluster never started, an
        # end before a metered hour) has no row to upsert: its old one would bill it still.
        UsageJobMonth.objects.filter(month=month, job_id__in=job_ids).exclude(
            job_id__in=[row.job_id for row in rows]
        ).delete()
        UsageJobMonth.objects.bulk_create(
            rows,
            batch_size=1000,
            update_conflicts=True,
            unique_fields=["job", "month"],
            update_fields=["gpu_seconds", "cost", "team"],
        )


@transaction.atomic
def usage_rollup_rebuild(*, month: date) -> tuple[int, int]:
    """Rebuild a month's rollups from its usage rows (repair, bulk loads). Idempotent. Returns
    the numbers of daily and job rows written."""
    start, end = calc.month_bounds(month)
    usage = UsageRecord.objects.filter(hour__gte=start, hour__lt=end)
    daily = [
        _daily_row(r["team_id"], r["day"].date(), r)
        # UTC days whatever zone is active: a local day would cross the month's bounds.
        for r in usage.annotate(day=TruncDay("hour", tzinfo=UTC))
        .values("team_id", "day", "gpu_model_id", "capacity", "cluster_id")
        .annotate(**_DAILY_SUMS)
    ]
    UsageDaily.objects.filter(day__gte=start.date(), day__lt=end.date()).delete()
    UsageDaily.objects.bulk_create(daily, batch_size=2000)
    jobs = [
        UsageJobMonth(
            job_id=r["job_id"],
            month=month,
            team_id=r["team_id"],
            gpu_seconds=r["s_secs"],
            cost=r["s_cost"],
        )
        for r in usage.values("job_id", "team_id").annotate(
            s_secs=Sum("gpu_seconds"), s_cost=Sum("cost")
        )
    ]
    UsageJobMonth.objects.filter(month=month).delete()
    UsageJobMonth.objects.bulk_create(jobs, batch_size=2000)
    return len(daily), len(jobs)
