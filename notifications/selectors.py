"""Reads of notification state a user can reach: their own preferences, the webhooks they own
or manage, and the delivery log of those targets. Each starts from what the caller may see."""

from __future__ import annotations

from django.db.models import Prefetch, Q, QuerySet

from tenants.permissions import Caller

from .models import DeliveryAttempt, Message, Webhook
from .services import webhooks_visible_q


def webhook_list(*, user: Caller) -> QuerySet[Webhook]:
    return Webhook.objects.filter(webhooks_visible_q(user)).select_related("team", "owner")


def message_list(*, user: Caller) -> QuerySet[Message]:
    """Messages to the caller's email and to the webhooks they may see, newest first."""
    if not user or not user.is_authenticated:
        return Message.objects.none()
    visible_hooks = Webhook.objects.filter(webhooks_visible_q(user)).values("pk")
    return (
        Message.objects.filter(Q(channel="email", user=user) | Q(webhook_id__in=visible_hooks))
        .select_related("webhook", "webhook__team", "user")
        .prefetch_related(
            Prefetch("attempt_log", queryset=DeliveryAttempt.objects.order_by("number"))
        )
    )


def disabled_webhooks(*, user: Caller) -> list[Webhook]:
    """The caller's disabled hooks (own or managed), and those flagged slow, for the
    portal-wide notice."""
    if not user or not user.is_authenticated:
        return []
    return list(
        webhook_list(user=user)
        .filter(Q(enabled=False) | ~Q(slow_warning=""))
        .order_by("enabled", "-disabled_at", "-slow_since")[:5]
    )
