"""Writes to billing: the meter, the price book, budgets and their alerts (statements and their
adjustments: ``billing.statements``).

Every function is keyword-only and atomic. The meter is idempotent: it writes absolute values
keyed by (allocation, hour), so running it twice, concurrently, or after a crash never double
counts (the unique constraint ``usage_unique_alloc_hour`` makes a second row impossible).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Literal, TypedDict

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, Exists, F, FloatField, Max, OuterRef, Q, QuerySet, Sum, When
from django.db.models.functions import TruncDay
from django.utils import timezone
from django.utils.module_loading import import_string

from catalogue.models import GpuModel
from core import streams
from core.bounds import number_error
from core.errors import DomainError, FieldErrors, Forbidden, duplicate_refused
from core.names import text_errors
from scheduler.models import Allocation, Cluster, ClusterDataset, Dataset, Job, JobEvent
from scheduler.outcomes import loss_cause
from tenants.models import Team
from tenants.permissions import can_manage_team, is_platform_admin

from . import calc
from .models import (
    MAX_COST,
    AllocationMeter,
    Budget,
    BudgetAlert,
    Capacity,
    EgressCharge,
    LostKind,
    LostWork,
    PriceRate,
    Statement,
    UsageDaily,
    UsageJobMonth,
    UsageRecord,
)
from .tree import TeamTree

log = logging.getLogger(__name__)

LOSS_EVENT_KINDS = (LostKind.PREEMPTED.value, LostKind.NODE_FAILED.value)
# scheduler.outcomes.loss_cause's causes as lost-work kinds
_LOSS_KIND = {"preemption": LostKind.PREEMPTED, "node_failure": LostKind.NODE_FAILED}


# --------------------------------------------------------------------------- price book


class PriceBook:
    """The whole price book as schedules, loaded in one query: per (cluster, GPU model,
    capacity) the platform-wide schedule with that cluster's own rates taking over from their
    first effective date (``calc.PriceSchedule.overridden_by``)."""

    def __init__(self, rows: Iterable[tuple[int | None, int, str, datetime, Decimal]]):
        steps: dict[tuple[int | None, int, str], list[calc.RateStep]] = defaultdict(list)
        for cluster_id, gpu_model_id, capacity, start, rate in rows:
            steps[(cluster_id, gpu_model_id, capacity)].append(calc.RateStep(start, rate))
        self._own = {key: calc.PriceSchedule(value) for key, value in steps.items()}
        self._merged: dict[tuple[int | None, int, str], calc.PriceSchedule] = {}

    @classmethod
    def load(cls) -> PriceBook:
        return cls(
            PriceRate.objects.values_list(
                "cluster_id", "gpu_model_id", "capacity", "effective_from", "rate_per_gpu_hour"
            )
        )

    def schedule(self, *, cluster_id: int | None, gpu_model_id: int, capacity: str):
        """The rates a GPU of ``gpu_model_id`` on ``cluster_id`` is priced at (no cluster: the
        platform-wide rates only)."""
        key = (cluster_id, gpu_model_id, capacity)
        if key not in self._merged:
            platform = self._own.get((None, gpu_model_id, capacity), _NO_PRICES)
            own = self._own.get(key, _NO_PRICES) if cluster_id is not None else _NO_PRICES
            self._merged[key] = platform.overridden_by(own)
        return self._merged[key]


_NO_PRICES = calc.PriceSchedule([])


@transaction.atomic
def price_set(
    *,
    user,
    gpu_model: GpuModel,
    capacity: str,
    rate_per_gpu_hour: Decimal,
    effective_from: datetime,
    cluster: Cluster | str | None = None,
    note: str = "",
    now: datetime | None = None,
) -> PriceRate:
    """Add a rate to the price book (platform admins only): platform-wide, or for one
    ``cluster`` (a row or its name; an unknown name is an error on field "cluster"), where it
    overrides the platform-wide rate of that GPU model and capacity from ``effective_from`` on.
    It may not start in the past, so time already metered is never repriced."""
    now = now or timezone.now()
    errors: dict[str, list[str]] = {}
    if not is_platform_admin(user):
        raise Forbidden("only platform admins change the price book")
    if isinstance(cluster, str):
        name = cluster
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            errors["cluster"] = [f"no cluster named {name[:64]!r}"]
    if capacity not in Capacity.values:
        errors["capacity"] = [f"must be one of {', '.join(Capacity.values)}"]
    if not isinstance(rate_per_gpu_hour, Decimal):
        errors["rate_per_gpu_hour"] = ["must be a decimal amount >= 0"]
    elif problem := number_error(PriceRate, "rate_per_gpu_hour", rate_per_gpu_hour):
        errors["rate_per_gpu_hour"] = [problem]
    if problems := text_errors(note):
        errors["note"] = problems
    if effective_from < now - timedelta(seconds=1):
        errors["effective_from"] = [
            "must not be in the past: a price change applies from its date only"
        ]
    elif (
        "cluster" not in errors
        and PriceRate.objects.filter(
            cluster=cluster, gpu_model=gpu_model, capacity=capacity, effective_from=effective_from
        ).exists()
    ):
        where = f"on cluster {cluster.name}" if cluster else "platform-wide"
        errors["effective_from"] = [
            f"a rate for this GPU model and capacity {where} starts then already"
        ]
    if errors:
        raise FieldErrors(errors)
    where = f"on cluster {cluster.name}" if cluster else "platform-wide"
    with duplicate_refused(
        "effective_from", f"a rate for this GPU model and capacity {where} starts then already"
    ):
        return PriceRate.objects.create(
            cluster=cluster,
            gpu_model=gpu_model,
            capacity=capacity,
            rate_per_gpu_hour=rate_per_gpu_hour,
            effective_from=effective_from,
            note=note,
            created_by=user,
        )


# --------------------------------------------------------------------------- the meter


@dataclass(frozen=True, slots=True)
class UsageSlice:
    """What an idle source is asked about: one GPU over ``[start, end)``."""

    allocation_id: int
    node_id: int
    gpu_index: int
    hour: datetime
    start: datetime
    end: datetime


# Given slices, return {(allocation_id, hour): idle_fraction in [0, 1]} for those it knows about.
IdleSource = Callable[[list[UsageSlice]], dict[tuple[int, datetime], float]]


def _configured_idle_source() -> IdleSource | None:
    path = getattr(settings, "BILLING_IDLE_SOURCE", "")
    return import_string(path) if path else None


def _lookback() -> timedelta:
    return timedelta(days=getattr(settings, "BILLING_METER_LOOKBACK_DAYS", 35))


def _backlog_per_sweep() -> int:
    return int(getattr(settings, "BILLING_METER_BACKLOG_PER_SWEEP", 10_000))


# Allocations metered per transaction by the backlog sweep: the meter's lock is held for one
# batch at a time, so the per-minute runs go on between batches.
BACKLOG_BATCH = 200


@dataclass
class MeterResult:
    usage_rows: int = 0
    finalized_allocations: int = 0
    lost_rows: int = 0
    egress_rows: int = 0
    alerts: list[BudgetAlert] = field(default_factory=list)
    months: set[date] = field(default_factory=set)
    # Allocations ended before the lookback and never finalized that a backlog sweep metered.
    backlog_allocations: int = 0
    # True when another meter run held the lock: this one did nothing (that run covers it).
    skipped: bool = False


METER_LOCK_KEY = 0x6270_6D74  # "bpmt": billing meter, distinct from the scheduler's key


def _meter_lock() -> bool:
    """Take the meter's transaction-scoped lock without waiting. PostgreSQL: an advisory lock
    released at commit. SQLite: writers are already serialized by the database (IMMEDIATE
    transactions), and an older run can never shrink usage (cursor check), so no lock needed."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [METER_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def meter_run(*, now: datetime | None = None, idle_source: IdleSource | None = None) -> MeterResult:
    """Accrue every unfinalized allocation up to ``now`` and finalize the ended ones; meter new
    lost work; make sure the touched months have open statements; fire budget alerts.

    Idempotent: usage rows hold absolute values keyed by (allocation, hour), so re-running with
    the same ``now`` changes nothing, and a later ``now`` only extends the open hours. A finalized
    allocation is never read again. ``now`` earlier than a cursor is ignored for that allocation.
    Single-flight on PostgreSQL (a non-blocking advisory lock): a run that finds another one in
    progress returns at once with ``skipped``.
    """
    now = now or timezone.now()
    idle_source = idle_source or _configured_idle_source()
    result = MeterResult(months={calc.month_start(now)})
    with transaction.atomic():
        if not _meter_lock():
            result.skipped = True
            return result
        _meter_allocations(
            allocations=list(meter_window_query(now=now)),
            now=now,
            idle_source=idle_source,
            result=result,
        )
        _meter_lost_work(now=now, result=result)
        # The month just ended too, while its statements wait to be closed: a team moved since
        # has no usage left to meter there, and its new parent still needs that month's bill.
        previous = calc.month_start(calc.month_bounds(calc.month_start(now))[0] - calc.HOUR)
        _ensure_statements(months=result.months | {previous})
    for month in sorted(result.months):
        result.alerts.extend(budget_evaluate(month=month, now=now))
    return result


