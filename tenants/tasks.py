"""Celery tasks of the tenants app: thin interfaces over services."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from .quotas import quota_requests_expire


@shared_task(name="tenants.tasks.expire_quota_requests", ignore_result=True)
def expire_quota_requests() -> int:
    """Revert approved quota requests whose end date has passed. Idempotent (compare-and-set per
    request), so a duplicate delivery or overlapping beat tick is harmless."""
    return quota_requests_expire(timezone.now())
