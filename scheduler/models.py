"""Scheduler state: clusters, nodes, jobs, GPU allocations and events.

Hard invariants live in the database as named constraints, so no code path (a racing worker, a
bug, a manual shell) can break them: a GPU (node, index) is held by at most one live allocation.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Self, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from catalogue.models import GpuModel
from core.bounds import (
    MAX_ARRAY_SIZE,
    MAX_DURATION_S,
    MAX_GPUS_PER_WORKER,
    MAX_WORKERS,
)
from core.names import validate_name
from tenants.models import Membership, Team

from .states import JobState

if TYPE_CHECKING:  # tenants.permissions imports DRF, which models need not load
    from tenants.permissions import Caller

# Bounds of the numeric fields users set (core.bounds reads them for the API and the portal).
_WORKERS = [MinValueValidator(1), MaxValueValidator(MAX_WORKERS)]
_DURATION = [MinValueValidator(1), MaxValueValidator(MAX_DURATION_S)]

# What a custom queryset holds: generic rather than fixed to its model, so that a row of an
# annotate()d queryset keeps its annotations (WithAnnotations[Job, ...]) when it is iterated or
# read with get() or first(), as django-stubs documents for custom querysets.
_M = TypeVar("_M", bound=models.Model, covariant=True)


class BackendKind(models.TextChoices):
    SIMULATED = "simulated", "Simulated"
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"


class Interconnect(models.TextChoices):
    """How a cluster's nodes talk to each other (docs/routing.md)."""

    NVLINK = "nvlink", "NVLink"
    INFINIBAND = "infiniband", "InfiniBand"
    ETHERNET = "ethernet", "Ethernet"


class Cluster(models.Model):
    name = models.SlugField(unique=True, max_length=64)
    # Routing facts (docs/routing.md): where the cluster is, and how its nodes are linked.
    region = models.CharField(max_length=64, blank=True)
    # InfiniBand by default: clusters that predate routing spread gangs over nodes, and keep doing
    # so; an admin who says "ethernet" keeps communication-heavy gangs on one node there.
    interconnect = models.CharField(
        max_length=16, choices=Interconnect.choices, default=Interconnect.INFINIBAND
    )
    backend_kind = models.CharField(
        max_length=16, choices=BackendKind.choices, default=BackendKind.SIMULATED
    )
    backend_config = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    # Set by the loop: whether the backend answered on its last call.
    backend_available = models.BooleanField(default=True)
    backend_error = models.TextField(blank=True)
    backend_checked_at = models.DateTimeField(null=True, blank=True)
    # Retirement (scheduler.retirement): since when an admin retires the cluster (its nodes are
    # retired, no new job is routed to it), and when it was done (nothing ran on it any more; the
    # loop stopped polling it). Its jobs, events and costs are kept: nothing is deleted.
    retiring_since = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(interconnect__in=[c.value for c in Interconnect]),
                name="cluster_interconnect_valid",
            ),
            models.CheckConstraint(
                condition=Q(retired_at__isnull=True) | Q(retiring_since__isnull=False),
                name="cluster_retired_after_retiring",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Dataset(models.Model):
    """A dataset jobs name (``Job.dataset``): its size, for the cost of moving it to a cluster
    that lacks it, and where it may be read (residency). A name no row describes has no size and
    no residency: it may be read anywhere and moving it is free."""

    name = models.CharField(max_length=200, validators=[validate_name], unique=True)
    size_gb = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.0)])
    # The regions the dataset may be read in (a list of region names); null: anywhere.
    residency_regions = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(size_gb__isnull=True) | Q(size_gb__gte=0), name="dataset_size_gte_0"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ClusterDataset(models.Model):
    """``cluster`` holds a copy of ``dataset``; moving it out costs ``egress_price_per_gb``."""

    cluster = models.ForeignKey(Cluster, related_name="dataset_copies", on_delete=models.CASCADE)
    dataset = models.ForeignKey(Dataset, related_name="copies", on_delete=models.CASCADE)
    egress_price_per_gb = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        default=0,
        validators=[MinValueValidator(0), MaxValueValidator(1000)],
    )

    class Meta:
        ordering = ["dataset__name", "cluster__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "dataset"], name="clusterdataset_unique_pair"
            ),
            models.CheckConstraint(
                condition=Q(egress_price_per_gb__gte=0), name="clusterdataset_egress_gte_0"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.dataset} on {self.cluster}"


