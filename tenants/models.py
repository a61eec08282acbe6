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
