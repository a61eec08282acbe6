"""Celery tasks: thin interfaces over the loop. Each takes the single-flight lock through
``run_cycle``; a duplicate delivery or an overlapping beat tick finds the lock taken and returns."""

from __future__ import annotations

from celery import shared_task

from .locks import scheduler_lock
from .loop.cycle import run_cycle as _run_cycle
from .loop.observe import sync_all


@shared_task(
    name="scheduler.tasks.run_cycle",
    autoretry_for=(ConnectionError, TimeoutError),
    retry_backoff=True,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=5,
    ignore_result=True,
)
def run_cycle() -> dict:
    """One Observe → Decide → Enforce cycle (skipped when another is running)."""
    result = _run_cycle()
    return {"ran": result.ran, "started": result.started, "preempted": result.preempted}


@shared_task(name="scheduler.tasks.sync_backends", ignore_result=True)
def sync_backends() -> bool:
    """Observe the backends only (job finishes, node failures); skipped during a cycle. Not on
    the beat (every cycle observes first; see gpuplatform/celery.py): for operators, and for
    messages of this name still queued by an older release."""
    with scheduler_lock() as acquired:
        if acquired:
            sync_all()
        return acquired
