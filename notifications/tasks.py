"""Celery tasks of notifications: thin wrappers over ``services``, safe to run twice.

Beat (``settings.PERIODIC_TASKS``): ``notifications.tasks.dispatch`` every
``NOTIFY_DISPATCH_SECONDS``; it hands each due message to ``deliver`` (one task per message).
``notifications.tasks.prune`` hourly.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import OperationalError


@shared_task(
    name="notifications.tasks.dispatch",
    autoretry_for=(ConnectionError, TimeoutError, OperationalError),
    retry_backoff=True,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=3,
    ignore_result=True,
)
def dispatch() -> dict[str, Any]:
    """Fan new events out to grouped messages and hand the due ones to ``deliver``."""
    from .dispatch import notifications_dispatch

    result = notifications_dispatch()
    for message_id in result.claimed:
        deliver.delay(message_id)
    return {"ran": result.ran, "events": result.events, "claimed": len(result.claimed)}


@shared_task(
    name="notifications.tasks.deliver",
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=3,
    ignore_result=True,
)
def deliver(message_id: int) -> str:
    """One delivery attempt of a message (retries are scheduled in the database with backoff,
    not by Celery, so they survive worker restarts and show in the delivery log)."""
    from .delivery import message_deliver

    return message_deliver(message_id=message_id)


@shared_task(name="notifications.tasks.prune", ignore_result=True)
def prune() -> dict[str, Any]:
    """Forget finished messages and events past their retention (idempotent)."""
    from .dispatch import notifications_prune

    return notifications_prune()
