"""A team's spend is GPU time + egress: budgets (percent used, forecast, alerts, the hard stop that
refuses new starts), the cost API, the dashboards and the admin overview all count the egress
charges the meter records, and still show the two parts.

Uses the clusters of ``conftest``: ``test`` (nodes n1..n4) holds a copy of ``c4`` (800 GB), the
``cloud`` (node c1) does not, so every attempt on c1 moves it from ``archive`` at $0.02/GB: $16."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import calc, dashboards, meter, services
from billing.models import Budget, BudgetAlert, EgressCharge, UsageDaily
from scheduler.models import Job
from tenants.models import Team

from .conftest import utc

pytestmark = pytest.mark.django_db

DEC = utc(2026, 12, 1).date()
DEC_3 = utc(2026, 12, 3)


@pytest.fixture
def december(c4, clouds, make_job, allocate, price, bob):
    """December at $2/GPU-h everywhere. vision: ``far`` ran 10 GPU-h on the cloud on the 1st
    ($20 + $16 egress), ``recent`` 1 GPU-h on the cloud on the 2nd ($2 + $16 egress, inside the
    forecast's trailing day on the 3rd). nlp: 15 GPU-h on test, where c4 is ($30, no egress)."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    far = make_job(name="far", dataset="c4")
    allocate(far, "c1", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 10))
    recent = make_job(name="recent", dataset="c4")
    allocate(recent, "c1", 1, utc(2026, 12, 2, 12), utc(2026, 12, 2, 13))
    local = make_job(team="nlp", user=bob, name="local", dataset="c4")
    allocate(local, "n1", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 15))
    return {"far": far, "recent": recent, "local": local}


def _gpu_spend(team_ids, month=DEC):
    start, end = calc.month_bounds(month)
    return UsageDaily.objects.filter(
        team_id__in=team_ids, day__gte=start.date(), day__lt=end.date()
    ).aggregate(t=Sum("cost"))["t"] or Decimal(0)


def test_budget_summary_counts_egress_in_spend_percent_and_forecast(december, teams, alice):
    Budget.objects.create(team=teams["vision"], month=DEC, amount=Decimal("60"))
    meter.meter_run(now=DEC_3)
    assert EgressCharge.objects.filter(team=teams["vision"]).count() == 2

    d = dashboards.team_cost_dashboard(user=alice, team_slug="vision", month=DEC, now=DEC_3)

    b = d.budget
    assert (b.gpu_spend, b.egress, b.spend) == (
        Decimal("22.00"),
        Decimal("32.00"),
        Decimal("54.00"),
    )
    assert d.spend == d.gpu_spend + d.budget.egress
    assert b.percent_used == 90.0
    # Spend to date $54; the trailing day (the 2nd) burnt $2 of GPU + $16 of egress; 29 days
    # left: 54 + 18 x 29. GPU time alone would have forecast 22 + 2 x 29 = $80.
    assert b.forecast == Decimal("576.00") and b.forecast_over
    # The cumulative line the budget chart draws ends at the same spend.
    assert d.cumulative_daily()[-1] == (utc(2026, 12, 3).date(), Decimal("54.000000"))
    assert d.cumulative_daily()[0] == (utc(2026, 12, 1).date(), Decimal("36.000000"))


def test_alerts_fire_on_gpu_plus_egress(
    december, teams, published, django_capture_on_commit_callbacks
):
    Budget.objects.create(team=teams["vision"], month=DEC, amount=Decimal("60"))
    with django_capture_on_commit_callbacks(execute=True):
        meter.meter_run(now=DEC_3)
    # GPU alone ($22) is under 50 % of $60; with $32 of egress ($54) it is past 80 %.
    assert list(BudgetAlert.objects.order_by("threshold").values_list("threshold", "spend")) == [
        (50, Decimal("54.00")),
        (80, Decimal("54.00")),
    ]
    assert [p["spend"] for _, p in published if p["type"] == "budget.alert"] == ["54.00", "54.00"]