def _price_allocation(alloc, cursor, end, now, book: PriceBook):
    """The usage rows (and idle-source slices) of one allocation from ``cursor`` to ``end``.
    Raises ArithmeticError when a cost does not fit the money column."""
    rows, slices = [], []
    is_final = alloc.ended_at is not None and alloc.ended_at <= now
    capacity = Capacity.SPOT if alloc.node.spot else Capacity.ON_DEMAND
    # The rates of the node's cluster: its own where it has them, else the platform's.
    schedule = book.schedule(
        cluster_id=alloc.node.cluster_id, gpu_model_id=alloc.node.gpu_model_id, capacity=capacity
    )
    # Hours before the cursor's hour are complete; only that hour and later can still grow.
    since = max(alloc.started_at, calc.floor_hour(cursor)) if cursor else alloc.started_at
    for hour, _piece_start, stop in calc.hour_buckets(since, end):
        # A bucket is always recomputed from the allocation's own start, never added to.
        lo = max(alloc.started_at, hour)
        cost, unpriced_us = schedule.price(lo, stop)
        _check_cost(cost)
        rows.append(
            UsageRecord(
                allocation_id=alloc.pk,
                hour=hour,
                job_id=alloc.job_id,
                attempt=alloc.attempt,
                team_id=alloc.job.team_id,
                user_id=alloc.job.submitter_id,
                gpu_model_id=alloc.node.gpu_model_id,
                cluster_id=alloc.node.cluster_id,
                capacity=capacity,
                gpu_seconds=(stop - lo).total_seconds(),
                cost=cost,
                unpriced_gpu_seconds=unpriced_us / 1_000_000,
                finalized=is_final,
            )
        )
        slices.append(UsageSlice(alloc.pk, alloc.node_id, alloc.gpu_index, hour, lo, stop))
    return rows, slices