class TeamClusterAccess(models.Model):
    """``team`` may use ``cluster``. A team without rows may use every cluster; a subteam is
    also held to each ancestor's list (the engine intersects them)."""

    team = models.ForeignKey(Team, related_name="cluster_access", on_delete=models.CASCADE)
    cluster = models.ForeignKey(Cluster, related_name="team_access", on_delete=models.CASCADE)

    class Meta:
        ordering = ["team__slug", "cluster__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "cluster"], name="teamcluster_unique_pair"),
        ]

    def __str__(self) -> str:
        return f"{self.team} may use {self.cluster}"


class NodeState(models.TextChoices):
    READY = "ready", "Ready"
    DRAINING = "draining", "Draining"
    QUARANTINED = "quarantined", "Quarantined"
    DOWN = "down", "Down"
    # Decommissioned (scheduler.retirement): out of capacity for good, its history kept.
    RETIRED = "retired", "Retired"


class NodeQuerySet(models.QuerySet[_M]):
    def in_capacity(self) -> Self:
        """The nodes the platform counts as its capacity: of enabled clusters, not retired.
        What the snapshot schedules on, quotas' overcommit checks and capacity figures read."""
        return self.filter(cluster__enabled=True).exclude(state=NodeState.RETIRED)


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, related_name="nodes", on_delete=models.CASCADE)
    name = models.CharField(max_length=128)
    gpu_model = models.ForeignKey(GpuModel, related_name="nodes", on_delete=models.PROTECT)
    gpu_count = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(1024)]
    )
    zone = models.CharField(max_length=64, blank=True)
    rack = models.CharField(max_length=64, blank=True)
    nvlink_domain = models.CharField(max_length=64, blank=True)
    fabric = models.CharField(max_length=64, blank=True)
    spot = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.READY)
    state_reason = models.CharField(max_length=300, blank=True)
    health = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    datasets = models.JSONField(default=list, blank=True)
    probation_until = models.DateTimeField(null=True, blank=True)
    # While the node is down: the out-of-service state (and its reason) it returns to when the
    # backend reports it back, so an admin's drain or a quarantine outlasts an outage, as
    # Slurm's DOWN+DRAIN comes back drained. Blank: it comes back ready.
    resume_state = models.CharField(
        max_length=16,
        blank=True,
        choices=[(s, s.label) for s in (NodeState.DRAINING, NodeState.QUARANTINED)],
    )
    resume_reason = models.CharField(max_length=300, blank=True)
    # Why the backend itself holds the node out of service while the platform has it ready (a
    # site admin's drain, an active Slurm reservation): no new work goes there until the backend
    # lets it go. The platform never lifts it (a Release is for the platform's own holds).
    cluster_hold = models.CharField(max_length=300, blank=True)
    # Until then no new run is placed here: the cluster kept a run placed here pending for a
    # reason about the node (a maintenance reservation ahead, the node busy with the cluster's
    # other work) until the loop gave up on it (scheduler.loop.cluster_pending).
    avoid_until = models.DateTimeField(null=True, blank=True)
    # Retirement (scheduler.retirement): since when an admin retires the node (drained, finished
    # by the loop once nothing runs on it), and when it became retired (state ``retired``).
    retiring_since = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    retire_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_cluster_name"),
            models.CheckConstraint(
                condition=Q(health__gte=0) & Q(health__lte=1), name="node_health_0_1"
            ),
            # Retired exactly when it has a retirement time, and only after one was asked for.
            models.CheckConstraint(
                condition=(
                    Q(state="retired", retired_at__isnull=False, retiring_since__isnull=False)
                    | (~Q(state="retired") & Q(retired_at__isnull=True))
                ),
                name="node_retired_consistent",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # The scheduler reads a list of names; say so where the node is edited (Django admin)
        # rather than have the snapshot drop what it cannot read.
        value = self.datasets
        if not isinstance(value, list) or not all(isinstance(d, str) and d for d in value):
            raise ValidationError(
                {"datasets": 'must be a list of dataset names, e.g. ["imagenet"]'}
            )

    def no_new_work(self, now: datetime) -> str:
        """Why the cluster keeps new work off this node though its state may read ready, blank
        when it does not: what the cluster view, its stream and ``/cluster/state/`` show (the
        snapshot holds such a node as draining for the same two reasons)."""
        if self.cluster_hold:
            return self.cluster_hold
        if self.avoid_until is not None and self.avoid_until > now:
            return (
                "the cluster kept a run placed here pending; no new run until "
                f"{self.avoid_until:%Y-%m-%d %H:%M} UTC"
            )
        return ""


class NodeEvent(models.Model):
    class Kind(models.TextChoices):
        FAILED = "failed", "Failed"
        RECOVERED = "recovered", "Recovered"
        QUARANTINED = "quarantined", "Quarantined"
        PROBATION = "probation", "Probation"
        RELEASED = "released", "Released"
        DRAINED = "drained", "Drained"
        RETIRED = "retired", "Retired"
        REINSTATED = "reinstated", "Reinstated"

    node = models.ForeignKey(Node, related_name="events", on_delete=models.CASCADE)
    time = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    message = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["node", "kind", "time"], name="nodeevent_node_kind_time")]

    def __str__(self) -> str:
        return f"{self.kind} @ {self.time:%H:%M:%S}"


