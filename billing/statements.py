"""Statements: a top-level team's bill for one month, its lines computed from usage and egress
charges while it is open (``statement_live_lines``, ``statement_live_egress_lines``), frozen when
a platform admin closes it (``statement_close``), corrected afterwards only by adjustments
(``adjustment_add``). The meter opens them (``billing.meter``); pages and the API read them
through ``billing.selectors``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import TypedDict, cast

from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Least
from django.utils import timezone

from core.bounds import number_error
from core.errors import Conflict, DomainError, FieldErrors, NotFound
from scheduler.models import Allocation, Cluster
from tenants.permissions import Caller, is_platform_admin
from tenants.tree import TeamTree

from . import calc
from .models import (
    Adjustment,
    AllocationMeter,
    EgressCharge,
    Statement,
    StatementEgressLine,
    StatementLine,
    StatementMode,
    StatementStatus,
    UsageRecord,
)

UNKNOWN_CLUSTER = ""


class LiveLine(TypedDict):
    """One GPU line of an open statement (``statement_live_lines``)."""

    team_id: int
    gpu_model_id: int
    capacity: str
    cluster_id: int | None  # None: usage whose cluster was never known
    gpu_seconds: float
    unpriced_gpu_seconds: float
    cost: Decimal


class LiveEgressLine(TypedDict):
    """One egress line of an open statement (``statement_live_egress_lines``)."""

    team_id: int
    from_cluster: str
    to_cluster: str
    charges: int
    gb: Decimal
    cost: Decimal


def cluster_labels(cluster_ids: Iterable[int | None]) -> dict[int | None, str]:
    """What a bill calls each cluster id of usage: its name; ``UNKNOWN_CLUSTER`` ("") for usage
    whose cluster was never known; ``removed-<id>`` for a cluster deleted since."""
    ids = set(cluster_ids)
    names = dict(
        Cluster.objects.filter(pk__in=[i for i in ids if i is not None]).values_list("id", "name")
    )
    return {i: UNKNOWN_CLUSTER if i is None else names.get(i, f"removed-{i}") for i in ids}


def statement_live_lines(*, statement: Statement) -> list[LiveLine]:
    """Lines of a statement computed from usage now: one per (sub-team, GPU model, capacity,
    cluster id; None when unknown), with its GPU-seconds, the part of them that had no price
    (``unpriced_gpu_seconds``) and its cost."""
    start, end = calc.month_bounds(statement.month)
    tree = TeamTree.load()
    # The plugin types the sums as Any and the nullable cluster_id as int: LiveLine says what
    # the rows hold (a group's sums are never null: a group has at least one row).
    rows = list(
        UsageRecord.objects.filter(
            team_id__in=tree.subtree(statement.team_id), hour__gte=start, hour__lt=end
        )
        .values("team_id", "gpu_model_id", "capacity", "cluster_id")
        .annotate(
            gpu_seconds=Sum("gpu_seconds"),
            unpriced_gpu_seconds=Sum("unpriced_gpu_seconds"),
            cost=Sum("cost"),
        )
        .order_by("team_id", "gpu_model_id", "capacity", "cluster_id")
    )
    return cast(list[LiveLine], rows)


def statement_live_egress_lines(*, statement: Statement) -> list[LiveEgressLine]:
    """Egress lines of a statement computed from the charges now, as a bill shows them (what
    closing freezes): one per (sub-team, source cluster, destination cluster) with
    ``team_id``, the clusters' names, the number of charges, GB (three decimals) and the cost to
    the cent."""
    start, end = calc.month_bounds(statement.month)
    tree = TeamTree.load()
    rows = list(
        EgressCharge.objects.filter(
            team_id__in=tree.subtree(statement.team_id), time__gte=start, time__lt=end
        )
        .values("team_id", "from_cluster_id", "to_cluster_id")
        .annotate(charges=Count("id"), gb=Sum("size_gb"), cost=Sum("cost"))
        .order_by("team_id", "from_cluster_id", "to_cluster_id")
    )
    names = cluster_labels(
        {r["from_cluster_id"] for r in rows} | {r["to_cluster_id"] for r in rows}
    )
    return [
        {
            "team_id": r["team_id"],
            "from_cluster": names[r["from_cluster_id"]],
            "to_cluster": names[r["to_cluster_id"]],
            "charges": r["charges"],
            "gb": Decimal(repr(r["gb"])).quantize(Decimal("0.001")),
            "cost": r["cost"].quantize(calc.CENT),
        }
        for r in rows
    ]


def unmetered_allocations_query(*, team_ids: list[int], month: date) -> QuerySet[Allocation]:
    """The allocations of ``team_ids``' jobs that held a GPU in ``month`` and are not yet
    metered to the month's end (or to their own end, when sooner): a meter run has still to
    bill them (and charge their attempts' egress) in that month. Empty once the meter has run
    past the month's end; an allocation ended at its start held nothing and is not in it."""
    start, end = calc.month_bounds(month)
    # Every cursor that can count stands after the month's start (a finalized one at its
    # allocation's end, which the meter writes and nothing moves once ended): saying so lets
    # PostgreSQL read only those cursors (allocmeter_metered_until) instead of hashing all of
    # them. Were that ever not so, the close would wait: it never freezes a short bill.
    caught_up = AllocationMeter.objects.filter(
        allocation_id=OuterRef("pk"), metered_until__gt=start
    ).filter(
        Q(finalized=True) | Q(metered_until__gte=Least(Coalesce(OuterRef("ended_at"), end), end))
    )
    return (
        Allocation.objects.filter(job__team_id__in=team_ids, started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .exclude(ended_at__lte=F("started_at"))
        .exclude(Exists(caught_up))
    )


def unmetered_allocations(*, team_ids: list[int], month: date) -> int:
    """How many allocations ``unmetered_allocations_query`` holds: zero once the month can be
    closed."""
    return unmetered_allocations_query(team_ids=team_ids, month=month).count()


def statement_close(
    *, user: Caller, statement_id: int, mode: str | None = None, now: datetime | None = None
) -> Statement:
    """Freeze a past month's statement (platform admins): its GPU lines, egress lines and total
    (the sum of both, each line rounded to the cent) are written once and never change again.
    Closing twice is a Conflict and writes nothing; so is closing a month still running."""
    now = now or timezone.now()
    if not is_platform_admin(user):
        raise DomainError("only platform admins close statements", field="status")
    if mode is not None and mode not in StatementMode.values:
        raise DomainError(f"must be one of {', '.join(StatementMode.values)}", field="mode")
    with transaction.atomic():
        statement = Statement.objects.filter(pk=statement_id).first()
        if statement is None:
            raise NotFound("no such statement", field="id")
        tree = TeamTree.load()
        # The statement's and its tree relatives' rows of the month, locked in one order: two
        # closes (a team's and its parent's) each see the other's outcome, and never deadlock.
        related = set(tree.ancestors_and_self(statement.team_id)) | set(
            tree.subtree(statement.team_id)
        )
        locked = list(
            Statement.objects.select_for_update()
            .filter(month=statement.month, team_id__in=related)
            .order_by("pk")
        )
        statement = next((row for row in locked if row.pk == statement_id), None)
        if statement is None:
            raise NotFound("no such statement", field="id")
        if statement.status != StatementStatus.OPEN:
            raise Conflict("statement is already closed; add an adjustment", field="status")
        _, month_end = calc.month_bounds(statement.month)
        if now < month_end:
            raise Conflict(f"{statement.month:%Y-%m} is not over yet", field="status")
        # A bill frozen before the meter has caught up would leave the month's last usage (all
        # of it after a meter outage) "recorded after close", to settle by hand.
        behind_query = unmetered_allocations_query(
            team_ids=tree.subtree(statement.team_id), month=statement.month
        )
        if behind := behind_query.count():
            raise Conflict(_not_metered_message(statement, behind, behind_query), field="status")
        if (mode or statement.mode) == StatementMode.CHARGEBACK:
            _refuse_a_second_charge(statement, locked, tree)
        lines = statement_live_lines(statement=statement)
        cluster_names = cluster_labels({line["cluster_id"] for line in lines})
        frozen = [
            StatementLine(
                statement=statement,
                team_id=line["team_id"],
                gpu_model_id=line["gpu_model_id"],
                capacity=line["capacity"],
                cluster=cluster_names[line["cluster_id"]],
                gpu_hours=calc.line_gpu_hours(line["gpu_seconds"]),
                unpriced_gpu_hours=calc.line_gpu_hours(line["unpriced_gpu_seconds"]),
                cost=line["cost"].quantize(calc.CENT),
            )
            for line in lines
        ]
        StatementLine.objects.bulk_create(frozen)
        frozen_egress = [
            StatementEgressLine(statement=statement, **e)
            for e in statement_live_egress_lines(statement=statement)
        ]
        StatementEgressLine.objects.bulk_create(frozen_egress)
        # The bill is its lines: GPU lines + egress lines, each already to the cent.
        total = sum((line.cost for line in frozen), Decimal(0)) + sum(
            (line.cost for line in frozen_egress), Decimal(0)
        )
        changed = Statement.objects.filter(pk=statement.pk, status=StatementStatus.OPEN).update(
            status=StatementStatus.CLOSED,
            total=total,
            closed_at=now,
            closed_by=user,
            mode=mode or statement.mode,
        )
        if not changed:
            raise Conflict("statement changed meanwhile; try again", field="status")
        statement.refresh_from_db()
    return statement


def _not_metered_message(statement: Statement, behind: int, query: QuerySet[Allocation]) -> str:
    """Why a close waits for the meter, naming the first allocations it waits for (so an
    operator can look one up) and what to do: nothing, the meter catches up by itself, also
    with allocations older than its lookback (``meter.meter_backlog_run``, hourly)."""
    shown = list(query.order_by("pk").values_list("pk", flat=True)[:_NAMED_ALLOCATIONS])
    plural = "s" if behind != 1 else ""
    names = ", ".join(str(pk) for pk in shown)
    if behind > len(shown):
        names += f" and {behind - len(shown)} more"
    return (
        f"{statement.month:%Y-%m} is not fully metered yet: {behind} GPU allocation{plural} of "
        f"its teams still to be metered to the month's end (allocation{plural} {names}); the "
        "meter catches up by itself: within a minute, within the hour for an allocation ended "
        "before its lookback (manage.py billing_meter --backlog meters those now); close it "
        "after that"
    )


_NAMED_ALLOCATIONS = 5


def _refuse_a_second_charge(statement: Statement, related: list[Statement], tree: TeamTree) -> None:
    """A team's usage is charged on one statement of a month at most. A statement covers the
    team's sub-teams too, so a chargeback of a team and one of its ancestor's or descendant's
    would charge the sub-team's usage twice: such a close is refused (showback, which charges
    nobody, is not)."""
    for other in related:
        if (
            other.pk != statement.pk
            and other.status == StatementStatus.CLOSED
            and other.mode == StatementMode.CHARGEBACK
        ):
            whose = (
                "sub-team"
                if statement.team_id in tree.ancestors_and_self(other.team_id)
                else "parent team"
            )
            name = tree.slugs.get(other.team_id, str(other.team_id))
            raise Conflict(
                f"{statement.month:%Y-%m} of its {whose} {name} is already closed as chargeback, "
                "and one of the two statements covers the other's usage: close this one as "
                "showback, so no usage is charged twice",
                field="mode",
            )


@transaction.atomic
def adjustment_add(
    *, user: Caller, statement_id: int, amount: Decimal, reason: str, now: datetime | None = None
) -> Adjustment:
    """Append a correction to a statement (platform admins). The statement's frozen lines and
    total are untouched; its adjusted total is total + adjustments."""
    if not is_platform_admin(user):
        raise DomainError("only platform admins add adjustments", field="amount")
    statement = Statement.objects.filter(pk=statement_id).first()
    if statement is None:
        raise NotFound("no such statement", field="id")
    errors: dict[str, list[str]] = {}
    if not amount.is_finite() or amount == 0:
        errors["amount"] = ["must be a non-zero decimal amount"]
    elif problem := number_error(Adjustment, "amount", amount):
        errors["amount"] = [problem]
    if not reason.strip():
        errors["reason"] = ["must not be blank"]
    if errors:
        raise FieldErrors(errors)
    return Adjustment.objects.create(
        statement=statement,
        amount=amount.quantize(calc.CENT),
        reason=reason.strip(),
        created_by=user,
        created_at=now or timezone.now(),
    )
