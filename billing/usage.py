"""One allocation's usage rows, and the types the meter's modules share.

``_price_allocation`` turns an allocation's time since its cursor into usage rows (absolute
values keyed by (allocation, hour), priced by ``billing.services.PriceBook``) and the slices an
idle source is asked about. ``MeterResult`` (what a run did) and ``_check_cost`` live here,
below the meter's other modules (``billing.meter``, ``billing.egress``, ``billing.lost_work``),
so that they import one way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from . import calc
from .models import MAX_COST, BudgetAlert, Capacity, UsageRecord
from .services import PriceBook

if TYPE_CHECKING:
    from scheduler.models import Allocation


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


def _price_allocation(
    alloc: Allocation, cursor: datetime | None, end: datetime, now: datetime, book: PriceBook
) -> tuple[list[UsageRecord], list[UsageSlice]]:
    """The usage rows (and idle-source slices) of one allocation from ``cursor`` to ``end``.
    Raises ArithmeticError when a cost does not fit the money column."""
    rows: list[UsageRecord] = []
    slices: list[UsageSlice] = []
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