def _check_cost(cost: Decimal) -> None:
    if not (cost.is_finite() and -MAX_COST <= cost <= MAX_COST):
        raise ArithmeticError(f"cost {cost} does not fit a money column")


def meter_window_query(*, now: datetime) -> QuerySet[Allocation]:
    """The allocations a meter run at ``now`` reads: started, not finalized, and live or ended
    within the lookback, with what a usage row needs of their node and job."""
    since = now - _lookback()
    # A finalized cursor stands at its allocation's end (the meter writes it there, and nothing
    # moves the end of an ended allocation), so only cursors at ``since`` or later can be these
    # allocations': saying so lets PostgreSQL read that part of the cursors
    # (allocmeter_metered_until) instead of hashing all of them on every run.
    finalized = AllocationMeter.objects.filter(
        allocation_id=OuterRef("pk"), finalized=True, metered_until__gte=since
    )
    return (
        Allocation.objects.filter(started_at__lt=now)
        # Ended allocations are finalized by the first run after their end; looking back a
        # bounded window keeps each run from re-reading the whole allocation history (what
        # ended before it is the hourly backlog sweep's: meter_backlog_run).
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since))
        .exclude(Exists(finalized))
        .select_related("node", "job")
        # Only what a usage row needs: jobs carry large text/JSON columns the meter never reads.
        .only(*_METERED_FIELDS)
        .order_by("pk")
    )


def meter_backlog_query(*, now: datetime) -> QuerySet[Allocation]:
    """The allocations the window of ``meter_window_query`` no longer reaches but the meter has
    not finalized: ended before the lookback and never metered to their end (the meter was
    down longer than the lookback, or the allocation was recorded late). Oldest end first.
    It reads every cursor older than the lookback, hence hourly (``meter_backlog_run``)."""
    finalized = AllocationMeter.objects.filter(allocation_id=OuterRef("pk"), finalized=True)
    return (
        Allocation.objects.filter(started_at__lt=now, ended_at__lt=now - _lookback())
        .exclude(Exists(finalized))
        .select_related("node", "job")
        .only(*_METERED_FIELDS)
        .order_by("ended_at", "pk")
    )


_METERED_FIELDS = (
    "id",
    "job_id",
    "node_id",
    "gpu_index",
    "attempt",
    "started_at",
    "ended_at",
    "node__gpu_model_id",
    "node__spot",
    "node__cluster_id",
    "job__team_id",
    "job__submitter_id",
    "job__dataset",
)


def meter_backlog_run(
    *, now: datetime | None = None, idle_source: IdleSource | None = None
) -> MeterResult:
    """Meter the allocations ``meter_backlog_query`` finds, oldest end first, at most
    ``BILLING_METER_BACKLOG_PER_SWEEP`` (10,000) of them, ``BACKLOG_BATCH`` per transaction
    under the meter's lock; make sure their months have open statements; fire budget alerts.

    Without it an allocation that aged out of the per-minute window unmetered was never billed,
    and its month could never be closed (the close waits for it) until an operator raised the
    lookback. Idempotent like ``meter_run``. Stops early when another meter run holds the lock
    (``skipped``: the next sweep goes on) or when a batch meters nothing (an allocation that
    cannot be priced is logged and stays in the backlog, as in the window)."""
    now = now or timezone.now()
    idle_source = idle_source or _configured_idle_source()
    result = MeterResult()
    left = _backlog_per_sweep()
    while left > 0:
        with transaction.atomic():
            if not _meter_lock():
                result.skipped = True
                break
            batch = list(meter_backlog_query(now=now)[: min(BACKLOG_BATCH, left)])
            metered = _meter_allocations(
                allocations=batch, now=now, idle_source=idle_source, result=result
            )
            _ensure_statements(months=result.months)
        result.backlog_allocations += metered
        left -= len(batch)
        if len(batch) < BACKLOG_BATCH or not metered:
            break
    for month in sorted(result.months):
        result.alerts.extend(budget_evaluate(month=month, now=now))
    return result


