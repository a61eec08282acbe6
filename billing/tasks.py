"""Celery tasks of billing: one meter run (every minute), one sweep of the meter's backlog
(hourly). Thin: each calls one service and returns.

Safe to run on any schedule, duplicated or after a crash: the meter writes absolute values keyed
by (allocation, hour) and alerts fire once per threshold (database constraints). Suggested beat
entry: every 60 s with ``expires`` 54 s (a backlog never replays stale runs).
"""

from __future__ import annotations

from typing import TypedDict

from celery import shared_task
from django.db import OperationalError

from . import meter


class _MeterTaskOptions(TypedDict):
    """The meter tasks' options, typed so that shared_task's overloads (celery-types) see each."""

    autoretry_for: tuple[type[BaseException], ...]
    retry_backoff: bool
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int
    ignore_result: bool


# A meter run that meets a database or broker hiccup is retried, backing off to a minute; its
# work is idempotent (a run meters from the cursors it left), so a retry never bills twice.
_METER_TASK_OPTIONS: _MeterTaskOptions = {
    "autoretry_for": (ConnectionError, TimeoutError, OperationalError),
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
    "ignore_result": True,
}


@shared_task(name="billing.tasks.meter_run", **_METER_TASK_OPTIONS)
def meter_run() -> dict[str, int | bool]:
    """Meter all allocations up to now, meter lost work, fire budget alerts."""
    result = meter.meter_run()
    return {
        "skipped": result.skipped,
        "usage_rows": result.usage_rows,
        "finalized": result.finalized_allocations,
        "lost_rows": result.lost_rows,
        "alerts": len(result.alerts),
    }


@shared_task(name="billing.tasks.meter_backlog", **_METER_TASK_OPTIONS)
def meter_backlog() -> dict[str, int | bool]:
    """Meter allocations ended before the meter's lookback that it never finalized."""
    result = meter.meter_backlog_run()
    return {
        "skipped": result.skipped,
        "backlog_allocations": result.backlog_allocations,
        "usage_rows": result.usage_rows,
        "alerts": len(result.alerts),
    }
