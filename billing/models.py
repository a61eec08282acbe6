"""Billing state: the price book, metered usage, lost work, budgets and their alerts, statements.

Invariants the database enforces (named constraints), so a re-run, a racing worker or a manual
shell cannot break them:
- one usage row per (allocation, hour bucket): re-running the meter overwrites, never adds;
- one lost-work row per (job, cumulative lost GPU-seconds): a loss is metered once;
- one price per (cluster or the platform, GPU model, capacity type, effective instant);
- one egress charge per job attempt;
- one budget per (team, month), one alert per (budget, threshold): an alert fires once;
- one statement per (team, month); a closed statement carries its closing time and total;
- one frozen line per (statement, sub-team, GPU model, capacity, cluster) and one egress line
  per (statement, sub-team, source cluster, destination cluster).

Money is ``Decimal`` throughout (USD). Months are UTC calendar months, stored as their first day.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TypedDict

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from catalogue.models import GpuModel
from scheduler.models import Allocation, Cluster, Job
from tenants.models import Team

from . import calc


class _Digits(TypedDict):
    """A DecimalField's size, spread into it (typed, so each key reaches its own argument)."""

    max_digits: int
    decimal_places: int


MONEY: _Digits = {"max_digits": 18, "decimal_places": 6}
RATE: _Digits = {"max_digits": 12, "decimal_places": 4}
# The largest amount a budget, an adjustment or a statement total holds (14 digits, 2 decimals).
MAX_AMOUNT = Decimal("999999999999.99")
# USD per GPU-hour: far above any price sold, low enough that a day of a very large team's usage
# still fits the money columns.
MAX_RATE = Decimal("100000")
# The largest cost one usage or lost-work row holds (MONEY: 18 digits, 6 decimals).
MAX_COST = Decimal("999999999999.999999")
_MONTH = [MinValueValidator(calc.MIN_MONTH), MaxValueValidator(calc.MAX_MONTH)]


class Capacity(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    SPOT = "spot", "Spot"


class PriceRate(models.Model):
    """USD per GPU-hour for one GPU model and capacity type, valid from ``effective_from`` until
    the next rate of the same pair. Rows are append-only: a change is a new row.

    ``cluster`` null: the platform-wide rate, for every cluster. A cluster's own rows override
    the platform-wide ones for that cluster, GPU model and capacity from the first override's
    effective date on (``calc.PriceSchedule.overridden_by``): later platform-wide changes no
    longer reach that pair on that cluster."""

    # PROTECT: the rates explain what usage already cost; a cluster with prices is not deleted.
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, related_name="price_rates", on_delete=models.PROTECT
    )
    gpu_model = models.ForeignKey(GpuModel, related_name="price_rates", on_delete=models.PROTECT)
    capacity = models.CharField(max_length=16, choices=Capacity.choices)
    effective_from = models.DateTimeField()
    rate_per_gpu_hour = models.DecimalField(
        **RATE, validators=[MinValueValidator(Decimal(0)), MaxValueValidator(MAX_RATE)]
    )
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "gpu_model__name", "capacity", "effective_from"]
        constraints = [
            # Two conditional constraints, not one over a nullable column: NULLs are distinct in
            # a unique index, so one constraint would let two platform-wide rates start at once.
            models.UniqueConstraint(
                fields=["gpu_model", "capacity", "effective_from"],
                condition=Q(cluster__isnull=True),
                name="price_unique_model_cap_from",
            ),
            models.UniqueConstraint(
                fields=["cluster", "gpu_model", "capacity", "effective_from"],
                condition=Q(cluster__isnull=False),
                name="price_unique_cluster_model_cap_from",
            ),
            models.CheckConstraint(condition=Q(rate_per_gpu_hour__gte=0), name="price_rate_gte_0"),
            # Also refuses NaN (PostgreSQL sorts it above every number), which broke pricing.
            models.CheckConstraint(
                condition=Q(rate_per_gpu_hour__lte=MAX_RATE), name="price_rate_at_most_max"
            ),
            models.CheckConstraint(
                condition=Q(capacity__in=[c.value for c in Capacity]), name="price_capacity_valid"
            ),
        ]

    def __str__(self) -> str:
        where = f" on {self.cluster}" if self.cluster_id else ""
        return f"{self.gpu_model} {self.capacity}{where} ${self.rate_per_gpu_hour}/GPU-h from {self.effective_from:%Y-%m-%d %H:%M}"