def _meter_allocations(
    *,
    allocations: list[Allocation],
    now: datetime,
    idle_source: IdleSource | None,
    result: MeterResult,
) -> int:
    """Meter ``allocations`` up to ``now``; returns how many were (the rest could not be priced,
    and are logged)."""
    if not allocations:
        return 0
    cursors = dict(
        AllocationMeter.objects.filter(allocation_id__in=[a.pk for a in allocations]).values_list(
            "allocation_id", "metered_until"
        )
    )
    _meter_egress(allocations=allocations, result=result)
    book = PriceBook.load()
    slices: list[UsageSlice] = []
    rows: list[UsageRecord] = []
    meters: list[AllocationMeter] = []
    done_ids: list[int] = []
    # Ended allocations an earlier run had metered past their end: (allocation, end).
    overrun: list[tuple[Allocation, datetime]] = []
    for alloc in allocations:
        cursor = cursors.get(alloc.pk)
        end = min(alloc.ended_at, now) if alloc.ended_at else now
        if cursor is not None and end < cursor:
            if not (alloc.ended_at is not None and alloc.ended_at <= now):
                continue  # an older clock than the last run: keep what is recorded
            # The end was recorded after a run had metered the live allocation past it (the
            # loop dates an end by its poll, and commits it a little later): the time after the
            # end was never used, so the allocation is priced again up to its end.
            overrun.append((alloc, end))
            cursor = end
        try:
            alloc_rows, alloc_slices = _price_allocation(alloc, cursor, end, now, book)
        except (ArithmeticError, ValueError) as exc:
            # One allocation that cannot be priced is left for the next run (and logged); the
            # rest of the cluster is metered.
            log.error("allocation %s (job %s) not metered: %r", alloc.pk, alloc.job_id, exc)
            continue
        rows.extend(alloc_rows)
        slices.extend(alloc_slices)
        result.months.update(calc.month_start(row.hour) for row in alloc_rows)
        is_final = alloc.ended_at is not None and alloc.ended_at <= now
        meters.append(AllocationMeter(allocation=alloc, metered_until=end, finalized=is_final))
        if is_final:
            done_ids.append(alloc.pk)
    if idle_source is not None and slices:
        try:
            idle = idle_source(slices)
        except Exception:  # idle fractions are extra: usage is metered without them
            log.exception("the idle source failed; usage metered without idle fractions")
            idle = {}
        for row in rows:
            fraction = idle.get((row.allocation_id, row.hour))
            if fraction is not None:
                row.idle_fraction = min(1.0, max(0.0, float(fraction)))
    UsageRecord.objects.bulk_create(
        rows,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["allocation_id", "hour"],
        update_fields=[
            "gpu_seconds",
            "cost",
            "unpriced_gpu_seconds",
            "idle_fraction",
            "finalized",
            "capacity",
            "gpu_model",
            "cluster",
        ],
    )
    AllocationMeter.objects.bulk_create(
        meters,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["allocation"],
        update_fields=["metered_until", "finalized"],
    )
    if done_ids:
        UsageRecord.objects.filter(allocation_id__in=done_ids, finalized=False).update(
            finalized=True
        )
    daily_keys = {(r.team_id, r.hour.date()) for r in rows}
    job_keys = {(r.job_id, calc.month_start(r.hour)) for r in rows}
    unstarted: set[tuple[int, int]] = set()
    for alloc, end in overrun:
        if end <= alloc.started_at:
            unstarted.add((alloc.job_id, alloc.attempt))
        # Hours that begin at or after the end hold only time after it. An allocation ended at
        # its start held nothing (a run the cluster never started): all its rows go, the hour
        # it began in too, which no bucket above rewrote.
        cutoff = end if end > alloc.started_at else calc.floor_hour(alloc.started_at)
        after = UsageRecord.objects.filter(allocation_id=alloc.pk, hour__gte=cutoff)
        for team_id, job_id, hour in after.values_list("team_id", "job_id", "hour"):
            daily_keys.add((team_id, hour.date()))
            job_keys.add((job_id, calc.month_start(hour)))
        after.delete()
    _refresh_rollups(daily_keys=daily_keys, job_keys=job_keys)
    _drop_egress_of_unstarted(attempts=unstarted, result=result)
    result.usage_rows += len(rows)
    result.finalized_allocations += len(done_ids)
    return len(meters)