class JobQuerySet(models.QuerySet[_M]):
    def visible_to(self, user: Caller) -> Self:
        """Jobs of the teams ``user`` belongs to (all of them for platform admins); none for a
        caller signed out, an anonymous user or None (as ``tenants.permissions`` answers)."""
        if not user or not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self
        # A subquery, not a join through memberships: the join needed DISTINCT, which made every
        # list read cost work proportional to all the team's jobs whatever the page size.
        return self.filter(team_id__in=Membership.objects.filter(user=user).values("team_id"))


class Job(models.Model):
    team = models.ForeignKey(Team, related_name="jobs", on_delete=models.PROTECT, db_index=True)
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="jobs", on_delete=models.PROTECT
    )
    name = models.CharField(max_length=200, validators=[validate_name])
    image = models.CharField(max_length=300, blank=True)
    command = models.TextField(blank=True)
    env = models.JSONField(default=dict, blank=True)
    workers = models.PositiveIntegerField(validators=_WORKERS)
    gpus_per_worker = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(MAX_GPUS_PER_WORKER)]
    )
    gpu_model = models.ForeignKey(
        GpuModel, null=True, blank=True, related_name="jobs", on_delete=models.PROTECT
    )
    priority_class = models.ForeignKey(
        "tenants.PriorityClass", related_name="jobs", on_delete=models.PROTECT
    )
    preemptible = models.BooleanField(default=True)
    checkpoint_interval_s = models.PositiveIntegerField(null=True, blank=True, validators=_DURATION)
    # Opt-in: the platform asks the run to checkpoint on the advised schedule
    # (scheduler.checkpoint_advice).
    checkpoint_on_advice = models.BooleanField(default=False)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    # Work (exclusive-run seconds) safely checkpointed across all attempts; a resume starts here.
    checkpointed_progress_s = models.FloatField(default=0.0)
    runtime_limit_s = models.PositiveIntegerField(null=True, blank=True, validators=_DURATION)
    # When the user needs it finished: the engine ranks it first within its class as its slack
    # runs out (scheduler.policy.ranking, rule 1b); the outcomes count hits and misses.
    deadline = models.DateTimeField(null=True, blank=True)
    dataset = models.CharField(max_length=200, blank=True, validators=[validate_name])
    # What the job says it ran, for its reproducibility record (scheduler.reproducibility).
    dataset_version = models.CharField(max_length=100, blank=True, validators=[validate_name])
    # Where the job may and would rather run (docs/routing.md: clusters, regions, preferences,
    # a price cap, spot, communication-heavy), as the policy contract's ``routing`` object;
    # null: no constraints of its own.
    routing = models.JSONField(null=True, blank=True)
    code_ref = models.CharField(max_length=200, blank=True)
    elastic_min_workers = models.PositiveIntegerField(null=True, blank=True, validators=_WORKERS)
    elastic_max_workers = models.PositiveIntegerField(null=True, blank=True, validators=_WORKERS)
    # An elastic job's own ``workers`` as submitted: ``workers`` holds the count its current run
    # started with (the most that fitted), and a requeued run asks for this count again.
    requested_workers = models.PositiveIntegerField(null=True, blank=True, validators=_WORKERS)

    state = models.CharField(
        max_length=16, choices=JobState.choices, default=JobState.PENDING, db_index=True
    )
    why_pending = models.TextField(blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    preempt_deadline = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    requeued = models.BooleanField(default=False)
    # Plain wall-clock seconds (not GPU-seconds): the policy's attained_service_s multiplies by
    # the job's GPUs itself.
    earlier_runs_s = models.FloatField(
        default=0.0, help_text="Seconds the job ran in earlier attempts, lost work included."
    )
    lost_gpu_seconds = models.FloatField(
        default=0.0, help_text="GPU-seconds of work lost at requeues (since each checkpoint)."
    )
    exit_code = models.IntegerField(null=True, blank=True)
    # A running job whose run the cluster reports still waiting (Slurm PENDING): since when the
    # loop has seen it so, and the cluster's reason (its event is recorded once, with the first
    # reason given). Cleared when the run starts; past SCHEDULER_BACKEND_PENDING_GRACE_SECONDS
    # the run is cancelled and the job put back in the queue (scheduler.loop.cluster_pending).
    cluster_pending_since = models.DateTimeField(null=True, blank=True)
    cluster_pending_reason = models.CharField(max_length=300, blank=True)
    # Attempts the cluster never started (given up on while still pending there): not
    # interruptions, so the interruption limit does not count them.
    unstarted_attempts = models.PositiveIntegerField(default=0)
    # Not placed again before then: the cluster kept its last run pending for a reason about the
    # job or its account (a QOS limit), which placing it again at once would only repeat.
    retry_after = models.DateTimeField(null=True, blank=True)
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, related_name="jobs", on_delete=models.SET_NULL
    )
    backend_ref = models.CharField(max_length=200, blank=True)
    # Attempt number (as text) -> the account its run was submitted as, where the cluster runs
    # each team's work as an account of its own (Slurm's team_accounts; Backend.team_account):
    # every later call about that run names it, so remapping the team affects new runs alone.
    backend_accounts = models.JSONField(default=dict, blank=True)
    # Simulated backend only: how long the work takes when run exclusively (demo, tests).
    simulated_duration_s = models.FloatField(null=True, blank=True, validators=_DURATION)
    # Set for the members of a job array (sweep): the array and this job's index in it.
    array = models.ForeignKey(
        "JobArray", null=True, blank=True, related_name="jobs", on_delete=models.CASCADE
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(workers__gte=1), name="job_workers_positive"),
            models.CheckConstraint(
                condition=Q(gpus_per_worker__gte=1), name="job_gpus_per_worker_positive"
            ),
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in JobState]), name="job_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(elastic_min_workers__isnull=True)
                | (
                    Q(elastic_max_workers__isnull=False)
                    & Q(elastic_min_workers__gte=1)
                    & Q(elastic_min_workers__lte=F("elastic_max_workers"))
                ),
                name="job_elastic_range_valid",
            ),
            models.UniqueConstraint(
                fields=["array", "array_index"],
                condition=Q(array__isnull=False),
                name="job_unique_array_index",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "state"], name="job_team_state"),
            # The stale-run sweep's recently ended jobs (scheduler.loop.stale_runs).
            models.Index(fields=["cluster", "finished_at"], name="job_cluster_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def elastic(self) -> dict[str, int | None] | None:
        if self.elastic_min_workers is None:
            return None
        return {"min_workers": self.elastic_min_workers, "max_workers": self.elastic_max_workers}


class Allocation(models.Model):
    """One GPU held by one job attempt. ``ended_at IS NULL`` means live."""

    job = models.ForeignKey(Job, related_name="allocations", on_delete=models.CASCADE)
    node = models.ForeignKey(Node, related_name="allocations", on_delete=models.CASCADE)
    gpu_index = models.PositiveIntegerField()
    worker_index = models.PositiveIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # The scheduler's first invariant, enforced by the database on SQLite and PostgreSQL.
            models.UniqueConstraint(
                fields=["node", "gpu_index"],
                condition=Q(ended_at__isnull=True),
                name="allocation_one_live_holder_per_gpu",
            ),
        ]
        indexes = [
            models.Index(fields=["job", "ended_at"], name="allocation_job_live"),
            # Billing reads allocations by when they ended (the meter's lookback window and its
            # backlog, the close's "is this month metered?"): without it each read scanned the
            # whole allocation history (docs/benchmarks.md, "Billing: the close check").
            models.Index(fields=["ended_at"], name="allocation_ended_at"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.gpu_index} for job {self.job_id}"


class JobEvent(models.Model):
    job = models.ForeignKey(Job, related_name="events", on_delete=models.CASCADE)
    time = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=32)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["time", "id"]
        indexes = [models.Index(fields=["job", "time"], name="jobevent_job_time")]

    def __str__(self) -> str:
        return f"{self.kind} @ {self.time:%H:%M:%S}"