class UsageRecord(models.Model):
    """GPU time one allocation (one GPU) held within one UTC hour bucket, priced.

    Values are absolute (recomputed from the allocation), so writing a row twice is harmless; the
    unique key makes a second row impossible. ``idle_fraction`` is the share of the time the GPU
    sat idle per telemetry; NULL means no telemetry (never guessed as 0)."""

    # Plain ids, not foreign keys: billing history outlives the scheduler's rows.
    allocation_id = models.BigIntegerField()
    hour = models.DateTimeField()
    # Indexed through job (rollup refresh); team through (team, hour); the others not at all:
    # each index slows the meter's writes and nothing reads by user or GPU model alone.
    job = models.ForeignKey(
        Job, related_name="usage", on_delete=models.DO_NOTHING, db_constraint=False
    )
    attempt = models.PositiveIntegerField(default=1)
    team = models.ForeignKey(Team, related_name="usage", on_delete=models.PROTECT, db_index=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="usage", on_delete=models.PROTECT, db_index=False
    )
    gpu_model = models.ForeignKey(
        GpuModel, related_name="usage", on_delete=models.PROTECT, db_index=False
    )
    # The cluster of the allocation's node (priced by that cluster's rates). A plain id like
    # job's: usage outlives a removed cluster. NULL: metered before clusters were recorded and
    # the allocation was gone by then (never guessed).
    cluster = models.ForeignKey(
        Cluster,
        null=True,
        blank=True,
        related_name="+",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
    )
    capacity = models.CharField(max_length=16, choices=Capacity.choices)
    gpu_seconds = models.FloatField()
    cost = models.DecimalField(**MONEY)
    # GPU-seconds of this slice that had no price in the book (billed at 0; statement lines carry
    # their sum as unpriced GPU-hours).
    unpriced_gpu_seconds = models.FloatField(default=0.0)
    idle_fraction = models.FloatField(null=True, blank=True)
    finalized = models.BooleanField(default=False)

    class Meta:
        ordering = ["hour", "allocation_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation_id", "hour"], name="usage_unique_alloc_hour"
            ),
            models.CheckConstraint(
                condition=Q(gpu_seconds__gte=0) & Q(gpu_seconds__lte=3600),
                name="usage_gpu_seconds_in_hour",
            ),
            models.CheckConstraint(
                condition=Q(idle_fraction__isnull=True)
                | (Q(idle_fraction__gte=0) & Q(idle_fraction__lte=1)),
                name="usage_idle_fraction_0_1",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "hour"], name="usage_team_hour"),
            models.Index(fields=["hour"], name="usage_hour"),
        ]

    def __str__(self) -> str:
        return f"alloc {self.allocation_id} @ {self.hour:%Y-%m-%d %H}:00 {self.gpu_seconds:.0f}s"


class UsageDaily(models.Model):
    """Usage rolled up per (team, UTC day, GPU model, capacity, cluster): what dashboards and budget
    checks read, so they cost the same whatever the number of allocations. Rebuilt from
    ``UsageRecord`` for every (team, day) the meter touches, in the same transaction (absolute
    values again, so the rollup is idempotent too)."""

    team = models.ForeignKey(Team, related_name="+", on_delete=models.PROTECT, db_index=False)
    day = models.DateField()
    gpu_model = models.ForeignKey(GpuModel, related_name="+", on_delete=models.PROTECT)
    capacity = models.CharField(max_length=16, choices=Capacity.choices)
    # As on UsageRecord: a plain id, NULL for usage whose cluster is unknown.
    cluster = models.ForeignKey(
        Cluster,
        null=True,
        blank=True,
        related_name="+",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
    )
    gpu_seconds = models.FloatField()
    cost = models.DecimalField(**MONEY)
    unpriced_gpu_seconds = models.FloatField(default=0.0)
    # Of gpu_seconds, those with telemetry, and the idle share of those (seconds, USD).
    telemetry_gpu_seconds = models.FloatField(default=0.0)
    idle_gpu_seconds = models.FloatField(default=0.0)
    idle_cost = models.DecimalField(**MONEY, default=0)

    class Meta:
        ordering = ["day", "team_id", "gpu_model_id", "capacity", "cluster_id"]
        constraints = [
            # Conditional pair: NULLs are distinct in a unique index (see PriceRate).
            models.UniqueConstraint(
                fields=["team", "day", "gpu_model", "capacity", "cluster"],
                condition=Q(cluster__isnull=False),
                name="usagedaily_unique_key",
            ),
            models.UniqueConstraint(
                fields=["team", "day", "gpu_model", "capacity"],
                condition=Q(cluster__isnull=True),
                name="usagedaily_unique_key_no_cluster",
            ),
        ]
        indexes = [models.Index(fields=["day"], name="usagedaily_day")]

    def __str__(self) -> str:
        return f"{self.team_id} {self.day} {self.gpu_model_id} {self.capacity} @{self.cluster_id}: ${self.cost}"


