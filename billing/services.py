"""Writes to billing: the price book and budgets with their alerts. The meter is
``billing.meter`` (its parts: ``billing.usage``, ``billing.egress``, ``billing.lost_work``,
``billing.rollups``); statements and their adjustments are ``billing.statements``.

Every function is keyword-only and atomic.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Literal, TypedDict

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from catalogue.models import GpuModel
from core import streams
from core.bounds import number_error
from core.errors import DomainError, FieldErrors, Forbidden, duplicate_refused
from core.names import text_errors
from scheduler.models import Cluster
from tenants.models import Team
from tenants.permissions import Caller, can_manage_team, is_platform_admin
from tenants.tree import TeamTree

from . import calc
from .models import Budget, BudgetAlert, Capacity, EgressCharge, PriceRate, UsageDaily

log = logging.getLogger(__name__)


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

    def schedule(
        self, *, cluster_id: int | None, gpu_model_id: int, capacity: str
    ) -> calc.PriceSchedule:
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
    user: Caller,
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
    if problem := number_error(PriceRate, "rate_per_gpu_hour", rate_per_gpu_hour):
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


# --------------------------------------------------------------------------- budgets


class BudgetAlertPayload(TypedDict):
    type: Literal["budget.alert"]
    team: str
    month: str
    threshold: int
    budget: str
    spend: str
    hard_stop: bool
    # The month was over when its cost was metered (the backlog sweep caught it up): the alert
    # belongs to that month, and its hard stop, which refuses that month's submissions only,
    # stops nothing any more.
    after_month_end: bool
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
    *, user: Caller, team: Team, month: date, amount: Decimal, hard_stop: bool = False
) -> Budget:
    """Create or change a team's budget for a month (team owners/admins, platform admins).
    Alerts already fired for that budget stay fired."""
    if not can_manage_team(user, team):
        raise DomainError("only team owners and admins set budgets", field="team")
    errors: dict[str, list[str]] = {}
    if problem := number_error(Budget, "amount", amount):
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
    fired by this call; each is published to the budget team's stream after commit.

    A month's cost metered after the month ended (the backlog sweep) fires that month's alerts
    when it is metered, dated then, naming the month, with ``after_month_end`` set: the team
    learns what the month cost once it is known, and is not told a hard stop refuses new jobs
    (it refused that month's submissions only)."""
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


def _budget_alerts(
    budget: Budget,
    spent: Decimal,
    fired_before: set[tuple[int, int]],
    month: date,
    now: datetime,
) -> list[BudgetAlert]:
    """The alerts of one budget that ``spent`` newly reaches (each created once, published
    after commit)."""
    fired: list[BudgetAlert] = []
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
            "after_month_end": now >= calc.month_bounds(month)[1],
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
