"""What the cost dashboards show, as plain dataclasses of series (no ORM objects, no queries):
``billing.dashboards`` fills them, the chart code (``billing.charts``) turns them into figures.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from . import calc

# ----------------------------------------------------------------------------- series


@dataclass(frozen=True, slots=True)
class DaySpend:
    day: date
    gpu_model: str
    capacity: str
    gpu_hours: float
    cost: Decimal


@dataclass(frozen=True, slots=True)
class ClusterDaySpend:
    """One day's GPU spend on one cluster (``cluster``: its name, or ``UNKNOWN_CLUSTER_LABEL``)."""

    day: date
    cluster: str
    gpu_hours: float
    cost: Decimal


@dataclass(frozen=True, slots=True)
class ClusterSpend:
    cluster: str
    gpu_hours: float
    cost: Decimal


@dataclass(frozen=True, slots=True)
class EgressLine:
    """One egress charge: a job attempt's dataset moved from ``from_cluster`` to ``to_cluster``."""

    time: datetime
    job_id: int | None  # None: a sub-team the reader is not a member of (``sub_teams``)
    attempt: int | None
    team: str
    dataset: str
    from_cluster: str
    to_cluster: str
    size_gb: float
    price_per_gb: Decimal
    cost: Decimal


# How dashboards name usage whose cluster is unknown (metered before clusters were recorded, its
# allocation gone): a bucket of its own, so the split by cluster still adds up to the spend.
UNKNOWN_CLUSTER_LABEL = "(unknown)"


@dataclass(frozen=True, slots=True)
class JobCost:
    job_id: int | None  # None: a sub-team the reader is not a member of (``sub_teams``)
    name: str
    team: str
    user: str
    gpu_hours: float
    cost: Decimal


@dataclass(frozen=True, slots=True)
class LostPoint:
    day: date
    kind: str
    gpu_hours: float
    cost: Decimal


@dataclass(frozen=True, slots=True)
class IdleSummary:
    """Idle cost from telemetry. ``coverage`` is the share of GPU time that has telemetry; with
    none, ``has_telemetry`` is False and the idle figures are unknown, not zero."""

    has_telemetry: bool
    coverage: float
    idle_gpu_hours: float
    idle_cost: Decimal


@dataclass(frozen=True, slots=True)
class BudgetSummary:
    """A scope's month against its budget. ``spend`` is the team's spend: GPU time + egress
    (``gpu_spend`` + ``egress``), what the budget, its alerts and hard stop and the forecast
    count."""

    amount: Decimal | None
    hard_stop: bool
    spend: Decimal
    forecast: Decimal
    alerts: tuple[tuple[int, datetime], ...] = ()
    gpu_spend: Decimal = Decimal(0)
    egress: Decimal = Decimal(0)

    @property
    def percent_used(self) -> float | None:
        if not self.amount:
            return None
        return float(self.spend / self.amount * 100)

    @property
    def forecast_over(self) -> bool:
        return self.amount is not None and self.forecast > self.amount


