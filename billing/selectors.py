"""Reads of billing data a user can reach. Every read starts from the caller's visible teams;
another team's statement, budget or dashboard is NotFound (never "forbidden": names stay private).

Dashboard selectors return plain dataclasses of series (no ORM objects), which the chart code
turns into figures. A dashboard costs a fixed number of small queries whatever the data size:
daily spend and idle sums (by GPU model, and by cluster) from the ``UsageDaily`` rollup, top jobs
from ``UsageJobMonth``, egress charges (one row per job attempt that moved data), the
forecast's trailing-day spend from raw usage and egress charges (25 hours of rows at most, maybe
from the month before: the burn rate is the team's, not the month's), and small reads of lost
work, budget, alerts and names. Statements read raw usage (authoritative, rarely opened).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db.models import F, Q, QuerySet, Sum
from django.db.models.functions import TruncDay

from catalogue.models import GpuModel
from core.errors import NotFound
from scheduler.models import Job
from tenants.csvcells import safe_rows
from tenants.models import Team
from tenants.permissions import is_platform_admin, visible_teams

from . import calc
from .models import (
    Budget,
    BudgetAlert,
    EgressCharge,
    LostWork,
    PriceRate,
    Statement,
    StatementStatus,
    UsageDaily,
    UsageJobMonth,
    UsageRecord,
)
from .statements import (
    cluster_labels,
    statement_live_egress_lines,
    statement_live_lines,
)
from .tree import TeamTree

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
    job_id: int
    attempt: int
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
    job_id: int
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


# ----------------------------------------------------------------------------- scope helpers


def _team_for(user, slug: str) -> Team:
    team = visible_teams(user).filter(slug=slug).first()
    if team is None:
        raise NotFound("no such team", field="team")
    return team


def default_team(user) -> Team | None:
    """The first team the user may see (the dashboard's landing team)."""
    return visible_teams(user).order_by("slug").first()


def _month_days(month: date) -> tuple[date, date]:
    start, end = calc.month_bounds(month)
    return start.date(), end.date()


def _daily_series(team_ids: list[int] | None, month: date):
    """Daily spend by GPU model and capacity, the idle summary and the unpriced GPU-hours, from
    the daily rollup (a few rows per day whatever the number of allocations)."""
    first, after = _month_days(month)
    qs = UsageDaily.objects.filter(day__gte=first, day__lt=after)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    names = dict(GpuModel.objects.values_list("id", "name"))
    rows = (
        qs.values("day", "gpu_model_id", "capacity")
        .annotate(
            s_secs=Sum("gpu_seconds"),
            s_cost=Sum("cost"),
            s_unpriced=Sum("unpriced_gpu_seconds"),
            s_tel=Sum("telemetry_gpu_seconds"),
            s_idle_secs=Sum("idle_gpu_seconds"),
            s_idle_cost=Sum("idle_cost"),
        )
        .order_by("day", "gpu_model_id", "capacity")
    )
    days: list[DaySpend] = []
    total_secs = tel_secs = idle_secs = unpriced = 0.0
    idle_cost = Decimal(0)
    for r in rows:
        days.append(
            DaySpend(
                r["day"],
                names.get(r["gpu_model_id"], "?"),
                r["capacity"],
                (r["s_secs"] or 0.0) / 3600,
                r["s_cost"] or Decimal(0),
            )
        )
        total_secs += r["s_secs"] or 0.0
        tel_secs += r["s_tel"] or 0.0
        idle_secs += r["s_idle_secs"] or 0.0
        idle_cost += r["s_idle_cost"] or Decimal(0)
        unpriced += r["s_unpriced"] or 0.0
    idle = IdleSummary(
        has_telemetry=tel_secs > 0,
        coverage=(tel_secs / total_secs) if total_secs else 0.0,
        idle_gpu_hours=idle_secs / 3600,
        idle_cost=idle_cost.quantize(calc.CENT),
    )
    return days, idle, unpriced / 3600


def _cluster_names(ids) -> dict[int | None, str]:
    return {i: name or UNKNOWN_CLUSTER_LABEL for i, name in cluster_labels(ids).items()}


def _cluster_series(team_ids: list[int] | None, month: date) -> list[ClusterDaySpend]:
    """Daily spend by cluster, from the daily rollup (one query, plus one for the names)."""
    first, after = _month_days(month)
    qs = UsageDaily.objects.filter(day__gte=first, day__lt=after)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    rows = list(
        qs.values("day", "cluster_id")
        .annotate(s_secs=Sum("gpu_seconds"), s_cost=Sum("cost"))
        .order_by("day", "cluster_id")
    )
    names = _cluster_names({r["cluster_id"] for r in rows})
    return [
        ClusterDaySpend(
            r["day"],
            names[r["cluster_id"]],
            (r["s_secs"] or 0.0) / 3600,
            r["s_cost"] or Decimal(0),
        )
        for r in rows
    ]


def _egress_series(team_ids: list[int] | None, month: date) -> list[EgressLine]:
    """The month's egress charges, oldest first."""
    start, end = calc.month_bounds(month)
    qs = EgressCharge.objects.filter(time__gte=start, time__lt=end)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    rows = list(qs.select_related("team").order_by("time", "id"))
    names = _cluster_names({r.from_cluster_id for r in rows} | {r.to_cluster_id for r in rows})
    return [
        EgressLine(
            time=r.time,
            job_id=r.job_id,
            attempt=r.attempt,
            team=r.team.slug,
            dataset=r.dataset,
            from_cluster=names[r.from_cluster_id],
            to_cluster=names[r.to_cluster_id],
            size_gb=r.size_gb,
            price_per_gb=r.price_per_gb,
            cost=r.cost,
        )
        for r in rows
    ]


def _top_jobs(team_ids: list[int] | None, month: date, limit: int) -> list[JobCost]:
    qs = UsageJobMonth.objects.filter(month=month)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    top = list(qs.order_by("-cost", "job_id").values("job_id", "gpu_seconds", "cost")[:limit])
    jobs = {
        j["id"]: j
        for j in Job.objects.filter(pk__in=[t["job_id"] for t in top]).values(
            "id", "name", "team__slug", "submitter__username"
        )
    }
    out = []
    for t in top:
        job = jobs.get(t["job_id"], {})
        out.append(
            JobCost(
                t["job_id"],
                job.get("name", f"job {t['job_id']}"),
                job.get("team__slug", "?"),
                job.get("submitter__username", "?"),
                t["gpu_seconds"] / 3600,
                t["cost"],
            )
        )
    return out


def _by_user(team_ids: list[int] | None, month: date) -> list[tuple[str, float, Decimal]]:
    """Spend per submitting user for the month (from the job-month rollup)."""
    qs = UsageJobMonth.objects.filter(month=month)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    return [
        (r["job__submitter__username"], (r["s_secs"] or 0.0) / 3600, r["s_cost"] or Decimal(0))
        for r in qs.values("job__submitter__username")
        .annotate(s_secs=Sum("gpu_seconds"), s_cost=Sum("cost"))
        .order_by("-s_cost", "job__submitter__username")
    ]


def _trailing_window(month: date, now: datetime) -> tuple[datetime, datetime]:
    lo, hi = calc.forecast_window(now, month)
    # Usage is bucketed by hour: measure the window from the start of its first bucket.
    return calc.floor_hour(lo), hi


def _trailing_spend(team_ids: list[int] | None, month: date, now: datetime) -> Decimal:
    """Spend in the forecast's trailing window (a day and an hour at most), GPU time from usage
    rows and egress from the charges, in one query each. The window may start in the month
    before (``calc.forecast_window``), so neither read is limited to ``month``."""
    lo, hi = _trailing_window(month, now)
    usage = UsageRecord.objects.filter(hour__gte=lo, hour__lt=hi)
    moved = EgressCharge.objects.filter(time__gte=lo, time__lt=hi)
    if team_ids is not None:
        usage = usage.filter(team_id__in=team_ids)
        moved = moved.filter(team_id__in=team_ids)
    return (usage.aggregate(t=Sum("cost"))["t"] or Decimal(0)) + (
        moved.aggregate(t=Sum("cost"))["t"] or Decimal(0)
    )


def _budget_summary(
    team: Team | None, team_ids, days, egress: list[EgressLine], month, now
) -> BudgetSummary:
    """Spend (GPU + egress) against the budget. The egress is the month's charges already loaded
    for the page, so counting it costs no query."""
    gpu = sum((d.cost for d in days), Decimal(0))
    moved = sum((e.cost for e in egress), Decimal(0))
    spend = gpu + moved
    lo, hi = _trailing_window(month, now)
    trailing = Decimal(0)
    if now < calc.month_bounds(month)[1]:
        # Egress of the window is burn like GPU time: a team moving data now is assumed to go on
        # moving it at that rate (docs/billing.md §4); a burst ages out of the window in a day.
        # Read apart from the month's charges above: the window may reach into the month before.
        trailing = _trailing_spend(team_ids, month, now)
    forecast = calc.forecast_month_end(
        spend_to_date=spend,
        trailing_spend=trailing,
        trailing_window=hi - lo,
        now=now,
        month=month,
    )
    budget = Budget.objects.filter(team=team, month=month).first() if team else None
    alerts: tuple = ()
    if budget is not None:
        alerts = tuple(
            BudgetAlert.objects.filter(budget=budget)
            .order_by("threshold")
            .values_list("threshold", "fired_at")
        )
    return BudgetSummary(
        amount=budget.amount if budget else None,
        hard_stop=bool(budget and budget.hard_stop),
        spend=spend.quantize(calc.CENT),
        forecast=forecast,
        alerts=alerts,
        gpu_spend=gpu.quantize(calc.CENT),
        egress=moved.quantize(calc.CENT),
    )


def _lost_series(team_ids: list[int] | None, month: date) -> list[LostPoint]:
    start, end = calc.month_bounds(month)
    qs = LostWork.objects.filter(occurred_at__gte=start, occurred_at__lt=end)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    return [
        LostPoint(r["day"].date(), r["kind"], r["secs"] / 3600, r["cost"] or Decimal(0))
        # UTC days, like the rest of the dashboard, whatever zone a page has activated.
        for r in qs.annotate(day=TruncDay("occurred_at", tzinfo=UTC))
        .values("day", "kind")
        .annotate(secs=Sum("gpu_seconds"), cost=Sum("cost"))
        .order_by("day", "kind")
    ]


# ----------------------------------------------------------------------------- dashboards


def team_cost_dashboard(
    *, user, team_slug: str, month: date, now: datetime, top: int = 10
) -> CostDashboard:
    """The cost dashboard of one of the caller's teams (rolled up over its sub-teams) for a month.
    Another team is NotFound."""
    team = _team_for(user, team_slug)
    team_ids = TeamTree.load().subtree(team.pk)
    days, idle, unpriced = _daily_series(team_ids, month)
    egress = _egress_series(team_ids, month)
    return CostDashboard(
        title=team.name,
        team_slug=team.slug,
        month=month,
        now=now,
        days=days,
        top_jobs=_top_jobs(team_ids, month, top),
        by_user=_by_user(team_ids, month),
        cluster_days=_cluster_series(team_ids, month),
        egress=egress,
        lost=_lost_series(team_ids, month),
        idle=idle,
        budget=_budget_summary(team, team_ids, days, egress, month, now),
        unpriced_gpu_hours=unpriced,
    )


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


def admin_cost_overview(
    *, user, month: date, now: datetime, sort: str = "spend", descending: bool = True
) -> AdminOverview:
    """All teams for a month, sortable by any column, plus the platform-wide charts. Platform
    admins only (anyone else: NotFound)."""
    if not is_platform_admin(user):
        raise NotFound("no such page", field="team")
    days, idle, unpriced = _daily_series(None, month)
    tree = TeamTree.load()
    start, end = calc.month_bounds(month)
    first, after = _month_days(month)
    per_team = {
        r["team_id"]: r
        for r in UsageDaily.objects.filter(day__gte=first, day__lt=after)
        .values("team_id")
        .annotate(
            s_secs=Sum("gpu_seconds"),
            s_cost=Sum("cost"),
            s_tel=Sum("telemetry_gpu_seconds"),
            s_idle_cost=Sum("idle_cost"),
        )
    }
    lo, hi = _trailing_window(month, now)
    trailing = (
        dict(
            UsageRecord.objects.filter(hour__gte=lo, hour__lt=hi)
            .values("team_id")
            .annotate(t=Sum("cost"))
            .values_list("team_id", "t")
        )
        if now < end
        else {}
    )
    lost = dict(
        LostWork.objects.filter(occurred_at__gte=start, occurred_at__lt=end)
        .values("team_id")
        .annotate(cost=Sum("cost"))
        .values_list("team_id", "cost")
    )
    # The month's egress per team and its share in the trailing window, in one query (the
    # window may start in the month before: those charges count in the rate, not the spend).
    own_egress: dict[int, Decimal] = {}
    for row in (
        EgressCharge.objects.filter(time__gte=min(start, lo), time__lt=end)
        .values("team_id")
        .annotate(
            total=Sum("cost", filter=Q(time__gte=start)),
            recent=Sum("cost", filter=Q(time__gte=lo, time__lt=hi)),
        )
    ):
        if row["total"] is not None:
            own_egress[row["team_id"]] = row["total"]
        if now < end and row["recent"]:
            trailing[row["team_id"]] = trailing.get(row["team_id"], Decimal(0)) + row["recent"]
    budgets = {b.team_id: b for b in Budget.objects.filter(month=month)}
    own_gpu = {t: r["s_cost"] or Decimal(0) for t, r in per_team.items()}
    own_total = {
        t: own_gpu.get(t, Decimal(0)) + own_egress.get(t, Decimal(0))
        for t in own_gpu.keys() | own_egress.keys()
    }
    rolled = tree.roll_up(own_total)
    rolled_egress = tree.roll_up(own_egress)
    rolled_trailing = tree.roll_up(trailing)
    # Every column but the "own" ones covers the sub-teams, as the team's dashboard does: a
    # parent's row read "spend incl. sub-teams" beside its own GPU-hours, idle and lost (often 0).
    rolled_lost = tree.roll_up(lost)
    rolled_idle = tree.roll_up({t: r["s_idle_cost"] or Decimal(0) for t, r in per_team.items()})
    rolled_secs: dict[int, float] = defaultdict(float)
    rolled_tel: dict[int, float] = defaultdict(float)
    for team_id, r in per_team.items():
        for ancestor in tree.ancestors_and_self(team_id):
            rolled_secs[ancestor] += r["s_secs"] or 0.0
            rolled_tel[ancestor] += r["s_tel"] or 0.0
    rows = []
    for team in Team.objects.select_related("parent").order_by("slug"):
        spend = rolled.get(team.pk, Decimal(0))
        budget = budgets.get(team.pk)
        rows.append(
            TeamRow(
                slug=team.slug,
                name=team.name,
                parent=team.parent.slug if team.parent else None,
                own_spend=own_total.get(team.pk, Decimal(0)).quantize(calc.CENT),
                spend=spend.quantize(calc.CENT),
                own_egress=own_egress.get(team.pk, Decimal(0)).quantize(calc.CENT),
                egress=rolled_egress.get(team.pk, Decimal(0)).quantize(calc.CENT),
                gpu_hours=rolled_secs.get(team.pk, 0.0) / 3600,
                budget=budget.amount if budget else None,
                hard_stop=bool(budget and budget.hard_stop),
                forecast=calc.forecast_month_end(
                    spend_to_date=spend,
                    trailing_spend=rolled_trailing.get(team.pk, Decimal(0)),
                    trailing_window=hi - lo,
                    now=now,
                    month=month,
                ),
                idle_cost=rolled_idle.get(team.pk, Decimal(0)).quantize(calc.CENT)
                if rolled_tel.get(team.pk)
                else None,
                lost_cost=rolled_lost.get(team.pk, Decimal(0)).quantize(calc.CENT),
            )
        )
    if sort not in SORT_KEYS:
        sort = "spend"
    rows.sort(key=SORT_KEYS[sort], reverse=descending)
    egress = _egress_series(None, month)
    dashboard = CostDashboard(
        title="All teams",
        month=month,
        now=now,
        days=days,
        top_jobs=_top_jobs(None, month, 10),
        by_user=_by_user(None, month),
        cluster_days=_cluster_series(None, month),
        egress=egress,
        lost=_lost_series(None, month),
        idle=idle,
        budget=_budget_summary(None, None, days, egress, month, now),
        unpriced_gpu_hours=unpriced,
    )
    return AdminOverview(rows=rows, dashboard=dashboard, sort=sort, descending=descending)


# ----------------------------------------------------------------------------- statements


def statement_list(*, user, team_slug: str | None = None) -> QuerySet[Statement]:
    """Statements of the caller's teams, newest month first."""
    qs = Statement.objects.filter(team__in=visible_teams(user)).select_related("team")
    if team_slug:
        qs = qs.filter(team__slug=team_slug)
    return qs.order_by("-month", "team__slug")


def statement_get(*, user, statement_id: int) -> Statement:
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
    adjustments: list = field(default_factory=list)
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
        for line in [*self.lines, *self.egress_lines]:
            out[line.team] += line.cost
        return sorted(out.items())


def _live_egress_lines(statement: Statement, teams: dict) -> list[StatementEgressLineView]:
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


def budget_list(*, user) -> QuerySet[Budget]:
    return Budget.objects.filter(team__in=visible_teams(user)).select_related("team")


def alert_list(*, user) -> QuerySet[BudgetAlert]:
    return BudgetAlert.objects.filter(budget__team__in=visible_teams(user)).select_related(
        "budget__team"
    )


def price_book_in_force(*, at: datetime, cluster_names: list[str]) -> dict:
    """What the scheduler routes by (``settings.SCHEDULER_PRICE_BOOK_SOURCE``): per cluster,
    GPU model -> capacity type -> USD per GPU-hour in force at ``at``: the cluster's own rate
    where it has one in force, else the platform-wide rate (the meter's rule,
    ``calc.PriceSchedule.overridden_by``). One query."""
    platform: dict[str, dict[str, float]] = {}
    own: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for cluster, model, capacity, rate in (
        PriceRate.objects.filter(effective_from__lte=at)
        .filter(Q(cluster__isnull=True) | Q(cluster__name__in=cluster_names))
        .order_by("effective_from", "id")
        .values_list("cluster__name", "gpu_model__name", "capacity", "rate_per_gpu_hour")
    ):
        book = platform if cluster is None else own[cluster]
        book.setdefault(model, {})[capacity] = float(rate)  # the latest step wins
    out = {}
    for name in cluster_names:
        prices = {model: dict(rates) for model, rates in platform.items()}
        for model, rates in own.get(name, {}).items():
            prices.setdefault(model, {}).update(rates)
        out[name] = prices
    return out