class UsageJobMonth(models.Model):
    """Usage rolled up per (job, month): the "top jobs by cost" table reads this."""

    job = models.ForeignKey(
        Job, related_name="+", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False
    )
    month = models.DateField()
    team = models.ForeignKey(Team, related_name="+", on_delete=models.PROTECT, db_index=False)
    gpu_seconds = models.FloatField()
    cost = models.DecimalField(**MONEY)

    class Meta:
        ordering = ["month", "job_id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "month"], name="usagejobmonth_unique_key"),
        ]
        indexes = [models.Index(fields=["team", "month", "cost"], name="usagejobmonth_team_cost")]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.month:%Y-%m}: ${self.cost}"


class EgressCharge(models.Model):
    """Moving a job's dataset to the cluster an attempt started on, when that cluster holds no
    copy and another does: ``size_gb`` x the cheapest holder's egress price per GB (the rule of
    ``scheduler.policy.routing.egress_cost``), charged to the job's team once per attempt.

    Facts are copied, not referenced: the dataset, its size and the price are what they were
    when the meter saw the attempt start, whatever the catalogue says later."""

    job = models.ForeignKey(
        Job, related_name="egress_charges", on_delete=models.DO_NOTHING, db_constraint=False
    )
    attempt = models.PositiveIntegerField()
    team = models.ForeignKey(Team, related_name="egress_charges", on_delete=models.PROTECT)
    dataset = models.CharField(max_length=200)
    from_cluster = models.ForeignKey(
        Cluster, related_name="+", on_delete=models.DO_NOTHING, db_constraint=False
    )
    to_cluster = models.ForeignKey(
        Cluster, related_name="+", on_delete=models.DO_NOTHING, db_constraint=False
    )
    size_gb = models.FloatField()
    price_per_gb = models.DecimalField(max_digits=10, decimal_places=4)
    cost = models.DecimalField(**MONEY)
    # When the attempt started: the month the charge belongs to.
    time = models.DateTimeField()

    class Meta:
        ordering = ["time", "id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="egress_unique_job_attempt"),
            models.CheckConstraint(condition=Q(size_gb__gt=0), name="egress_size_positive"),
            models.CheckConstraint(condition=Q(cost__gte=0), name="egress_cost_gte_0"),
        ]
        indexes = [models.Index(fields=["team", "time"], name="egress_team_time")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.size_gb:g} GB ${self.cost}"


class AllocationMeter(models.Model):
    """The meter's cursor for one allocation: metered up to ``metered_until``; once the
    allocation has ended and been metered to its end, ``finalized`` and never touched again."""

    allocation = models.OneToOneField(
        Allocation, related_name="meter", on_delete=models.DO_NOTHING, db_constraint=False
    )
    metered_until = models.DateTimeField()
    finalized = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(fields=["finalized"], name="allocmeter_finalized"),
            # The meter's window and the close's check read only the cursors after a time.
            models.Index(fields=["metered_until"], name="allocmeter_metered_until"),
        ]

    def __str__(self) -> str:
        return f"meter of allocation {self.allocation_id} to {self.metered_until:%Y-%m-%d %H:%M}"


class BacklogMark(models.Model):
    """Where the meter's backlog sweep (``billing.meter.meter_backlog_run``) need not look again:
    one row, moved by each sweep, so the sweep's search follows the backlog, not the history.

    Every allocation that ended before ``ended_before`` is finalized, or has a cursor that is
    not (an end recorded late), or has an id above ``checked_id`` (recorded since); the sweep
    searches those three sets and the allocations ended since ``ended_before``, nothing older.
    ``seen_id`` is the highest allocation id at ``seen_at``: it becomes ``checked_id`` only once
    it is ``meter.BACKLOG_SETTLE`` old, so a transaction still writing allocations below it when
    it was read has committed by then. No row, or ``ended_before`` null: the sweep searches the
    whole history (the first sweeps, or after an operator deleted the row to start over)."""

    ended_before = models.DateTimeField(null=True, blank=True)
    checked_id = models.BigIntegerField(null=True, blank=True)
    seen_id = models.BigIntegerField(null=True, blank=True)
    seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="backlogmark_one_row")]

    def __str__(self) -> str:
        return f"backlog searched from {self.ended_before} and above allocation {self.checked_id}"