@dataclass
class CostDashboard:
    """Everything a cost dashboard shows for one scope (a team subtree, or all teams)."""

    title: str
    month: date
    now: datetime
    days: list[DaySpend]
    top_jobs: list[JobCost]
    lost: list[LostPoint]
    idle: IdleSummary
    budget: BudgetSummary
    unpriced_gpu_hours: float = 0.0
    team_slug: str | None = None
    # (username, GPU-hours, cost), largest cost first.
    by_user: list[tuple[str, float, Decimal]] = field(default_factory=list)
    # GPU spend per day and cluster (the same usage as ``days``, split the other way).
    cluster_days: list[ClusterDaySpend] = field(default_factory=list)
    # Data movement charged this month (part of ``spend``, shown apart from GPU time).
    egress: list[EgressLine] = field(default_factory=list)

    def by_cluster(self) -> list[ClusterSpend]:
        """The month's GPU spend per cluster, largest first (sums to ``spend`` before rounding)."""
        hours: dict[str, float] = defaultdict(float)
        cost: dict[str, Decimal] = defaultdict(Decimal)
        for d in self.cluster_days:
            hours[d.cluster] += d.gpu_hours
            cost[d.cluster] += d.cost
        return sorted(
            (ClusterSpend(c, hours[c], cost[c]) for c in cost), key=lambda x: (-x.cost, x.cluster)
        )

    def daily_by_cluster(self) -> dict[str, dict[date, Decimal]]:
        """Cluster -> day -> spend."""
        out: dict[str, dict[date, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
        for d in self.cluster_days:
            out[d.cluster][d.day] += d.cost
        return {c: dict(days) for c, days in sorted(out.items())}

    @property
    def egress_cost(self) -> Decimal:
        return sum((e.cost for e in self.egress), Decimal(0))

    @property
    def egress_gb(self) -> float:
        return sum(e.size_gb for e in self.egress)

    @property
    def spend(self) -> Decimal:
        """GPU spend + egress, to the cent."""
        return self.budget.spend

    @property
    def gpu_spend(self) -> Decimal:
        """GPU time only, to the cent (what ``by_cluster`` and ``daily_by_model`` split)."""
        return self.budget.gpu_spend

    @property
    def gpu_hours(self) -> float:
        return sum(d.gpu_hours for d in self.days)

    @property
    def lost_gpu_hours(self) -> float:
        return sum(p.gpu_hours for p in self.lost)

    @property
    def lost_cost(self) -> Decimal:
        return sum((p.cost for p in self.lost), Decimal(0))

    def daily_by_model(self) -> dict[str, dict[date, Decimal]]:
        """GPU model -> day -> spend."""
        out: dict[str, dict[date, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
        for d in self.days:
            out[d.gpu_model][d.day] += d.cost
        return {m: dict(days) for m, days in sorted(out.items())}

    def daily_egress(self) -> dict[date, Decimal]:
        """Day -> egress charged (on the day its attempt started)."""
        out: dict[date, Decimal] = defaultdict(Decimal)
        for e in self.egress:
            out[e.time.astimezone(UTC).date()] += e.cost
        return dict(out)

    def by_capacity(self) -> dict[str, Decimal]:
        out: dict[str, Decimal] = defaultdict(Decimal)
        for d in self.days:
            out[d.capacity] += d.cost
        return dict(out)

    def cumulative_daily(self) -> list[tuple[date, Decimal]]:
        """(day, spend to the end of that day: GPU time + egress), for the days of the month up
        to now. Egress counts on the day its attempt started, so the line meets the budget's."""
        per_day: dict[date, Decimal] = defaultdict(Decimal)
        for d in self.days:
            per_day[d.day] += d.cost
        for day, cost in self.daily_egress().items():
            per_day[day] += cost
        start, end = calc.month_bounds(self.month)
        last = min(end - timedelta(seconds=1), max(self.now, start)).date()
        out, running, day = [], Decimal(0), start.date()
        while day <= last:
            running += per_day.get(day, Decimal(0))
            out.append((day, running))
            day += timedelta(days=1)
        return out


@dataclass(frozen=True, slots=True)
class TeamRow:
    """One team's month on the admin overview. ``own_spend`` and ``spend`` are GPU time + egress
    (the budget's measure); ``own_egress`` and ``egress`` are the egress parts of each. Every
    other figure includes the sub-teams, like ``spend`` and the team's own dashboard."""

    slug: str
    name: str
    parent: str | None
    own_spend: Decimal
    spend: Decimal  # including sub-teams
    gpu_hours: float  # including sub-teams
    budget: Decimal | None
    hard_stop: bool
    forecast: Decimal
    idle_cost: Decimal | None  # including sub-teams; None: no telemetry in any of them
    lost_cost: Decimal  # including sub-teams
    own_egress: Decimal = Decimal(0)
    egress: Decimal = Decimal(0)  # including sub-teams

    @property
    def gpu_spend(self) -> Decimal:
        """GPU time including sub-teams."""
        return self.spend - self.egress

    @property
    def percent_used(self) -> float | None:
        return float(self.spend / self.budget * 100) if self.budget else None


SORT_KEYS = {
    "team": lambda r: r.slug,
    "spend": lambda r: r.spend,
    "own_spend": lambda r: r.own_spend,
    "egress": lambda r: r.egress,
    "gpu_hours": lambda r: r.gpu_hours,
    "budget": lambda r: r.budget if r.budget is not None else Decimal(-1),
    "used": lambda r: r.percent_used if r.percent_used is not None else -1.0,
    "forecast": lambda r: r.forecast,
    "idle": lambda r: r.idle_cost if r.idle_cost is not None else Decimal(-1),
    "lost": lambda r: r.lost_cost,
}


@dataclass
class AdminOverview:
    rows: list[TeamRow]
    dashboard: CostDashboard
    sort: str
    descending: bool
