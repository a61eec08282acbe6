"""Budgets: 50/80/100 % alerts fire once each (as rows and live payloads); a hard stop refuses
new submissions with a clear message while running jobs continue; the forecast."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import calc, meter, rollups, services
from billing.models import Budget, BudgetAlert, UsageRecord
from core.errors import DomainError
from core.streams import team_group
from scheduler.models import Allocation, Job

from .conftest import utc

pytestmark = pytest.mark.django_db


def _alerts():
    return list(BudgetAlert.objects.order_by("threshold").values_list("threshold", flat=True))


def test_alerts_fire_once_per_threshold(
    make_job, allocate, price, teams, published, django_capture_on_commit_callbacks
):
    # $3.60/GPU-h = $1 per 1,000 GPU-seconds; budget $10 for December.
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    budget = Budget.objects.create(team=teams["vision"], month=utc(2026, 12, 1).date(), amount=10)
    job = make_job()
    allocate(job, "n1", 0, utc(2026, 12, 1, 0))
    allocate(job, "n1", 1, utc(2026, 12, 1, 0))  # 2 GPUs: $7.20 per hour

    with django_capture_on_commit_callbacks(execute=True):
        meter.meter_run(now=utc(2026, 12, 1, 0, 30))  # $3.60: under 50 %
        assert _alerts() == []
        meter.meter_run(now=utc(2026, 12, 1, 0, 45))  # $5.40: 50 %
        meter.meter_run(now=utc(2026, 12, 1, 0, 50))  # $6.00: still 50 %, nothing new
        assert _alerts() == [50]
        meter.meter_run(now=utc(2026, 12, 1, 1, 20))  # $9.60: 80 %
        meter.meter_run(now=utc(2026, 12, 1, 2, 0))  # $14.40: 100 %
        meter.meter_run(now=utc(2026, 12, 1, 3, 0))  # $21.60: all fired already
        services.budget_evaluate(month=budget.month, now=utc(2026, 12, 1, 3, 1))
    assert _alerts() == [50, 80, 100]

    alerts = [p for _, p in published if p["type"] == "budget.alert"]
    assert [(a["threshold"], a["team"], a["month"]) for a in alerts] == [
        (50, "vision", "2026-12"),
        (80, "vision", "2026-12"),
        (100, "vision", "2026-12"),
    ]
    assert {g for g, p in published if p["type"] == "budget.alert"} == {
        team_group(teams["vision"].pk)
    }
    assert alerts[0]["spend"] == "5.40" and alerts[0]["budget"] == "10.00"


def test_a_parent_budget_counts_its_sub_teams(make_job, allocate, price, teams, bob):
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    Budget.objects.create(team=teams["research"], month=utc(2026, 12, 1).date(), amount=2)
    allocate(make_job(team="vision"), "n1", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 0, 10))
    allocate(make_job(team="nlp", user=bob), "n1", 1, utc(2026, 12, 1, 0), utc(2026, 12, 1, 0, 10))
    meter.meter_run(now=utc(2026, 12, 1, 1))  # $0.60 + $0.60 of $2
    assert _alerts() == [50]


def _hard_budget(team, amount="5.00"):
    return Budget.objects.create(
        team=team, month=calc.month_start(timezone.now()), amount=Decimal(amount), hard_stop=True
    )


def test_hard_stop_refuses_submission_while_running_job_continues(
    platform, make_job, allocate, price, teams, gpu_models, submit
):
    now = timezone.now()
    month = calc.month_start(now)
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    _hard_budget(teams["vision"])
    running = make_job(name="long-run", started_at=now)
    allocate(running, "n1", 0, now - timedelta(minutes=1))
    # Usage metered earlier this month already exceeds the $5 budget.
    UsageRecord.objects.create(
        allocation_id=999_999,
        hour=calc.floor_hour(now),
        job=running,
        team=teams["vision"],
        user=running.submitter,
        gpu_model=gpu_models["h100"],
        capacity="on_demand",
        gpu_seconds=3600,
        cost=Decimal("7.20"),
        finalized=True,
    )
    rollups.usage_rollup_rebuild(month=month)
    jobs_before = Job.objects.count()

    response = submit(platform["alice"], name="one-more")

    assert response.status_code == 400
    assert response.json() == {
        "team": [
            f"team vision has reached its hard budget of $5.00 for {month:%Y-%m}; "
            "running jobs continue"
        ]
    }
    assert Job.objects.count() == jobs_before  # nothing written
    # The running job keeps its GPU and keeps being metered.
    running.refresh_from_db()
    assert running.state == "running"
    assert Allocation.objects.filter(job=running, ended_at__isnull=True).count() == 1
    spent = services.team_spend(team=teams["vision"], month=month)
    meter.meter_run(now=timezone.now() + timedelta(seconds=30))
    assert services.team_spend(team=teams["vision"], month=month) > spent
    # Another team is not affected.
    assert submit(platform["bob"], team="nlp", name="fine").status_code == 201


def test_parent_hard_stop_applies_to_children_and_soft_budget_does_not_stop(
    platform, teams, gpu_models, make_job, submit
):
    now = timezone.now()
    UsageRecord.objects.create(  # nlp (a sibling of vision) spent $10 this month
        allocation_id=1,
        hour=calc.floor_hour(now),
        job=make_job(team="nlp", user=platform["bob"]),
        team=teams["nlp"],
        user=platform["bob"],
        gpu_model=gpu_models["a100"],
        capacity="on_demand",
        gpu_seconds=3600,
        cost=Decimal("10"),
    )
    rollups.usage_rollup_rebuild(month=calc.month_start(now))
    soft = _hard_budget(teams["vision"], "1.00")
    soft.hard_stop = False
    soft.save()
    # vision spent nothing; its soft budget would not stop it anyway.
    assert submit(platform["alice"], name="ok").status_code == 201
    _hard_budget(teams["research"], "5.00")
    refused = submit(platform["alice"], name="refused")
    assert refused.status_code == 400
    assert "its parent research's hard budget of $5.00" in refused.json()["team"][0]
    with pytest.raises(DomainError):
        services.budget_check_submission(team=teams["nlp"])


def test_forecast_extrapolates_the_trailing_burn_rate():
    month = utc(2026, 12, 1).date()
    # Day 10 at 00:00: $100 so far, $24 in the last 24 h -> $1/h for the 22 days left.
    forecast = calc.forecast_month_end(
        spend_to_date=Decimal(100),
        trailing_spend=Decimal(24),
        trailing_window=timedelta(hours=24),
        now=utc(2026, 12, 10),
        month=month,
    )
    assert forecast == Decimal("628.00")
    past = calc.forecast_month_end(
        spend_to_date=Decimal(100),
        trailing_spend=Decimal(24),
        trailing_window=timedelta(hours=24),
        now=utc(2027, 1, 5),
        month=month,
    )
    assert past == Decimal("100.00")


def test_budget_set_requires_a_team_manager(alice, platform_admin, teams):
    month = utc(2026, 12, 1).date()
    with pytest.raises(DomainError) as refused:
        services.budget_set(user=alice, team=teams["vision"], month=month, amount=Decimal(5))
    assert refused.value.field == "team"
    budget = services.budget_set(
        user=platform_admin, team=teams["vision"], month=month, amount=Decimal(5), hard_stop=True
    )
    assert (budget.amount, budget.hard_stop) == (Decimal(5), True)
