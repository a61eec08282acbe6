"""Reads of billing data a user can reach: statements (list, one, what it bills, as CSV), the
price book, budgets and alerts, and the price book in force that the scheduler routes by. Every
read of team data starts from the caller's visible teams; another team's statement or budget is
NotFound (never "forbidden": names stay private). Statements read raw usage (authoritative,
rarely opened). The cost dashboards are ``billing.dashboards``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import cast

from django.db.models import F, Q, QuerySet

from catalogue.models import GpuModel
from core.errors import NotFound
from tenants.csvcells import safe_rows
from tenants.models import Team
from tenants.permissions import Caller, visible_teams

from . import calc
from .models import Adjustment, Budget, BudgetAlert, PriceRate, Statement, StatementStatus
from .statements import (
    cluster_labels,
    statement_live_egress_lines,
    statement_live_lines,
)

# ----------------------------------------------------------------------------- statements


def statement_list(*, user: Caller, team_slug: str | None = None) -> QuerySet[Statement]:
    """Statements of the caller's teams, newest month first; ``team_slug`` naming a team the
    caller does not see (or none) is NotFound, as in the cost API, not an empty list."""
    qs = Statement.objects.filter(team__in=visible_teams(user)).select_related("team")
    if team_slug:
        if not visible_teams(user).filter(slug=team_slug).exists():
            raise NotFound("no such team", field="team")
        qs = qs.filter(team__slug=team_slug)
    return qs.order_by("-month", "team__slug")


def statement_get(*, user: Caller, statement_id: int) -> Statement:
    """One statement of the caller's teams; another team's (or none) is NotFound."""
    statement = statement_list(user=user).filter(pk=statement_id).first()
    if statement is None:
        raise NotFound("no such statement", field="id")
    return statement


@dataclass(frozen=True, slots=True)
class StatementLineView:
    team: str
    gpu_model: str
    capacity: str
    gpu_hours: Decimal
    cost: Decimal
    # The cluster's name; "" when unknown.
    cluster: str = ""
    # The part of gpu_hours that had no price in the book (billed at $0).
    unpriced_gpu_hours: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class StatementEgressLineView:
    """A (sub-)team's data movement from one cluster to another in the statement's month."""

    team: str
    from_cluster: str
    to_cluster: str
    charges: int
    gb: Decimal
    cost: Decimal


@dataclass
class StatementView:
    """What a statement bills: GPU lines + egress lines = ``total`` (each line to the cent)."""

    statement: Statement
    lines: list[StatementLineView]
    total: Decimal
    adjustments: list[Adjustment] = field(default_factory=list)
    # Closed statements only: usage or egress recorded for the month after it was closed (not
    # billed here). A statement closed before egress was billed shows that month's egress here.
    # Negative when usage left the month after the close (``withdrawn_after_close``).
    metered_after_close: Decimal = Decimal(0)
    egress_lines: list[StatementEgressLineView] = field(default_factory=list)

    @property
    def withdrawn_after_close(self) -> Decimal:
        """Closed statements: what left the month's usage of the statement's teams after the
        close (a negative ``metered_after_close``: time metered past a run's end, a run the
        cluster never started, a sub-team moved away), as a positive amount; else zero."""
        return max(-self.metered_after_close, Decimal(0))

    @property
    def gpu_total(self) -> Decimal:
        return sum((x.cost for x in self.lines), Decimal(0))

    @property
    def egress_total(self) -> Decimal:
        return sum((x.cost for x in self.egress_lines), Decimal(0))

    @property
    def unpriced_gpu_hours(self) -> Decimal:
        """GPU-hours on the lines that had no price (billed at $0): the lines' own, summed."""
        return sum((x.unpriced_gpu_hours for x in self.lines), Decimal(0)).quantize(
            Decimal("0.0001")
        )

    @property
    def adjusted_total(self) -> Decimal:
        return self.total + sum((a.amount for a in self.adjustments), Decimal(0))

    @property
    def by_team(self) -> list[tuple[str, Decimal]]:
        out: dict[str, Decimal] = defaultdict(Decimal)
        lines: list[StatementLineView | StatementEgressLineView] = [*self.lines, *self.egress_lines]
        for line in lines:
            out[line.team] += line.cost
        return sorted(out.items())


