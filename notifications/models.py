"""Notification state: what happened (``Event``), what each person chose (``Preference``), where
teams and people want it sent (``Webhook``), and what was sent (``Message``, one grouped message
to one target, with a ``DeliveryAttempt`` per try).

The life of a message: ``collecting`` (events join it during the grouping window, or until its
job array is over) → ``queued`` (due, waiting for a worker; also between retries) → ``enqueued``
(handed to Celery) → ``sending`` (one worker holds it) → ``delivered`` | ``failed`` (out of
attempts) | ``dropped`` (its webhook was disabled or deleted meanwhile). Moves are conditional
UPDATEs, so two workers never send one message twice in one attempt.
"""

from __future__ import annotations

import base64
import secrets as _secrets

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.names import validate_name
from tenants.models import Team

from .events import Channel, EventKind


class Event(models.Model):
    """One notifiable occurrence, recorded after its change committed (``intake``). ``title``,
    ``detail`` and ``link`` are filled when the dispatcher fans it out (``fanned_out_at``)."""

    kind = models.CharField(max_length=32, choices=EventKind.choices)
    team = models.ForeignKey(
        Team, null=True, blank=True, related_name="+", on_delete=models.CASCADE
    )
    job_id = models.BigIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_index=True)
    fanned_out_at = models.DateTimeField(null=True, blank=True)
    title = models.CharField(max_length=300, blank=True)
    detail = models.CharField(max_length=1000, blank=True)
    link = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=Q(fanned_out_at__isnull=True),
                name="notif_event_unfanned",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.title or self.job_id or ''}".strip()


class Preference(models.Model):
    """A user's choice for one event on one channel (absent: ``events.DEFAULT_ON``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="notification_preferences", on_delete=models.CASCADE
    )
    event = models.CharField(max_length=32, choices=EventKind.choices)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    enabled = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "event", "channel"], name="notif_pref_unique_user_event_channel"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.event} {self.channel}: {'on' if self.enabled else 'off'}"


class WebhookFormat(models.TextChoices):
    GENERIC = "generic", "Generic JSON (signed)"
    SLACK = "slack", "Slack"
    TEAMS = "teams", "Microsoft Teams"


def new_webhook_secret() -> str:
    # The Standard Webhooks secret format: "whsec_" + base64 of the key bytes.
    return "whsec_" + base64.b64encode(_secrets.token_bytes(24)).decode()


class Webhook(models.Model):
    """An HTTP endpoint that receives notifications: a team's (managed by its owners and admins,
    subscribed to ``events``) or a person's own (``owner``, following their preferences)."""

    team = models.ForeignKey(
        Team, null=True, blank=True, related_name="webhooks", on_delete=models.CASCADE
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="webhooks",
        on_delete=models.CASCADE,
    )
    name = models.CharField(max_length=100, validators=[validate_name])
    url = models.CharField(max_length=500)
    format = models.CharField(
        max_length=16, choices=WebhookFormat.choices, default=WebhookFormat.GENERIC
    )
    secret = models.CharField(max_length=64, default=new_webhook_secret)
    events = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=500, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # Attempts in a row that took over half the delivery deadline (``delivery._count_speed``);
    # at NOTIFY_WEBHOOK_SLOW_AFTER the hook is flagged to its owners with ``slow_warning``.
    consecutive_slow = models.PositiveIntegerField(default=0)
    slow_warning = models.CharField(max_length=500, blank=True)
    slow_since = models.DateTimeField(null=True, blank=True)
    # Only a platform admin sets it: lets the hook reach private, loopback or link-local
    # addresses (an internal chat server, say). Off, such targets are refused.
    allow_private_network = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, related_name="+", on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(team__isnull=True, owner__isnull=False)
                | Q(team__isnull=False, owner__isnull=True),
                name="notif_webhook_team_xor_owner",
            )
        ]

    def __str__(self) -> str:
        return self.name


class MessageStatus(models.TextChoices):
    COLLECTING = "collecting", "Collecting"
    QUEUED = "queued", "Queued"
    ENQUEUED = "enqueued", "Handed to a worker"
    SENDING = "sending", "Sending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"
    DROPPED = "dropped", "Dropped"


class Message(models.Model):
    """One outgoing message to one target (a person's email, or a webhook), grouping the events
    that arrived for it within the window (or, for a job array, until the array is over)."""

    channel = models.CharField(max_length=16, choices=Channel.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="notification_messages",
        on_delete=models.CASCADE,
    )
    webhook = models.ForeignKey(
        Webhook, null=True, blank=True, related_name="messages", on_delete=models.CASCADE
    )
    # "email:<user id>" or "webhook:<id>": one collecting message per target and group.
    target = models.CharField(max_length=40)
    group_key = models.CharField(max_length=40, blank=True)
    events = models.ManyToManyField(Event, related_name="messages")
    status = models.CharField(
        max_length=16, choices=MessageStatus.choices, default=MessageStatus.COLLECTING
    )
    created_at = models.DateTimeField()
    send_after = models.DateTimeField()
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    subject = models.CharField(max_length=300, blank=True)
    event_count = models.PositiveIntegerField(default=0)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["target", "group_key"],
                condition=Q(status="collecting"),
                name="notif_message_one_collecting_per_target",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in MessageStatus]),
                name="notif_message_status_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="notif_message_due"),
        ]

    def __str__(self) -> str:
        return f"{self.target} {self.subject or self.group_key} ({self.status})"


class DeliveryAttempt(models.Model):
    """One try at delivering a message: when, how long, and what the other side said."""

    message = models.ForeignKey(Message, related_name="attempt_log", on_delete=models.CASCADE)
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    response_excerpt = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["message_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["message", "number"], name="notif_attempt_unique_number"
            )
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.message_id}: {'ok' if self.ok else self.error}"