def _meter_egress(*, allocations: list[Allocation], result: MeterResult) -> None:
    """Charge the data movement of each job attempt the meter sees for the first time: when the
    attempt's cluster holds no copy of the job's dataset and some cluster does, the dataset's
    size x the cheapest holder's egress price per GB (``scheduler.policy.routing.egress_cost``'s
    rule; ties go to the holder first by name). Unknown size, no holder, or a copy on the
    attempt's cluster: no charge.

    Decided once per attempt, with the facts of the first run that meters it (an attempt some of
    whose allocations were metered before is left alone, so a fact changed later never charges
    it after the fact); written once (unique (job, attempt), conflicts ignored). Allocations
    that held no time are left out: an attempt that never ran is not charged, and one whose
    charge was made while it waited loses it (``_drop_egress_of_unstarted``)."""
    attempts: dict[tuple[int, int], Allocation] = {}
    for alloc in sorted(allocations, key=lambda a: (a.started_at, a.pk)):
        # An allocation ended at its start held nothing: a run the cluster never started, or
        # the wait of one it started late (its attempt is charged from its real start).
        if alloc.job.dataset and (alloc.ended_at is None or alloc.ended_at > alloc.started_at):
            attempts.setdefault((alloc.job_id, alloc.attempt), alloc)
    if not attempts:
        return
    job_ids = {job_id for job_id, _ in attempts}
    seen = set(
        AllocationMeter.objects.filter(allocation__job_id__in=job_ids).values_list(
            "allocation__job_id", "allocation__attempt"
        )
    )
    seen |= set(EgressCharge.objects.filter(job_id__in=job_ids).values_list("job_id", "attempt"))
    fresh = {key: alloc for key, alloc in attempts.items() if key not in seen}
    if not fresh:
        return
    names = {alloc.job.dataset for alloc in fresh.values()}
    sizes = dict(Dataset.objects.filter(name__in=names).values_list("name", "size_gb"))
    holders: dict[str, list[tuple[Decimal, str, int]]] = defaultdict(list)
    for name, cluster_id, cluster_name, price in ClusterDataset.objects.filter(
        dataset__name__in=names
    ).values_list("dataset__name", "cluster_id", "cluster__name", "egress_price_per_gb"):
        holders[name].append((price, cluster_name, cluster_id))
    charges = []
    for (job_id, attempt), alloc in sorted(fresh.items()):
        dataset = alloc.job.dataset
        size = sizes.get(dataset)
        held = holders.get(dataset, [])
        if not size or not held or alloc.node.cluster_id in {c for _, _, c in held}:
            continue
        price, _, from_cluster_id = min(held)
        try:
            cost = (Decimal(repr(float(size))) * price).quantize(calc.COST_QUANTUM)
            _check_cost(cost)
        except (ArithmeticError, ValueError) as exc:
            log.error("egress of job %s attempt %s not charged: %r", job_id, attempt, exc)
            continue
        charges.append(
            EgressCharge(
                job_id=job_id,
                attempt=attempt,
                team_id=alloc.job.team_id,
                dataset=dataset,
                from_cluster_id=from_cluster_id,
                to_cluster_id=alloc.node.cluster_id,
                size_gb=float(size),
                price_per_gb=price,
                cost=cost,
                time=alloc.started_at,
            )
        )
        result.months.add(calc.month_start(alloc.started_at))
    EgressCharge.objects.bulk_create(charges, ignore_conflicts=True)
    result.egress_rows += len(charges)


def _drop_egress_of_unstarted(*, attempts: set[tuple[int, int]], result: MeterResult) -> None:
    """Remove the egress charge of each of ``attempts`` (job, attempt) none of whose allocations
    held a GPU for any time: a run the cluster never started moved no data, and is billed
    nothing, its usage rows as its egress (the charge was made when the meter first saw it
    waiting). An attempt the cluster started late keeps its charge: it ran."""
    if not attempts:
        return
    held = Allocation.objects.filter(job_id=OuterRef("job_id"), attempt=OuterRef("attempt")).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=F("started_at"))
    )
    which = Q()
    for job_id, attempt in sorted(attempts):
        which |= Q(job_id=job_id, attempt=attempt)
    unmoved = EgressCharge.objects.filter(which).exclude(Exists(held))
    # Their months' statements and budgets are looked at again, as for any metered change.
    result.months.update(calc.month_start(t) for t in unmoved.values_list("time", flat=True))
    unmoved.delete()


_TELEMETERED = Case(When(idle_fraction__isnull=False, then=F("gpu_seconds")), default=0.0)
_DAILY_SUMS = {
    "s_secs": Sum("gpu_seconds"),
    "s_cost": Sum("cost"),
    "s_unpriced": Sum("unpriced_gpu_seconds"),
    "s_tel": Sum(_TELEMETERED, output_field=FloatField()),
    "s_idle_secs": Sum(F("gpu_seconds") * F("idle_fraction"), output_field=FloatField()),
    "s_idle_cost": Sum(F("cost") * F("idle_fraction"), output_field=FloatField()),
}


def _daily_row(team_id: int, day: date, r: dict) -> UsageDaily:
    return UsageDaily(
        team_id=team_id,
        day=day,
        gpu_model_id=r["gpu_model_id"],
        capacity=r["capacity"],
        cluster_id=r["cluster_id"],
        gpu_seconds=r["s_secs"] or 0.0,
        cost=r["s_cost"] or Decimal(0),
        unpriced_gpu_seconds=r["s_unpriced"] or 0.0,
        telemetry_gpu_seconds=r["s_tel"] or 0.0,
        idle_gpu_seconds=r["s_idle_secs"] or 0.0,
        idle_cost=Decimal(repr(r["s_idle_cost"] or 0.0)).quantize(calc.COST_QUANTUM),
    )