def test_budget_api_spend_includes_egress(december, teams, api_as, alice, platform_admin):
    Budget.objects.create(team=teams["vision"], month=DEC, amount=Decimal("60"))
    Budget.objects.create(team=teams["research"], month=DEC, amount=Decimal("500"))
    meter.meter_run(now=DEC_3)
    rows = api_as(platform_admin).get("/api/v1/billing/budgets/").json()["results"]
    # research covers vision ($54) and nlp ($30).
    assert {r["team"]: r["spend"] for r in rows} == {"vision": "54.00", "research": "84.00"}
    mine = api_as(alice).get("/api/v1/billing/budgets/").json()["results"]
    assert {r["team"]: r["spend"] for r in mine} == {"vision": "54.00"}


@pytest.fixture
def hard_stopped_by_egress(c4, clouds, make_job, allocate, price, teams):
    """This month: a vision job on the cloud for a few minutes ($2/GPU-h: well under $10 of GPU
    time) that moved c4 ($16 of egress)."""
    now = timezone.now()
    month = calc.month_start(now)
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    # Started this month even in its first minutes (the charge is dated at the attempt's start).
    start = max(calc.month_bounds(month)[0], now - timedelta(minutes=10))
    job = make_job(name="remote", dataset="c4", started_at=start)
    allocate(job, "c1", 0, start)
    meter.meter_run(now=now)
    assert EgressCharge.objects.filter(job=job).count() == 1
    return month


def test_hard_stop_counts_egress(hard_stopped_by_egress, platform, teams, submit):
    month = hard_stopped_by_egress
    Budget.objects.create(team=teams["vision"], month=month, amount=Decimal("10"), hard_stop=True)
    # GPU time alone is under the hard budget; GPU + egress is over it.
    assert _gpu_spend([teams["vision"].pk], month) < Decimal("10")
    assert services.team_spend(team=teams["vision"], month=month) >= Decimal("16")
    jobs_before = Job.objects.count()

    response = submit(platform["alice"], name="one-more")

    assert response.status_code == 400
    assert response.json() == {
        "team": [
            f"team vision has reached its hard budget of $10.00 for {month:%Y-%m}; "
            "running jobs continue"
        ]
    }
    assert Job.objects.count() == jobs_before
    # Another team's budget is not spent by vision's egress.
    assert submit(platform["bob"], team="nlp", name="fine").status_code == 201


def test_a_parents_hard_stop_counts_its_sub_teams_egress(
    hard_stopped_by_egress, platform, teams, submit
):
    month = hard_stopped_by_egress
    Budget.objects.create(team=teams["research"], month=month, amount=Decimal("10"), hard_stop=True)
    assert _gpu_spend([teams["vision"].pk, teams["nlp"].pk], month) < Decimal("10")
    jobs_before = Job.objects.count()

    response = submit(platform["bob"], team="nlp", name="sibling")

    assert response.status_code == 400
    assert response.json()["team"] == [
        f"team nlp has reached its parent research's hard budget of $10.00 for {month:%Y-%m}; "
        "running jobs continue"
    ]
    assert Job.objects.count() == jobs_before


def test_a_hard_budget_above_gpu_plus_egress_lets_submissions_in(
    hard_stopped_by_egress, platform, teams, submit
):
    Budget.objects.create(
        team=teams["vision"], month=hard_stopped_by_egress, amount=Decimal("17"), hard_stop=True
    )
    assert submit(platform["alice"], name="still-fits").status_code == 201


def test_admin_overview_counts_egress_in_spend_and_sorts_by_it(december, platform_admin):
    meter.meter_run(now=DEC_3)
    o = dashboards.admin_cost_overview(user=platform_admin, month=DEC, now=DEC_3, sort="spend")

    rows = {r.slug: r for r in o.rows}
    # By GPU time alone nlp ($30) would come before vision ($22).
    assert [r.slug for r in o.rows] == ["research", "vision", "nlp"]
    assert [(r.slug, r.own_spend, r.spend, r.own_egress, r.egress, r.gpu_spend) for r in o.rows] == [
        ("research", Decimal("0.00"), Decimal("84.00"), Decimal("0.00"), Decimal("32.00"),
         Decimal("52.00")),
        ("vision", Decimal("54.00"), Decimal("54.00"), Decimal("32.00"), Decimal("32.00"),
         Decimal("22.00")),
        ("nlp", Decimal("30.00"), Decimal("30.00"), Decimal("0.00"), Decimal("0.00"),
         Decimal("30.00")),
    ]  # fmt: skip
    # The team's forecast agrees with its own dashboard's; research burns vision's last day.
    assert rows["vision"].forecast == Decimal("576.00")
    assert rows["research"].forecast == Decimal("84") + Decimal("18") * 29
    assert rows["nlp"].forecast == Decimal("30.00")
    assert (o.dashboard.gpu_spend, o.dashboard.budget.egress, o.dashboard.spend) == (
        Decimal("52.00"),
        Decimal("32.00"),
        Decimal("84.00"),
    )
    by_egress = dashboards.admin_cost_overview(
        user=platform_admin, month=DEC, now=DEC_3, sort="egress", descending=False
    )
    assert [r.slug for r in by_egress.rows][0] == "nlp"


