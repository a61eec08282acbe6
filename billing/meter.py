"""The meter: the per-minute run (``meter_run``), the hourly sweep of its backlog
(``meter_backlog_run``, searching from its mark: ``meter_backlog_search``), the allocations each
reads (``meter_window_query``, ``meter_backlog_query``) and the lock they share.

The meter is idempotent: it writes absolute values keyed by (allocation, hour), so running it
twice, concurrently, or after a crash never double counts (the unique constraint
``usage_unique_alloc_hour`` makes a second row impossible). A run meters a batch of allocations
(``_meter_allocations``: their usage rows, each allocation priced by ``billing.usage``; their
egress charges, ``billing.egress``; the rollups of what changed, ``billing.rollups``) and lost
work (``billing.lost_work``), makes sure the touched months have open statements
(``_ensure_statements``) and fires budget alerts (``billing.services.budget_evaluate``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, Max, Min, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string

from scheduler.models import Allocation
from tenants.tree import TeamTree

from . import calc
from .egress import _drop_egress_of_unstarted, _meter_egress
from .lost_work import _meter_lost_work
from .models import AllocationMeter, BacklogMark, EgressCharge, Statement, UsageDaily, UsageRecord
from .rollups import _refresh_rollups
from .services import PriceBook, budget_evaluate
from .usage import IdleSource, MeterResult, UsageSlice, _price_allocation

log = logging.getLogger(__name__)


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

# How long after a sweep read the highest allocation id it trusts that every lower id is visible:
# a transaction writing allocations (the loop's, an import's) has committed by then.
BACKLOG_SETTLE = timedelta(hours=1)


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


def meter_backlog_query(*, now: datetime, mark: BacklogMark | None = None) -> QuerySet[Allocation]:
    """The allocations the window of ``meter_window_query`` no longer reaches but the meter has
    not finalized: ended before the lookback and never metered to their end (the meter was
    down longer than the lookback, the allocation or its end was recorded late, or it could not
    be priced). Oldest end first. Searched where ``meter_backlog_search`` looks."""
    finalized = AllocationMeter.objects.filter(allocation_id=OuterRef("pk"), finalized=True)
    return (
        meter_backlog_search(now=now, mark=mark)
        .exclude(Exists(finalized))
        .select_related("node", "job")
        .only(*_METERED_FIELDS)
        .order_by("ended_at", "pk")
    )


def meter_backlog_search(*, now: datetime, mark: BacklogMark | None = None) -> QuerySet[Allocation]:
    """Where the backlog sweep at ``now`` looks: the allocations started before ``now`` and ended
    before the lookback that ended since the sweeps' mark (``BacklogMark``, read when not
    given), were recorded since it, or have a cursor not finalized (an end recorded after the
    meter had metered the live allocation). Nothing else older than the lookback can be owed
    (the mark's invariant), so the search follows the backlog and the live cursors, not the
    history. Without a mark: every allocation ended before the lookback."""
    mark = mark if mark is not None else _backlog_mark()
    cutoff = now - _lookback()
    old = Allocation.objects.filter(started_at__lt=now, ended_at__lt=cutoff)
    if mark.ended_before is None or mark.checked_id is None:
        return old
    # One union of three index reads (allocation_ended_at, the primary key, allocmeter_finalized)
    # rather than an OR of them, which PostgreSQL would answer with a scan of the whole table;
    # each part bounded itself (the planner does not carry the outer bounds into a union).
    ended_since = Allocation.objects.filter(
        ended_at__gte=mark.ended_before, ended_at__lt=cutoff
    ).values("pk")
    recorded_since = Allocation.objects.filter(pk__gt=mark.checked_id).values("pk")
    open_cursors = AllocationMeter.objects.filter(finalized=False).values("allocation_id")
    return old.filter(pk__in=ended_since.union(recorded_since, open_cursors))


def _backlog_mark() -> BacklogMark:
    return BacklogMark.objects.filter(pk=1).first() or BacklogMark(pk=1)


def _backlog_mark_advance(*, now: datetime, mark: BacklogMark) -> None:
    """Move the sweeps' mark, ``mark``, after a sweep at ``now``, from what a search with it
    still finds; in the meter's lock. ``ended_before`` goes to the lookback's start, but no later than the end of
    an allocation still owed that has no cursor (only the mark's ranges find it) nor the start
    of a live one that has none (its end, when recorded, may lie before the lookback);
    ``checked_id`` to the highest allocation id seen ``BACKLOG_SETTLE`` ago (committed since),
    and the id seen now waits its turn."""
    never_metered = ~Exists(AllocationMeter.objects.filter(allocation_id=OuterRef("pk")))
    owed_from = (
        meter_backlog_search(now=now, mark=mark)
        .filter(never_metered)
        .aggregate(at=Min("ended_at"))["at"]
    )
    live_from = (
        Allocation.objects.filter(ended_at__isnull=True)
        .filter(never_metered)
        .aggregate(at=Min("started_at"))["at"]
    )
    checked_id = mark.checked_id
    if mark.seen_at is None or mark.seen_at <= now - BACKLOG_SETTLE:
        if mark.seen_at is not None:
            checked_id = mark.seen_id
        mark.seen_id = Allocation.objects.aggregate(top=Max("pk"))["top"] or 0
        mark.seen_at = now
    if checked_id is not None:
        mark.checked_id = checked_id
        mark.ended_before = min(t for t in (now - _lookback(), owed_from, live_from) if t)
    mark.save()


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
    cannot be priced is logged and stays in the backlog, as in the window). Then moves the
    sweeps' mark (``BacklogMark``, ``_backlog_mark_advance``), so the next sweep searches what
    ended or was recorded since, not the whole history (``meter_backlog_search``)."""
    now = now or timezone.now()
    idle_source = idle_source or _configured_idle_source()
    result = MeterResult()
    left = _backlog_per_sweep()
    mark = _backlog_mark()
    while left > 0:
        with transaction.atomic():
            if not _meter_lock():
                result.skipped = True
                break
            batch = list(meter_backlog_query(now=now, mark=mark)[: min(BACKLOG_BATCH, left)])
            metered = _meter_allocations(
                allocations=batch, now=now, idle_source=idle_source, result=result
            )
            _ensure_statements(months=result.months)
        result.backlog_allocations += metered
        left -= len(batch)
        if len(batch) < BACKLOG_BATCH or not metered:
            break
    if not result.skipped:
        with transaction.atomic():
            if _meter_lock():
                # Read again under the lock: the move is computed from the mark it replaces.
                _backlog_mark_advance(now=now, mark=_backlog_mark())
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
