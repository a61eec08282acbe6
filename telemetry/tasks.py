"""Celery tasks of the telemetry app: thin wrappers over the services, safe to run twice.

Beat (wired in ``gpuplatform/celery.py``): ``telemetry.tick`` every minute (rollups, health
scoring and quarantine, idle flagging, hourly pruning); it skips itself when another process ran
it within ``TELEMETRY_EVALUATE_SECONDS``.
"""

from __future__ import annotations

from celery import shared_task


@shared_task(
    name="telemetry.tick",
    autoretry_for=(ConnectionError, TimeoutError),
    retry_backoff=True,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=3,
    ignore_result=True,
)
def tick() -> bool:
    """One telemetry tick (see ``services.telemetry_tick``); False when another ran recently."""
    from .services import telemetry_tick

    return telemetry_tick()


@shared_task(name="telemetry.prune", ignore_result=True)
def prune() -> dict[str, int]:
    """Delete telemetry older than its retention windows (idempotent)."""
    from django.utils import timezone

    from .rollups import telemetry_prune

    return telemetry_prune(now=timezone.now())