class LostKind(models.TextChoices):
    PREEMPTED = "preempted", "Preemption"
    NODE_FAILED = "node_failed", "Node failure"
    OTHER = "other", "Other"


class LostWork(models.Model):
    """GPU time lost (work since the last checkpoint) when a job was preempted or its node
    failed, metered separately from usage: it is part of the allocated time already billed, shown
    as waste. One row per increase of ``Job.lost_gpu_seconds`` (keyed by the cumulative value)."""

    job = models.ForeignKey(
        Job, related_name="lost_work", on_delete=models.DO_NOTHING, db_constraint=False
    )
    cumulative_gpu_seconds = models.FloatField()
    team = models.ForeignKey(Team, related_name="lost_work", on_delete=models.PROTECT)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="lost_work", on_delete=models.PROTECT
    )
    gpu_model = models.ForeignKey(
        GpuModel, null=True, blank=True, related_name="lost_work", on_delete=models.PROTECT
    )
    capacity = models.CharField(max_length=16, choices=Capacity.choices)
    kind = models.CharField(max_length=16, choices=LostKind.choices)
    occurred_at = models.DateTimeField()
    gpu_seconds = models.FloatField()
    cost = models.DecimalField(**MONEY)

    class Meta:
        ordering = ["occurred_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "cumulative_gpu_seconds"], name="lostwork_unique_job_cumulative"
            ),
            models.CheckConstraint(condition=Q(gpu_seconds__gt=0), name="lostwork_positive"),
        ]
        indexes = [models.Index(fields=["team", "occurred_at"], name="lostwork_team_time")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.gpu_seconds:.0f} GPU-s of job {self.job_id}"


class Budget(models.Model):
    """A team's spending limit for one month, covering the team and its sub-teams. With
    ``hard_stop`` new submissions are refused once spend reaches ``amount`` (running jobs go on)."""

    team = models.ForeignKey(Team, related_name="budgets", on_delete=models.CASCADE)
    month = models.DateField(validators=_MONTH)
    amount = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        validators=[MinValueValidator(Decimal("0.01")), MaxValueValidator(MAX_AMOUNT)],
    )
    hard_stop = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-month", "team__slug"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month"], name="budget_unique_team_month"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="budget_amount_positive"),
            # Also refuses NaN, which PostgreSQL's numeric sorts above every number: one such
            # row made every submission and budget read fail for every team.
            models.CheckConstraint(
                condition=Q(amount__lte=MAX_AMOUNT), name="budget_amount_at_most_max"
            ),
            models.CheckConstraint(condition=Q(month__day=1), name="budget_month_first_day"),
            models.CheckConstraint(
                condition=Q(month__gte=calc.MIN_MONTH) & Q(month__lte=calc.MAX_MONTH),
                name="budget_month_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.month:%Y-%m}: ${self.amount}"


class BudgetAlert(models.Model):
    """The event "spend crossed ``threshold`` % of a budget". Fires once per threshold."""

    THRESHOLDS = (50, 80, 100)

    budget = models.ForeignKey(Budget, related_name="alerts", on_delete=models.CASCADE)
    threshold = models.PositiveSmallIntegerField()
    spend = models.DecimalField(max_digits=14, decimal_places=2)
    fired_at = models.DateTimeField()

    class Meta:
        ordering = ["fired_at", "threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "threshold"], name="budgetalert_once_per_threshold"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} reached {self.threshold}%"


class StatementStatus(models.TextChoices):
    OPEN = "open", "Open"
    CLOSED = "closed", "Closed"


class StatementMode(models.TextChoices):
    SHOWBACK = "showback", "Showback (informational)"
    CHARGEBACK = "chargeback", "Chargeback (charged to the team)"


class Statement(models.Model):
    """A team's monthly statement, rolled up over its sub-teams. Open: computed live from usage.
    Closed: frozen into lines and a total; later corrections are adjustments."""

    team = models.ForeignKey(Team, related_name="statements", on_delete=models.PROTECT)
    month = models.DateField(validators=_MONTH)
    status = models.CharField(
        max_length=8, choices=StatementStatus.choices, default=StatementStatus.OPEN
    )
    mode = models.CharField(
        max_length=16, choices=StatementMode.choices, default=StatementMode.SHOWBACK
    )
    total = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-month", "team__slug"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month"], name="statement_unique_team_month"),
            models.CheckConstraint(condition=Q(month__day=1), name="statement_month_first_day"),
            models.CheckConstraint(
                condition=Q(status="open", closed_at__isnull=True, total__isnull=True)
                | Q(status="closed", closed_at__isnull=False, total__isnull=False),
                name="statement_closed_is_frozen",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.month:%Y-%m} ({self.status})"