def _day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def _refresh_rollups(*, daily_keys: set[tuple[int, date]], job_keys: set[tuple[int, date]]) -> None:
    """Recompute the rollups of the given (team, day) and (job, month) keys from usage rows.
    Absolute recomputation, so re-running it is harmless."""
    teams_by_day: dict[date, set[int]] = defaultdict(set)
    for team_id, day in daily_keys:
        teams_by_day[day].add(team_id)
    for day, team_ids in teams_by_day.items():
        start, end = _day_bounds(day)
        fresh = [
            _daily_row(r["team_id"], day, r)
            for r in UsageRecord.objects.filter(team_id__in=team_ids, hour__gte=start, hour__lt=end)
            .values("team_id", "gpu_model_id", "capacity", "cluster_id")
            .annotate(**_DAILY_SUMS)
        ]
        UsageDaily.objects.filter(team_id__in=team_ids, day=day).delete()
        UsageDaily.objects.bulk_create(fresh)
    jobs_by_month: dict[date, set[int]] = defaultdict(set)
    for job_id, month in job_keys:
        jobs_by_month[month].add(job_id)
    for month, job_ids in jobs_by_month.items():
        start, end = calc.month_bounds(month)
        rows = [
            UsageJobMonth(
                job_id=r["job_id"],
                month=month,
                team_id=r["team_id"],
                gpu_seconds=r["s_secs"],
                cost=r["s_cost"],
            )
            for r in UsageRecord.objects.filter(job_id__in=job_ids, hour__gte=start, hour__lt=end)
            .values("job_id", "team_id")
            .annotate(s_secs=Sum("gpu_seconds"), s_cost=Sum("cost"))
        ]
        # A (job, month) whose usage rows were all deleted (a run the cluster never started, an
        # end before a metered hour) has no row to upsert: its old one would bill it still.
        UsageJobMonth.objects.filter(month=month, job_id__in=job_ids).exclude(
            job_id__in=[row.job_id for row in rows]
        ).delete()
        UsageJobMonth.objects.bulk_create(
            rows,
            batch_size=1000,
            update_conflicts=True,
            unique_fields=["job", "month"],
            update_fields=["gpu_seconds", "cost", "team"],
        )


@transaction.atomic
def usage_rollup_rebuild(*, month: date) -> tuple[int, int]:
    """Rebuild a month's rollups from its usage rows (repair, bulk loads). Idempotent. Returns
    the numbers of daily and job rows written."""
    start, end = calc.month_bounds(month)
    usage = UsageRecord.objects.filter(hour__gte=start, hour__lt=end)
    daily = [
        _daily_row(r["team_id"], r["day"].date(), r)
        # UTC days whatever zone is active: a local day would cross the month's bounds.
        for r in usage.annotate(day=TruncDay("hour", tzinfo=UTC))
        .values("team_id", "day", "gpu_model_id", "capacity", "cluster_id")
        .annotate(**_DAILY_SUMS)
    ]
    UsageDaily.objects.filter(day__gte=start.date(), day__lt=end.date()).delete()
    UsageDaily.objects.bulk_create(daily, batch_size=2000)
    jobs = [
        UsageJobMonth(
            job_id=r["job_id"],
            month=month,
            team_id=r["team_id"],
            gpu_seconds=r["s_secs"],
            cost=r["s_cost"],
        )
        for r in usage.values("job_id", "team_id").annotate(
            s_secs=Sum("gpu_seconds"), s_cost=Sum("cost")
        )
    ]
    UsageJobMonth.objects.filter(month=month).delete()
    UsageJobMonth.objects.bulk_create(jobs, batch_size=2000)
    return len(daily), len(jobs)


