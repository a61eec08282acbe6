"""The scheduling policy as versioned data: each change is a new, numbered, immutable version.

A version holds everything that decides how the cluster is shared: the engine configuration
(``engine_config``: the fields that differ from the engine's defaults, kept as the JSON the policy
package's codec reads, so a change of that format needs no migration here), the teams' fair-share
weights and the priority classes. The version in force is the one with the highest number; rows
are never updated or deleted, so the history is the table.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class PolicySource(models.TextChoices):
    ENVIRONMENT = "environment", "Seeded from SCHEDULER_POLICY"
    EDIT = "edit", "Edited"
    ROLLBACK = "rollback", "Rollback"


# The highest version number a page, the API or a what-if candidate is given: a signed 32-bit
# integer's range, more versions than any history holds.
MAX_VERSION_NUMBER = 2**31
VERSION_NUMBER_RANGE = f"must be a policy version number, from 1 to {MAX_VERSION_NUMBER:,}"


class PolicyVersion(models.Model):
    number = models.PositiveIntegerField(unique=True)
    created_at = models.DateTimeField(db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        related_name="+",
        on_delete=models.SET_NULL,
    )
    # Kept as text so the history survives the user's deletion.
    created_by_name = models.CharField(max_length=150)
    reason = models.CharField(max_length=500)
    source = models.CharField(max_length=16, choices=PolicySource.choices)
    # For a rollback: the version whose content this one restores.
    restores = models.PositiveIntegerField(null=True, blank=True)
    engine_config = models.JSONField(default=dict, blank=True)
    team_weights = models.JSONField(default=dict, blank=True)  # team slug -> weight
    priority_classes = models.JSONField(default=dict, blank=True)  # name -> {value, ...}

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.CheckConstraint(condition=Q(number__gte=1), name="policyversion_number_gte_1"),
            models.CheckConstraint(
                condition=Q(source__in=[s.value for s in PolicySource]),
                name="policyversion_source_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"policy v{self.number}"


class WhatIfStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


LIVE_WHATIF_STATUSES = (WhatIfStatus.QUEUED, WhatIfStatus.RUNNING)


class WhatIfRun(models.Model):
    """One what-if replay of a cluster's history: the window, the candidates (name -> policy),
    where it is, and once done every policy's metrics and chart data. Kept, so
    results can be listed and compared later. At most one live (queued or running) run per
    cluster: a named constraint, not only a check in Python."""

    cluster = models.ForeignKey("scheduler.Cluster", related_name="+", on_delete=models.CASCADE)
    created_at = models.DateTimeField(db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    created_by_name = models.CharField(max_length=150)
    since = models.DateTimeField()
    until = models.DateTimeField()
    # The policy version in force when the run was asked for: the baseline replayed.
    baseline_version = models.PositiveIntegerField(null=True, blank=True)
    # name -> a policy: {"engine_config" (absent: the one in force), "team_weights",
    # "priority_classes"}, in the shape ``policy_apply`` takes (``whatif.whatif_candidates``).
    candidates = models.JSONField(default=dict)
    # name -> policy version number, for candidates taken from an earlier version.
    candidate_versions = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=WhatIfStatus.choices, default=WhatIfStatus.QUEUED
    )
    cancel_requested = models.BooleanField(default=False)
    progress_fraction = models.FloatField(default=0.0)
    progress_text = models.CharField(max_length=200, blank=True)
    # Set by the worker as it progresses: a running run silent for long has lost its worker.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    results = models.JSONField(default=dict, blank=True)  # policy -> metrics
    details = models.JSONField(default=dict, blank=True)  # policy -> chart data

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster"],
                condition=Q(status__in=["queued", "running"]),
                name="whatifrun_one_live_per_cluster",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in WhatIfStatus]),
                name="whatifrun_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(progress_fraction__gte=0) & Q(progress_fraction__lte=1),
                name="whatifrun_progress_fraction_0_1",
            ),
            models.CheckConstraint(condition=Q(since__lt=F("until")), name="whatifrun_window"),
        ]

    def __str__(self) -> str:
        return f"what-if run {self.pk}"

    @property
    def live(self) -> bool:
        return self.status in LIVE_WHATIF_STATUSES