def _live_egress_lines(
    statement: Statement, teams: dict[int, str]
) -> list[StatementEgressLineView]:
    lines = [
        StatementEgressLineView(
            teams.get(e["team_id"], "?"),
            e["from_cluster"],
            e["to_cluster"],
            e["charges"],
            e["gb"],
            e["cost"],
        )
        for e in statement_live_egress_lines(statement=statement)
    ]
    lines.sort(key=lambda x: (x.team, x.from_cluster, x.to_cluster))
    return lines


def statement_view(*, statement: Statement) -> StatementView:
    """What a statement says: frozen GPU and egress lines when closed, live usage and egress
    charges when open. The total is the GPU lines + the egress lines, to the cent."""
    teams = dict(Team.objects.values_list("id", "slug"))
    models_ = dict(GpuModel.objects.values_list("id", "name"))
    adjustments = list(statement.adjustments.select_related("created_by"))
    if statement.status == StatementStatus.CLOSED:
        lines = [
            StatementLineView(
                teams.get(line.team_id, "?"),
                models_.get(line.gpu_model_id, "?"),
                line.capacity,
                line.gpu_hours,
                line.cost,
                line.cluster,
                line.unpriced_gpu_hours,
            )
            for line in statement.lines.all()
        ]
        egress_lines = [
            StatementEgressLineView(
                teams.get(e.team_id, "?"), e.from_cluster, e.to_cluster, e.charges, e.gb, e.cost
            )
            for e in statement.egress_lines.all()
        ]
        # Priced the way closing priced it, each line to the cent: rounding the exact sum once
        # instead reported cents "recorded after close" when nothing was.
        live_total = sum(
            (row["cost"].quantize(calc.CENT) for row in statement_live_lines(statement=statement)),
            Decimal(0),
        ) + sum(
            (row["cost"] for row in statement_live_egress_lines(statement=statement)), Decimal(0)
        )
        assert (
            statement.total is not None
        )  # a closed statement has one (statement_closed_is_frozen)
        return StatementView(
            statement,
            lines,
            statement.total,
            adjustments,
            metered_after_close=live_total - statement.total,
            egress_lines=egress_lines,
        )
    live = statement_live_lines(statement=statement)
    clusters = cluster_labels({row["cluster_id"] for row in live})
    lines = [
        StatementLineView(
            teams.get(row["team_id"], "?"),
            models_.get(row["gpu_model_id"], "?"),
            row["capacity"],
            calc.line_gpu_hours(row["gpu_seconds"]),
            row["cost"].quantize(calc.CENT),
            clusters[row["cluster_id"]],
            calc.line_gpu_hours(row["unpriced_gpu_seconds"]),
        )
        for row in live
    ]
    lines.sort(key=lambda x: (x.team, x.gpu_model, x.capacity, x.cluster))
    egress_lines = _live_egress_lines(statement, teams)
    total = sum((x.cost for x in lines), Decimal(0)) + sum(
        (x.cost for x in egress_lines), Decimal(0)
    )
    return StatementView(statement, lines, total, adjustments, egress_lines=egress_lines)