class SimulatedRun(models.Model):
    """A run on the simulated backend. Kept in the database (not process memory) so the web
    process, every Celery worker and the in-process loop see one and the same simulated cluster."""

    cluster = models.ForeignKey(Cluster, related_name="simulated_runs", on_delete=models.CASCADE)
    job_id = models.CharField(max_length=64)
    attempt = models.PositiveIntegerField()
    nodes = models.JSONField(default=list)
    started_at = models.DateTimeField()
    service_time_s = models.FloatField()
    resume_from_s = models.FloatField(default=0.0)
    checkpoint_interval_s = models.FloatField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    checkpoint_requested_at = models.DateTimeField(null=True, blank=True)
    # Each worker's node and the launcher variables it was given (worker 0 first).
    launch_env = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "job_id", "attempt"], name="simulatedrun_unique_run"
            )
        ]

    def __str__(self) -> str:
        return f"sim run {self.job_id}/{self.attempt}"


class SimulatedNodeFault(models.Model):
    """A simulated node failure: the node is down from ``failed_at`` until ``repaired_at``."""

    cluster = models.ForeignKey(Cluster, related_name="simulated_faults", on_delete=models.CASCADE)
    node_name = models.CharField(max_length=128)
    failed_at = models.DateTimeField()
    repaired_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["cluster", "node_name", "repaired_at"], name="simfault_node")
        ]

    def __str__(self) -> str:
        return f"{self.node_name} down {self.failed_at:%H:%M:%S}-{self.repaired_at:%H:%M:%S}"