def test_admin_overview_costs_the_same_queries_whatever_the_number_of_teams(
    december, platform_admin, teams, clouds
):
    meter.meter_run(now=DEC_3)

    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            dashboards.admin_cost_overview(user=platform_admin, month=DEC, now=DEC_3)
        return len(captured)

    before = count()
    for i in range(5):
        team = Team.objects.create(slug=f"extra{i}", name=f"Extra {i}", parent=teams["research"])
        EgressCharge.objects.create(
            job=december["far"], attempt=100 + i, team=team, dataset="c4",
            from_cluster=clouds["archive"], to_cluster=clouds["cloud"], size_gb=1,
            price_per_gb=Decimal("1"), cost=Decimal("1"), time=utc(2026, 12, 2, 23),
        )  # fmt: skip
    assert count() == before
    research = next(
        r
        for r in dashboards.admin_cost_overview(user=platform_admin, month=DEC, now=DEC_3).rows
        if r.slug == "research"
    )
    assert research.spend == Decimal("89.00")


def test_cost_api_shows_total_and_both_parts_team_scoped(
    december, api_as, alice, bob, charlie, platform_admin
):
    meter.meter_run(now=DEC_3)
    body = api_as(alice).get("/api/v1/billing/costs/?team=vision&month=2026-12").json()
    assert (body["spend"], body["gpu_spend"], body["egress"]["cost"]) == ("54.00", "22.00", "32.00")
    assert (
        api_as(charlie).get("/api/v1/billing/costs/?team=vision&month=2026-12").json()["spend"]
        == "54.00"
    )
    # Another team's costs are a 404; bob's own team shows none of vision's egress.
    assert api_as(bob).get("/api/v1/billing/costs/?team=vision&month=2026-12").status_code == 404
    nlp = api_as(bob).get("/api/v1/billing/costs/?team=nlp&month=2026-12").json()
    assert (nlp["spend"], nlp["gpu_spend"], nlp["egress"]["cost"]) == ("30.00", "30.00", "0.00")
    assert nlp["egress"]["charges"] == []
    everything = api_as(platform_admin).get("/api/v1/billing/costs/?month=2026-12").json()
    assert (everything["spend"], everything["gpu_spend"]) == ("84.00", "52.00")
    assert {
        t["team"]: (t["own_spend"], t["spend"], t["gpu_spend"], t["egress"], t["own_egress"])
        for t in everything["teams"]
    } == {
        "research": ("0.00", "84.00", "52.00", "32.00", "0.00"),
        "vision": ("54.00", "54.00", "22.00", "32.00", "32.00"),
        "nlp": ("30.00", "30.00", "30.00", "0.00", "0.00"),
    }
    # Bad input stays a 400 naming the field.
    bad = api_as(alice).get("/api/v1/billing/costs/?team=vision&month=2026-13")
    assert bad.status_code == 400 and "month" in bad.json()
    # Without a team, a non-admin is refused as for any other page of all teams.
    assert api_as(alice).get("/api/v1/billing/costs/?month=2026-12").status_code == 404


def test_pages_show_total_gpu_and_egress(december, client, alice, bob, platform_admin):
    meter.meter_run(now=DEC_3)
    client.force_login(alice)
    html = client.get("/billing/teams/vision/?month=2026-12").content.decode()
    assert 'data-kpi="spend">$54.00<' in html
    assert 'data-kpi="gpu-spend">$22.00<' in html and 'data-kpi="egress">$32.00<' in html
    client.force_login(bob)
    assert client.get("/billing/teams/vision/?month=2026-12").status_code == 404
    client.force_login(platform_admin)
    overview = client.get("/billing/overview/?month=2026-12&sort=egress").content.decode()
    assert 'data-kpi="spend">$84.00<' in overview
    assert "of which egress" in overview