def _meter_lost_work(*, now: datetime, result: MeterResult) -> None:
    """Meter each increase of ``Job.lost_gpu_seconds`` once, as its own row (keyed by the new
    cumulative value), priced at the rate in force when the loss happened."""
    jobs = list(
        Job.objects.filter(lost_gpu_seconds__gt=0)
        .annotate(metered=Max("lost_work__cumulative_gpu_seconds"))
        .filter(Q(metered__isnull=True) | Q(lost_gpu_seconds__gt=F("metered") + 1e-6))
        .select_related("team")
    )
    if not jobs:
        return
    job_ids = [j.pk for j in jobs]
    last_loss: dict[int, tuple[str, datetime]] = {}
    for job_id, kind, time in (
        JobEvent.objects.filter(job_id__in=job_ids, kind__in=LOSS_EVENT_KINDS, time__lte=now)
        .order_by("job_id", "time", "id")
        .values_list("job_id", "kind", "time")
    ):
        last_loss[job_id] = (kind, time)
    # Every loss is recorded with a requeue; only the platform's own preemptions leave an event
    # of their own before it (`preempted`; `node_failed` ones come from the demo's history). A
    # requeue with none (a node failure, the cluster's own preemption, a run the backend lost)
    # is the loss itself: its time, its reason's cause.
    requeues: dict[int, list[tuple[datetime, str]]] = defaultdict(list)
    for job_id, time, data in (
        JobEvent.objects.filter(job_id__in=job_ids, kind="requeued", time__lte=now)
        .order_by("job_id", "time", "id")
        .values_list("job_id", "time", "data")
    ):
        if (data or {}).get("never_ran"):
            continue  # a run the cluster never started lost nothing: no loss to tag
        requeues[job_id].append((time, str((data or {}).get("reason", ""))))
    nodes: dict[int, list[tuple[datetime, tuple[int, bool, int | None]]]] = defaultdict(list)
    for job_id, started_at, gpu_model_id, spot, cluster_id in (
        Allocation.objects.filter(job_id__in=job_ids, started_at__lt=now)
        .order_by("job_id", "started_at", "id")
        .values_list("job_id", "started_at", "node__gpu_model_id", "node__spot", "node__cluster_id")
    ):
        nodes[job_id].append((started_at, (gpu_model_id, spot, cluster_id)))
    book = PriceBook.load()
    rows = []
    for job in jobs:
        delta = job.lost_gpu_seconds - (job.metered or 0.0)
        kind, occurred_at = last_loss.get(job.pk, (LostKind.OTHER, now))
        mine = requeues.get(job.pk)
        if mine:
            last_at, reason = mine[-1]
            before_at = mine[-2][0] if len(mine) > 1 else None
            if job.pk not in last_loss or (before_at is not None and occurred_at <= before_at):
                # no event of its own, or that event belongs to an earlier requeue
                kind, occurred_at = _LOSS_KIND.get(loss_cause(reason), LostKind.OTHER), last_at
        # The work was lost where the job ran before the loss: a requeued attempt may already
        # run on another GPU model, capacity or cluster when the meter sees the loss.
        ran = nodes.get(job.pk, [])
        before = [node for started_at, node in ran if started_at < occurred_at] or [
            node for _, node in ran
        ]
        gpu_model_id, spot, cluster_id = before[-1] if before else (job.gpu_model_id, False, None)
        capacity = Capacity.SPOT if spot else Capacity.ON_DEMAND
        cost = Decimal(0)
        rate = None
        if gpu_model_id is not None:
            schedule = book.schedule(
                cluster_id=cluster_id, gpu_model_id=gpu_model_id, capacity=capacity
            )
            rate = schedule.rate_at(occurred_at)
        try:
            if rate is not None:
                cost = (rate * Decimal(repr(delta)) / Decimal(3600)).quantize(calc.COST_QUANTUM)
            _check_cost(cost)
        except (ArithmeticError, ValueError) as exc:
            # Logged and left unmetered; every other job's loss is still metered.
            log.error("lost work of job %s not metered: %r", job.pk, exc)
            continue
        rows.append(
            LostWork(
                job_id=job.pk,
                cumulative_gpu_seconds=job.lost_gpu_seconds,
                team_id=job.team_id,
                user_id=job.submitter_id,
                gpu_model_id=gpu_model_id,
                capacity=capacity,
                kind=kind,
                occurred_at=occurred_at,
                gpu_seconds=delta,
                cost=cost,
            )
        )
        result.months.add(calc.month_start(occurred_at))
    LostWork.objects.bulk_create(rows, ignore_conflicts=True)
    result.lost_rows += len(rows)


def _ensure_statements(*, months: Iterable[date]) -> None:
    """An open statement exists for every team with usage or egress in ``months`` and for its
    ancestors (statements roll up the tree). Existing statements, open or closed, are left
    alone."""
    tree = TeamTree.load()
    wanted: list[Statement] = []
    for month in months:
        start, end = calc.month_bounds(month)
        team_ids = set(
            UsageDaily.objects.filter(day__gte=start.date(), day__lt=end.date())
            .order_by()
            .values_list("team_id", flat=True)
            .distinct()
        )
        # Egress is billed too: a month whose only charge is data movement still gets a statement.
        team_ids |= set(
            EgressCharge.objects.filter(time__gte=start, time__lt=end)
            .order_by()
            .values_list("team_id", flat=True)
            .distinct()
        )
        with_ancestors = set()
        for team_id in team_ids:
            with_ancestors.update(tree.ancestors_and_self(team_id))
        wanted.extend(Statement(team_id=t, month=month) for t in sorted(with_ancestors))
    if wanted:
        Statement.objects.bulk_create(wanted, ignore_conflicts=True)


# --------------------------------------------------------------------------- budgets


class BudgetAlertPayload(TypedDict):
    type: Literal["budget.alert"]
    team: str
    month: str
    threshold: int
    budget: str
    spend: str
    hard_stop: bool
    time: str


def egress_by_team(*, month: date) -> dict[int, Decimal]:
    """Egress charged in ``month`` per team id, the team's own charges only (one query)."""
    start, end = calc.month_bounds(month)
    return dict(
        EgressCharge.objects.filter(time__gte=start, time__lt=end)
        .values("team_id")
        .annotate(total=Sum("cost"))
        .values_list("team_id", "total")
    )


def team_spends(*, month: date, tree: TeamTree | None = None) -> dict[int, Decimal]:
    """Spend of the month per team id (GPU time + egress), each team including its sub-teams
    (two queries, whatever the number of teams)."""
    tree = tree or TeamTree.load()
    start, end = calc.month_bounds(month)
    own: dict[int, Decimal] = defaultdict(Decimal)
    for team_id, total in (
        UsageDaily.objects.filter(day__gte=start.date(), day__lt=end.date())
        .values("team_id")
        .annotate(total=Sum("cost"))
        .values_list("team_id", "total")
    ):
        own[team_id] += total or Decimal(0)
    for team_id, total in egress_by_team(month=month).items():
        own[team_id] += total or Decimal(0)
    return tree.roll_up(own)