class JobArray(models.Model):
    """A job array (sweep): one submission that created ``size`` jobs from a template, each with
    its own per-index parameters. The jobs point back here (``Job.array``, ``Job.array_index``)
    and are listed and cancelled as a group."""

    team = models.ForeignKey(Team, related_name="job_arrays", on_delete=models.PROTECT)
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="job_arrays", on_delete=models.PROTECT
    )
    name = models.CharField(max_length=200, validators=[validate_name])
    size = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ARRAY_SIZE)]
    )
    # The submitted template (contract field names), kept for display and resubmission.
    template = models.JSONField(default=dict, blank=True)
    submitted_at = models.DateTimeField(db_index=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(size__gte=1), name="jobarray_size_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} [{self.size}] (#{self.pk})"


class AttemptRecord(models.Model):
    """What exactly ran in one attempt of a job (its reproducibility record), written once when
    the backend accepted the attempt. ``record`` is the JSON that is shown and exported
    (``scheduler.reproducibility`` builds it; secrets are redacted before it is stored)."""

    job = models.ForeignKey(Job, related_name="attempt_records", on_delete=models.CASCADE)
    attempt = models.PositiveIntegerField()
    recorded_at = models.DateTimeField()
    record = models.JSONField(default=dict)

    class Meta:
        ordering = ["job", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="attemptrecord_one_per_attempt")
        ]

    def __str__(self) -> str:
        return f"record of job {self.job_id} attempt {self.attempt}"