class StatementLine(models.Model):
    """One frozen line of a closed statement: a (sub-)team's usage of one GPU model and capacity
    on one cluster."""

    statement = models.ForeignKey(Statement, related_name="lines", on_delete=models.PROTECT)
    team = models.ForeignKey(Team, related_name="+", on_delete=models.PROTECT)
    gpu_model = models.ForeignKey(GpuModel, related_name="+", on_delete=models.PROTECT)
    capacity = models.CharField(max_length=16, choices=Capacity.choices)
    # The cluster's name when the statement closed (frozen text, like the rest of the line);
    # "" for usage whose cluster is unknown and for lines closed before clusters were recorded.
    cluster = models.CharField(max_length=64, blank=True, default="")
    gpu_hours = models.DecimalField(max_digits=16, decimal_places=4)
    # The part of gpu_hours that had no price in the book (billed at $0): frozen with the line
    # so the bill says why it is cheap. Lines closed before it was recorded say 0, as they showed.
    unpriced_gpu_hours = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=2)

    class Meta:
        ordering = ["team__slug", "gpu_model__name", "capacity", "cluster"]
        constraints = [
            models.UniqueConstraint(
                fields=["statement", "team", "gpu_model", "capacity", "cluster"],
                name="stmtline_unique_key",
            ),
            models.CheckConstraint(
                condition=Q(unpriced_gpu_hours__gte=0)
                & Q(unpriced_gpu_hours__lte=models.F("gpu_hours")),
                name="stmtline_unpriced_within_hours",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.gpu_model} {self.capacity}: ${self.cost}"


class StatementEgressLine(models.Model):
    """One frozen egress line of a closed statement: what a (sub-)team's job attempts paid to move
    datasets from one cluster to another in the month, summed over those charges. Per cluster
    pair, like the GPU lines per cluster: a bill a finance reader can check line by line, as
    long as the month's activity is varied; each charge stays an ``EgressCharge`` row (job,
    attempt, dataset) for whoever needs the detail."""

    statement = models.ForeignKey(Statement, related_name="egress_lines", on_delete=models.PROTECT)
    team = models.ForeignKey(Team, related_name="+", on_delete=models.PROTECT)
    # The clusters' names when the statement closed (frozen text, like StatementLine.cluster).
    from_cluster = models.CharField(max_length=64)
    to_cluster = models.CharField(max_length=64)
    charges = models.PositiveIntegerField()
    gb = models.DecimalField(max_digits=16, decimal_places=3)
    cost = models.DecimalField(max_digits=14, decimal_places=2)

    class Meta:
        ordering = ["team__slug", "from_cluster", "to_cluster"]
        constraints = [
            models.UniqueConstraint(
                fields=["statement", "team", "from_cluster", "to_cluster"],
                name="stmtegress_unique_key",
            ),
            models.CheckConstraint(condition=Q(cost__gte=0), name="stmtegress_cost_gte_0"),
        ]

    def __str__(self) -> str:
        return f"{self.team} egress {self.from_cluster}->{self.to_cluster}: ${self.cost}"


class Adjustment(models.Model):
    """A correction to a statement (credit < 0, charge > 0), append-only. The only way to change
    what a closed statement says."""

    statement = models.ForeignKey(Statement, related_name="adjustments", on_delete=models.PROTECT)
    amount = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        validators=[MinValueValidator(-MAX_AMOUNT), MaxValueValidator(MAX_AMOUNT)],
    )
    reason = models.CharField(max_length=300)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=~Q(amount=0), name="adjustment_nonzero"),
        ]

    def __str__(self) -> str:
        return f"{self.amount:+} ({self.reason})"