def team_spend(*, team: Team, month: date) -> Decimal:
    """Metered spend of ``team`` and its sub-teams in ``month``: GPU time (from the daily
    rollup) + egress charges. What hard stops and alerts compare with the budget."""
    start, end = calc.month_bounds(month)
    subtree = TeamTree.load().subtree(team.pk)
    gpu = UsageDaily.objects.filter(
        team_id__in=subtree, day__gte=start.date(), day__lt=end.date()
    ).aggregate(t=Sum("cost"))["t"]
    egress = EgressCharge.objects.filter(
        team_id__in=subtree, time__gte=start, time__lt=end
    ).aggregate(t=Sum("cost"))["t"]
    return (gpu or Decimal(0)) + (egress or Decimal(0))


@transaction.atomic
def budget_set(
    *, user, team: Team, month: date, amount: Decimal, hard_stop: bool = False
) -> Budget:
    """Create or change a team's budget for a month (team owners/admins, platform admins).
    Alerts already fired for that budget stay fired."""
    if not can_manage_team(user, team):
        raise DomainError("only team owners and admins set budgets", field="team")
    errors: dict[str, list[str]] = {}
    if not isinstance(amount, Decimal):
        errors["amount"] = ["must be a decimal amount"]
    elif problem := number_error(Budget, "amount", amount):
        errors["amount"] = [problem]
    if month.day != 1:
        errors["month"] = ["must be the first day of a month"]
    elif not calc.MIN_MONTH <= month <= calc.MAX_MONTH:
        errors["month"] = [f"must be a month from {calc.MIN_MONTH:%Y-%m} to {calc.MAX_MONTH:%Y-%m}"]
    if errors:
        raise FieldErrors(errors)
    amount = amount.quantize(calc.CENT)
    budget, _ = Budget.objects.update_or_create(
        team=team, month=month, defaults={"amount": amount, "hard_stop": hard_stop}
    )
    return budget


def budget_evaluate(*, month: date, now: datetime | None = None) -> list[BudgetAlert]:
    """Fire the 50/80/100 % alerts that spend in ``month`` has reached. Each (budget, threshold)
    fires at most once ever (database constraint), even when evaluations race. Returns the alerts
    fired by this call; each is published to the budget team's stream after commit."""
    now = now or timezone.now()
    budgets = list(Budget.objects.filter(month=month).select_related("team"))
    if not budgets:
        return []
    spend = team_spends(month=month)
    fired_before = set(
        BudgetAlert.objects.filter(budget__in=budgets).values_list("budget_id", "threshold")
    )
    fired: list[BudgetAlert] = []
    for budget in budgets:
        try:
            spent = spend.get(budget.team_id, Decimal(0))
            fired.extend(_budget_alerts(budget, spent, fired_before, month, now))
        except Exception:  # one budget's alerts must not keep the others' from firing
            log.exception("alerts of budget %s not evaluated", budget.pk)
    return fired


def _budget_alerts(budget, spent, fired_before, month, now) -> list[BudgetAlert]:
    """The alerts of one budget that ``spent`` newly reaches (each created once, published
    after commit)."""
    fired = []
    for threshold in BudgetAlert.THRESHOLDS:
        if (budget.pk, threshold) in fired_before:
            continue
        if spent * 100 < budget.amount * threshold:
            break
        try:
            with transaction.atomic():
                alert = BudgetAlert.objects.create(
                    budget=budget,
                    threshold=threshold,
                    spend=spent.quantize(calc.CENT),
                    fired_at=now,
                )
        except IntegrityError:
            continue  # another evaluation fired it first
        payload: BudgetAlertPayload = {
            "type": "budget.alert",
            "team": budget.team.slug,
            "month": f"{month:%Y-%m}",
            "threshold": threshold,
            "budget": str(budget.amount),
            "spend": str(alert.spend),
            "hard_stop": budget.hard_stop,
            "time": now.isoformat(),
        }
        streams.publish(streams.team_group(budget.team_id), dict(payload))
        fired.append(alert)
    return fired


def budget_check_submission(*, team: Team, now: datetime | None = None) -> None:
    """Refuse a new submission to ``team`` when a hard-stop budget of the team or of an ancestor
    is used up this month, spend being GPU time + egress (``team_spend``). Raises DomainError on
    field "team". Running jobs are not touched."""
    now = now or timezone.now()
    month = calc.month_start(now)
    # One query in the common case: most months have no hard-stop budget anywhere, and the team
    # tree is needed only to match the ones that exist against the team's ancestors.
    hard_stops = list(Budget.objects.filter(month=month, hard_stop=True).select_related("team"))
    if not hard_stops:
        return
    chain = set(TeamTree.load().ancestors_and_self(team.pk))
    for budget in hard_stops:
        if budget.team_id not in chain:
            continue
        if team_spend(team=budget.team, month=month) >= budget.amount:
            whose = "its" if budget.team_id == team.pk else f"its parent {budget.team.slug}'s"
            raise DomainError(
                f"team {team.slug} has reached {whose} hard budget of ${budget.amount:,} for "
                f"{month:%Y-%m}; running jobs continue",
                field="team",
            )
