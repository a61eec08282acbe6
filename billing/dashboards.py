"""The cost dashboards: one team's (rolled up over its sub-teams) and the platform admins'
overview of all teams. Every read starts from the caller's visible teams; another team's
dashboard is NotFound (never "forbidden": names stay private). The shapes they return are
``billing.series``.

A dashboard costs a fixed number of small queries whatever the data size: daily spend and idle
sums (by GPU model, and by cluster) from the ``UsageDaily`` rollup, top jobs from
``UsageJobMonth``, egress charges (one row per job attempt that moved data), the forecast's
trailing-day spend from raw usage and egress charges (25 hours of rows at most, maybe from the
month before: the burn rate is the team's, not the month's), and small reads of lost work,
budget, alerts and names.

Both dashboards are built from the same private helpers, which take team ids as given (no scope
check of their own): they stay in this one module, behind the two selectors that check the
caller first, rather than be imported from elsewhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime
from decimal import Decimal

from django.db.models import Q, Sum
from django.db.models.functions import TruncDay

from catalogue.models import GpuModel
from core.errors import NotFound
from scheduler.models import Job
from tenants.models import Team
from tenants.permissions import Caller, is_platform_admin, visible_teams
from tenants.tree import TeamTree

from . import calc, sub_teams
from .models import (
    Budget,
    BudgetAlert,
    EgressCharge,
    LostWork,
    UsageDaily,
    UsageJobMonth,
    UsageRecord,
)
from .series import (
    SORT_KEYS,
    UNKNOWN_CLUSTER_LABEL,
    AdminOverview,
    BudgetSummary,
    ClusterDaySpend,
    CostDashboard,
    DaySpend,
    EgressLine,
    IdleSummary,
    JobCost,
    LostPoint,
    TeamRow,
)
from .statements import cluster_labels

# ----------------------------------------------------------------------------- scope helpers


def _team_for(user: Caller, slug: str) -> Team:
    team = visible_teams(user).filter(slug=slug).first()
    if team is None:
        raise NotFound("no such team", field="team")
    return team


def default_team(user: Caller) -> Team | None:
    """The first team the user may see (the dashboard's landing team)."""
    return visible_teams(user).order_by("slug").first()


def _month_days(month: date) -> tuple[date, date]:
    start, end = calc.month_bounds(month)
    return start.date(), end.date()


def _daily_series(
    team_ids: list[int] | None, month: date
) -> tuple[list[DaySpend], IdleSummary, float]:
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


def _cluster_names(ids: Iterable[int | None]) -> dict[int | None, str]:
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
        job = jobs.get(t["job_id"])
        # A job whose row is gone keeps its cost under a placeholder name.
        name, team, user = (
            (job["name"], job["team__slug"], job["submitter__username"])
            if job is not None
            else (f"job {t['job_id']}", "?", "?")
        )
        out.append(JobCost(t["job_id"], name, team, user, t["gpu_seconds"] / 3600, t["cost"]))
    return out


def _by_user(
    team_ids: list[int] | None, month: date, seen: frozenset[str] | None = None
) -> list[tuple[str, float, Decimal]]:
    """Spend per submitting user for the month (from the job-month rollup); the submitters of a
    team outside ``seen`` as one row (``sub_teams.spend_by_user``)."""
    qs = UsageJobMonth.objects.filter(month=month)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    rows = qs.values_list("job__submitter__username", "team__slug").annotate(
        s_secs=Sum("gpu_seconds"), s_cost=Sum("cost")
    )
    return sub_teams.spend_by_user(rows.order_by(), seen)


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
    team: Team | None,
    team_ids: list[int] | None,
    days: list[DaySpend],
    egress: list[EgressLine],
    month: date,
    now: datetime,
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
    alerts: tuple[tuple[int, datetime], ...] = ()
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
    *, user: Caller, team_slug: str, month: date, now: datetime, top: int = 10
) -> CostDashboard:
    """The cost dashboard of one of the caller's teams (rolled up over its sub-teams) for a month.
    Another team is NotFound; the jobs and people of a sub-team the caller is not a member of are
    not named (``sub_teams``), only its amounts."""
    team = _team_for(user, team_slug)
    team_ids = TeamTree.load().subtree(team.pk)
    seen = sub_teams.seen_team_slugs(user)
    days, idle, unpriced = _daily_series(team_ids, month)
    egress = _egress_series(team_ids, month)
    return CostDashboard(
        title=team.name,
        team_slug=team.slug,
        month=month,
        now=now,
        days=days,
        top_jobs=sub_teams.hide_jobs(_top_jobs(team_ids, month, top), seen),
        by_user=_by_user(team_ids, month, seen),
        cluster_days=_cluster_series(team_ids, month),
        egress=sub_teams.hide_egress(egress, seen),
        lost=_lost_series(team_ids, month),
        idle=idle,
        budget=_budget_summary(team, team_ids, days, egress, month, now),
        unpriced_gpu_hours=unpriced,
    )


def admin_cost_overview(
    *, user: Caller, month: date, now: datetime, sort: str = "spend", descending: bool = True
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
