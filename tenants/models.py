"""Teams (a tree), memberships and roles, priority classes, quotas and API tokens."""

from __future__ import annotations

import hashlib
import secrets as _secrets

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Roles allowed to submit and cancel a team's jobs.
SUBMIT_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER})
MANAGE_ROLES = frozenset({Role.OWNER, Role.ADMIN})


class Team(models.Model):
    """A node of the organisation tree. Fair share splits a parent's share among its children
    by ``fair_share_weight``."""

    slug = models.SlugField(unique=True, max_length=64)
    name = models.CharField(max_length=200)
    parent = models.ForeignKey(
        "self", null=True, blank=True, related_name="children", on_delete=models.PROTECT
    )
    fair_share_weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.0)])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(fair_share_weight__gte=0), name="team_weight_non_negative"
            ),
            models.CheckConstraint(condition=~Q(parent=models.F("id")), name="team_not_own_parent"),
        ]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="memberships", on_delete=models.CASCADE
    )
    team = models.ForeignKey(Team, related_name="memberships", on_delete=models.CASCADE)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class PriorityClass(models.Model):
    name = models.SlugField(unique=True, max_length=64)
    value = models.IntegerField()
    preemptible_by_default = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class Quota(models.Model):
    """GPUs of one model a team is guaranteed, and how many more it may borrow while idle."""

    team = models.ForeignKey(Team, related_name="quotas", on_delete=models.CASCADE)
    gpu_model = models.ForeignKey(
        "scheduler.GpuModel", related_name="quotas", on_delete=models.PROTECT
    )
    guaranteed_gpus = models.PositiveIntegerField(default=0)
    borrow_limit_gpus = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__slug", "gpu_model__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_model"], name="quota_unique_team_model"),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.guaranteed_gpus}+{self.borrow_limit_gpus} {self.gpu_model}"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the plain value is shown once."""

    PREFIX = "gpt_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="api_tokens", on_delete=models.CASCADE
    )
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    key_prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @classmethod
    def generate(cls) -> str:
        return cls.PREFIX + _secrets.token_urlsafe(32)


class QuotaRequestStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"


class QuotaRequest(models.Model):
    """A team admin's request to change a team's quota for one GPU model, possibly until a date.

    On approval the change is applied and the applied difference is kept in ``applied_*_delta``,
    so expiry reverts exactly that difference even if other requests or admins changed the quota
    meanwhile.
    """

    team = models.ForeignKey(
        Team, related_name="quota_requests", on_delete=models.CASCADE, db_index=True
    )
    gpu_model = models.ForeignKey(
        "scheduler.GpuModel", related_name="quota_requests", on_delete=models.PROTECT
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="quota_requests", on_delete=models.PROTECT
    )
    guaranteed_gpus = models.PositiveIntegerField()
    borrow_limit_gpus = models.PositiveIntegerField()
    reason = models.TextField()
    until = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=16,
        choices=QuotaRequestStatus.choices,
        default=QuotaRequestStatus.PENDING,
        db_index=True,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="quota_decisions",
        on_delete=models.SET_NULL,
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    applied_guaranteed_delta = models.IntegerField(default=0)
    applied_borrow_delta = models.IntegerField(default=0)
    reverted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in QuotaRequestStatus]),
                name="quota_request_status_valid",
            ),
        ]
        indexes = [models.Index(fields=["status", "until"], name="quota_request_status_until")]

    def __str__(self) -> str:
        return f"{self.team}: {self.guaranteed_gpus} {self.gpu_model} ({self.status})"


class AuditEntry(models.Model):
    """One admin or quota change: who, when, what, the state before and after.

    Written only by ``tenants.audit.audit_record``, which strips secrets (passwords, tokens,
    hashes) from ``before`` and ``after``. Rows are never updated.
    """

    time = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="audit_entries",
        on_delete=models.SET_NULL,
    )
    # Kept as text so the log survives the user's deletion.
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=300, blank=True)
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        related_name="audit_entries",
        on_delete=models.SET_NULL,
        db_index=True,
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target_repr}"
