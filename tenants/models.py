"""Teams (a tree), memberships and roles, priority classes, quotas and API tokens."""

from __future__ import annotations

import hashlib
import secrets as _secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from core.bounds import MAX_GPUS
from core.names import validate_name

_GPUS = [MinValueValidator(0), MaxValueValidator(MAX_GPUS)]
_JOBS = [MinValueValidator(0), MaxValueValidator(1_000_000)]


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
    name = models.CharField(max_length=200, validators=[validate_name])
    parent = models.ForeignKey(
        "self", null=True, blank=True, related_name="children", on_delete=models.PROTECT
    )
    fair_share_weight = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1_000_000.0)]
    )
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

    def closes_cycle(self, parent: Team | None) -> bool:
        """Whether ``parent`` is this team or one of its descendants, so that making it the
        parent would close a cycle in the tree (read from the database as it is now)."""
        if parent is None or self.pk is None:
            return False
        parents = dict(Team.objects.values_list("id", "parent_id"))
        node: int | None = parent.pk
        seen: set[int] = set()
        while node is not None and node not in seen:
            if node == self.pk:
                return True
            seen.add(node)
            node = parents.get(node)
        return False

    def clean(self) -> None:
        # The services refuse a cycle; this refuses it in Django admin too, where a cycle (the
        # research -> vision -> research kind) emptied the portal's team tree of every team
        # under it and made the tree unreadable to export_trace and what-if replays.
        super().clean()
        if self.closes_cycle(self.parent):
            raise ValidationError({"parent": "would make the tree a cycle"})


class MembershipSource(models.TextChoices):
    MANUAL = "manual", "Added in the portal"
    SSO = "sso", "From the identity provider"


class Membership(models.Model):
    """A user's role in a team. ``source`` says who keeps it: the team's admins (``manual``) or
    the identity provider's groups (``sso``: re-evaluated at each single sign-on login, where it
    is created, changed or removed to match the group rules)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="memberships", on_delete=models.CASCADE
    )
    team = models.ForeignKey(Team, related_name="memberships", on_delete=models.CASCADE)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(
        max_length=8, choices=MembershipSource.choices, default=MembershipSource.MANUAL
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class PriorityClass(models.Model):
    name = models.SlugField(unique=True, max_length=64)
    value = models.IntegerField(validators=[MinValueValidator(-(10**9)), MaxValueValidator(10**9)])
    preemptible_by_default = models.BooleanField(default=True)
    # Like a Kubernetes PriorityClass under a quota's scope selector, or a Slurm QOS outside an
    # association's AllowQOS: only teams granted it (TeamEntitlements) may submit in it.
    restricted = models.BooleanField(
        default=False,
        # Also at the database: rows written by code that predates the column stay valid.
        db_default=False,
        help_text="Only teams granted this class in their quota settings may submit in it.",
    )
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
        "catalogue.GpuModel", related_name="quotas", on_delete=models.PROTECT
    )
    guaranteed_gpus = models.PositiveIntegerField(default=0, validators=_GPUS)
    borrow_limit_gpus = models.PositiveIntegerField(default=0, validators=_GPUS)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__slug", "gpu_model__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_model"], name="quota_unique_team_model"),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.guaranteed_gpus}+{self.borrow_limit_gpus} {self.gpu_model}"


class TeamEntitlements(models.Model):
    """What a team may ask of the scheduler beyond its GPU quotas; part of its quota settings,
    set by platform admins (``services.entitlements_set``) and enforced at submission.

    - ``priority_classes``: the restricted priority classes the team (and its sub-teams) may use;
      unrestricted classes are open to every team.
    - ``may_opt_out_of_preemption``: the team (and its sub-teams) may submit ``preemptible:
      false`` in a class whose jobs are preemptible by default.
    - ``max_pending_jobs`` / ``max_pending_jobs_per_user``: caps on the team's own pending jobs
      (arrays count by size), in all and per submitter; empty takes the platform's defaults
      (``JOB_PENDING_MAX_TEAM`` / ``JOB_PENDING_MAX_USER``).
    A team without a row has no grants and the default caps.
    """

    team = models.OneToOneField(
        Team, primary_key=True, related_name="entitlements", on_delete=models.CASCADE
    )
    priority_classes = models.ManyToManyField(PriorityClass, blank=True, related_name="granted_to")
    may_opt_out_of_preemption = models.BooleanField(default=False)
    max_pending_jobs = models.PositiveIntegerField(null=True, blank=True, validators=_JOBS)
    max_pending_jobs_per_user = models.PositiveIntegerField(null=True, blank=True, validators=_JOBS)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "team entitlements"

    def __str__(self) -> str:
        return f"entitlements of {self.team}"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the plain value is shown once."""

    PREFIX = "gpt_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="api_tokens", on_delete=models.CASCADE
    )
    name = models.CharField(max_length=100, validators=[validate_name])
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
        "catalogue.GpuModel", related_name="quota_requests", on_delete=models.PROTECT
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="quota_requests", on_delete=models.PROTECT
    )
    guaranteed_gpus = models.PositiveIntegerField(validators=_GPUS)
    borrow_limit_gpus = models.PositiveIntegerField(validators=_GPUS)
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


class SsoIdentity(models.Model):
    """The identity provider's account behind a user: matched by issuer and subject (never by
    email, so a provider account cannot take over a local one that shares its address)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, related_name="sso_identity", on_delete=models.CASCADE
    )
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True)
    last_login_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique_sub")
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.subject}@{self.issuer})"


class SsoGroupRule(models.Model):
    """Members of identity-provider group ``group`` get ``role`` in ``team`` (platform admins
    edit these in the portal; applied at each single sign-on login)."""

    group = models.CharField(max_length=200)
    team = models.ForeignKey(Team, related_name="sso_rules", on_delete=models.CASCADE)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, related_name="+", on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "team__slug"]
        constraints = [
            models.UniqueConstraint(fields=["group", "team"], name="sso_rule_unique_group_team")
        ]

    def __str__(self) -> str:
        return f"{self.group} -> {self.team} ({self.role})"