def statement_csv_rows(*, view: StatementView) -> list[list[str]]:
    """The statement as CSV rows: a header, one row per GPU line, one per egress line,
    adjustments, totals; every cell safe to open in a spreadsheet (``tenants.csvcells``).

    Columns are only ever appended, so readers of the earlier columns by position keep working:
    ``cluster`` (where the GPU line ran, or where the egress line's data went; empty on the
    total and adjustment rows and for usage whose cluster is unknown), then ``from_cluster``
    and ``gb`` (egress lines only). An egress line says ``egress`` in the ``capacity`` column
    (where the total and adjustment rows name themselves too) and its number of charges in
    ``note``; its cost is in ``cost_usd`` like any line, and the total row is the sum of all.
    Last, ``unpriced_gpu_hours``: the GPU-hours of a GPU line that had no price (billed at $0);
    empty on every other row."""
    s = view.statement
    month = f"{s.month:%Y-%m}"
    header = ["month", "statement_team", "team", "gpu_model", "capacity", "gpu_hours", "cost_usd"]
    rows = [[*header, "note", "cluster", "from_cluster", "gb", "unpriced_gpu_hours"]]

    def summary(label: str, amount: Decimal, note: str = "") -> list[str]:
        return [month, s.team.slug, "", "", label, "", str(amount), note, "", "", "", ""]

    for line in view.lines:
        rows.append(
            [
                month,
                s.team.slug,
                line.team,
                line.gpu_model,
                line.capacity,
                str(line.gpu_hours),
                str(line.cost),
                "",
                line.cluster,
                "",
                "",
                str(line.unpriced_gpu_hours),
            ]
        )
    for e in view.egress_lines:
        charges = f"{e.charges} charge" + ("" if e.charges == 1 else "s")
        rows.append(
            [
                month,
                s.team.slug,
                e.team,
                "",
                "egress",
                "",
                str(e.cost),
                charges,
                e.to_cluster,
                e.from_cluster,
                str(e.gb),
                "",
            ]
        )
    rows.append(summary("total", view.total))
    for adj in view.adjustments:
        # The reason in a column of its own (an admin's free text: escaped like any cell).
        rows.append(summary("adjustment", adj.amount, adj.reason))
    rows.append(summary(f"adjusted total ({s.status})", view.adjusted_total))
    return safe_rows(rows)


# ----------------------------------------------------------------------------- other lists


def price_list() -> QuerySet[PriceRate]:
    """The whole price book (public to every signed-in user: prices are not secret), the
    platform-wide rates first, then each cluster's overrides."""
    return PriceRate.objects.select_related("gpu_model", "cluster").order_by(
        F("cluster__name").asc(nulls_first=True), "gpu_model__name", "capacity", "effective_from"
    )


def budget_list(*, user: Caller) -> QuerySet[Budget]:
    return Budget.objects.filter(team__in=visible_teams(user)).select_related("team")


def alert_list(*, user: Caller) -> QuerySet[BudgetAlert]:
    return BudgetAlert.objects.filter(budget__team__in=visible_teams(user)).select_related(
        "budget__team"
    )


def price_book_in_force(
    *, at: datetime, cluster_names: list[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """What the scheduler routes by (``settings.SCHEDULER_PRICE_BOOK_SOURCE``): per cluster,
    GPU model -> capacity type -> USD per GPU-hour in force at ``at``: the cluster's own rate
    where it has one in force, else the platform-wide rate (the meter's rule,
    ``calc.PriceSchedule.overridden_by``). One query."""
    platform: dict[str, dict[str, float]] = {}
    own: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    # The plugin types "cluster__name" as str; through the nullable FK it is None for a
    # platform-wide rate.
    rows = cast(
        Iterable[tuple[str | None, str, str, Decimal]],
        PriceRate.objects.filter(effective_from__lte=at)
        .filter(Q(cluster__isnull=True) | Q(cluster__name__in=cluster_names))
        .order_by("effective_from", "id")
        .values_list("cluster__name", "gpu_model__name", "capacity", "rate_per_gpu_hour"),
    )
    for cluster, model, capacity, rate in rows:
        book = platform if cluster is None else own[cluster]
        book.setdefault(model, {})[capacity] = float(rate)  # the latest step wins
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in cluster_names:
        prices = {model: dict(rates) for model, rates in platform.items()}
        for model, rates in own.get(name, {}).items():
            prices.setdefault(model, {}).update(rates)
        out[name] = prices
    return out
