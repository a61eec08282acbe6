"""Celery tasks: thin interfaces over the loop. ``run_cycle`` takes the single-flight lock; a
duplicate delivery or an overlapping beat tick finds it taken and returns. There is no separate
backend-sync task: every cycle observes the backends first (gpuplatform/celery.py says why)."""

from __future__ import annotations

from celery import shared_task

from .loop.cycle import run_cycle as _run_cycle


@shared_task(
    name="scheduler.tasks.run_cycle",
    autoretry_for=(ConnectionError, TimeoutError),
    retry_backoff=True,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=5,
    ignore_result=True,
)
def run_cycle() -> dict[str, object]:
    """One Observe → Decide → Enforce cycle (skipped when another is running)."""
    result = _run_cycle()
    return {"ran": result.ran, "started": result.started, "preempted": result.preempted}
