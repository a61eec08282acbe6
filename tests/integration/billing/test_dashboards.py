"""Cost dashboards (team and admin), their selectors, the REST price book and budgets, and the
locally served plotly.js. Every page and endpoint answers 404 for another team's data."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import calc, dashboards, meter
from billing.models import Budget, PriceRate

from .conftest import utc

pytestmark = pytest.mark.django_db

DEC = utc(2026, 12, 1).date()


@pytest.fixture
def december(make_job, allocate, price, bob, teams):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    price("a100", "on_demand", "1.00", utc(2026, 1, 1))
    big, small = make_job(name="big"), make_job(name="small")
    for gpu in range(4):
        allocate(big, "n1", gpu, utc(2026, 12, 1, 0), utc(2026, 12, 1, 10))
    allocate(small, "n3", 0, utc(2026, 12, 2, 0), utc(2026, 12, 2, 1))
    nlp_job = make_job(team="nlp", user=bob, name="nlp-job")
    allocate(nlp_job, "n3", 1, utc(2026, 12, 1, 0), utc(2026, 12, 1, 5))
    nlp_job.lost_gpu_seconds = 1800
    nlp_job.save()
    Budget.objects.create(team=teams["vision"], month=DEC, amount=Decimal(100))
    meter.meter_run(now=utc(2026, 12, 3))
    return {"big": big, "small": small, "nlp": nlp_job}


def test_team_dashboard_series(december, alice):
    d = dashboards.team_cost_dashboard(
        user=alice, team_slug="vision", month=DEC, now=utc(2026, 12, 3)
    )
    assert d.budget.spend == Decimal("81.00")  # 40 GPU-h x $2 + 1 GPU-h x $1
    assert d.budget.amount == Decimal(100) and round(d.budget.percent_used) == 81
    assert [(j.name, j.cost) for j in d.top_jobs] == [
        ("big", Decimal("80.000000")),
        ("small", Decimal("1.000000")),
    ]
    assert {m: sum(days.values()) for m, days in d.daily_by_model().items()} == {
        "a100-40gb": Decimal("1.000000"),
        "h100-80gb": Decimal("80.000000"),
    }
    # $1 burned in the last 24 h (the small job) -> $1/day for the 29 days left.
    assert d.budget.forecast == Decimal("110.00") and d.budget.forecast_over
    assert d.idle.has_telemetry is False and d.lost == []
    assert d.by_user == [("alice", 41.0, Decimal("81.000000"))]
    assert d.by_capacity() == {"on_demand": Decimal("81.000000")}


def test_team_dashboard_page_and_isolation(december, client, alice, bob):
    client.force_login(alice)
    page = client.get("/billing/teams/vision/?month=2026-12")
    assert page.status_code == 200
    html = page.content.decode()
    assert "$81.00" in html and "no telemetry" in html
    assert "By user" in html and "On-demand" in html
    for fig in ("fig-spend", "fig-budget", "fig-top-jobs", "fig-waste"):
        assert f'data-figure="{fig}"' in html and f'id="{fig}"' in html
    assert "/plotly" in html and "cdn" not in html.lower()
    assert client.get("/billing/").url == "/billing/teams/vision/"
    assert client.get("/billing/teams/nlp/").status_code == 404
    assert client.get("/billing/teams/vision/?month=bogus").status_code == 400
    assert client.get("/billing/overview/").status_code == 404
    client.force_login(bob)
    assert client.get("/billing/teams/vision/?month=2026-12").status_code == 404
    nlp = client.get("/billing/teams/nlp/?month=2026-12").content.decode()
    assert "0.5 GPU-h" in nlp  # lost work of nlp's preempted job


def test_admin_overview_is_sortable(december, client, platform_admin):
    client.force_login(platform_admin)
    assert client.get("/billing/").url == "/billing/overview/"
    o = dashboards.admin_cost_overview(
        user=platform_admin, month=DEC, now=utc(2026, 12, 3), sort="spend"
    )
    assert [(r.slug, r.spend) for r in o.rows] == [
        ("research", Decimal("86.00")),
        ("vision", Decimal("81.00")),
        ("nlp", Decimal("5.00")),
    ]
    assert o.rows[1].percent_used == 81.0 and o.rows[2].lost_cost == Decimal("0.50")
    by_team = dashboards.admin_cost_overview(
        user=platform_admin, month=DEC, now=utc(2026, 12, 3), sort="team", descending=False
    )
    assert [r.slug for r in by_team.rows] == ["nlp", "research", "vision"]
    page = client.get("/billing/overview/?month=2026-12&sort=own_spend&dir=asc")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.index('data-team="research"') < html.index('data-team="nlp"')
    assert 'aria-sort="ascending"' in html


def test_a_parents_overview_row_counts_its_sub_teams_like_its_dashboard(
    december, api_as, platform_admin, alice, bob
):
    """research has no jobs of its own; its sub-teams ran 41 GPU-h (vision) + 5 GPU-h (nlp)
    and nlp lost 0.5 GPU-h ($0.50). The overview row and the cost API's team row said
    "spend incl. sub-teams $86.00" beside 0.0 GPU-hours and $0.00 lost work (research's own),
    while research's dashboard, one click away, says 46 GPU-h and $0.50."""
    o = dashboards.admin_cost_overview(user=platform_admin, month=DEC, now=utc(2026, 12, 3))
    rows = {r.slug: r for r in o.rows}
    research = dashboards.team_cost_dashboard(
        user=platform_admin, team_slug="research", month=DEC, now=utc(2026, 12, 3)
    )
    assert (research.spend, research.gpu_hours, research.lost_cost) == (
        Decimal("86.00"),
        46.0,
        Decimal("0.50"),
    )
    assert (rows["research"].spend, rows["research"].gpu_hours, rows["research"].lost_cost) == (
        Decimal("86.00"),
        46.0,
        Decimal("0.50"),
    )
    assert (rows["vision"].gpu_hours, rows["nlp"].gpu_hours) == (41.0, 5.0)
    assert rows["research"].idle_cost is None  # no telemetry in the subtree either
    body = api_as(platform_admin).get("/api/v1/billing/costs/?month=2026-12").json()
    team = next(t for t in body["teams"] if t["team"] == "research")
    mine = api_as(platform_admin).get("/api/v1/billing/costs/?team=research&month=2026-12")
    assert (team["gpu_hours"], team["lost_cost"]) == (46.0, "0.50")
    assert (mine.json()["gpu_hours"], mine.json()["lost_work"]["cost"]) == (46.0, "0.50")
    by_hours = dashboards.admin_cost_overview(
        user=platform_admin, month=DEC, now=utc(2026, 12, 3), sort="gpu_hours"
    )
    assert [r.slug for r in by_hours.rows] == ["research", "vision", "nlp"]


def test_forecast_uses_the_trailing_day(make_job, allocate, price, alice):
    price("h100", "on_demand", "1.00", utc(2026, 1, 1))
    allocate(make_job(), "n1", 0, utc(2026, 12, 10, 0))  # running since day 10, $1/h
    now = utc(2026, 12, 11, 0)
    meter.meter_run(now=now)
    d = dashboards.team_cost_dashboard(user=alice, team_slug="vision", month=DEC, now=now)
    # $24 so far; $1/h for the 21 days left.
    assert (d.budget.spend, d.budget.forecast) == (Decimal("24.00"), Decimal("528.00"))


def test_price_book_api(api_as, alice, platform_admin, gpu_models):
    later = (timezone.now() + timedelta(days=1)).isoformat()
    body = {
        "gpu_model": "h100-80gb",
        "capacity": "spot",
        "rate_per_gpu_hour": "1.25",
        "effective_from": later,
    }
    # an action for platform admins only is a 403 (docs/tenancy.md)
    assert api_as(alice).post("/api/v1/billing/prices/", body, format="json").status_code == 403
    created = api_as(platform_admin).post("/api/v1/billing/prices/", body, format="json")
    assert created.status_code == 201 and created.json()["rate_per_gpu_hour"] == "1.2500"
    backdated = dict(body, effective_from=(timezone.now() - timedelta(days=1)).isoformat())
    refused = api_as(platform_admin).post("/api/v1/billing/prices/", backdated, format="json")
    assert refused.status_code == 400 and "effective_from" in refused.json()
    assert PriceRate.objects.count() == 1
    assert len(api_as(alice).get("/api/v1/billing/prices/").json()["results"]) == 1


def test_budget_api_is_scoped(api_as, alice, bob, teams):
    from tenants.models import Membership

    Membership.objects.filter(user=alice).update(role="admin")
    body = {"team": "vision", "month": "2026-12", "amount": "250.00", "hard_stop": True}
    created = api_as(alice).post("/api/v1/billing/budgets/", body, format="json")
    assert created.status_code == 201
    assert created.json() == {
        "id": created.json()["id"],
        "team": "vision",
        "month": "2026-12",
        "amount": "250.00",
        "hard_stop": True,
        "spend": "0.00",
    }
    # bob cannot see it, nor set one for a team he is not in (the smuggled team is refused).
    assert api_as(bob).get("/api/v1/billing/budgets/").json()["results"] == []
    smuggled = api_as(bob).post("/api/v1/billing/budgets/", body, format="json")
    assert smuggled.status_code == 400 and "team" in smuggled.json()
    assert api_as(bob).get(f"/api/v1/billing/budgets/{created.json()['id']}/").status_code == 404
    assert Budget.objects.get().amount == Decimal("250.00")


def test_plotly_js_is_served_locally_with_cache_headers(client, alice):
    response = client.get("/billing/plotly.min.js")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/javascript")
    assert "max-age" in response["Cache-Control"]
    body = b"".join(response.streaming_content)
    assert len(body) > 1_000_000 and b"plotly" in body[:2000].lower()
    assert (
        client.get("/billing/plotly.min.js", HTTP_IF_NONE_MATCH=response["ETag"]).status_code == 304
    )


def test_chart_figures_are_valid_plotly_json(december, alice):
    from billing import charts

    d = dashboards.team_cost_dashboard(
        user=alice, team_slug="vision", month=DEC, now=utc(2026, 12, 3)
    )
    for fig in charts.all_figures(d).values():
        assert json.loads(fig.to_json())["layout"]["title"]["text"]
    assert calc.month_start(d.now) == DEC


def test_budget_form_on_the_dashboard(client, alice, bob, teams):
    from tenants.models import Membership

    client.force_login(alice)  # a plain member: no form, and a POST is refused
    assert b"Save budget" not in client.get("/billing/teams/vision/?month=2026-12").content
    refused = client.post(
        "/billing/teams/vision/budget", {"month": "2026-12", "amount": "100"}, follow=True
    )
    assert b"only team owners and admins set budgets" in refused.content
    assert not Budget.objects.exists()

    Membership.objects.filter(user=alice).update(role="owner")
    assert b"Save budget" in client.get("/billing/teams/vision/?month=2026-12").content
    saved = client.post(
        "/billing/teams/vision/budget",
        {"month": "2026-12", "amount": "1,500", "hard_stop": "on"},
    )
    assert saved.url == "/billing/teams/vision/?month=2026-12"
    budget = Budget.objects.get()
    assert (budget.team.slug, budget.month, budget.amount, budget.hard_stop) == (
        "vision",
        DEC,
        Decimal("1500.00"),
        True,
    )
    bad = client.post(
        "/billing/teams/vision/budget", {"month": "2026-12", "amount": "lots"}, follow=True
    )
    assert b"amount: Enter a number." in bad.content
    client.force_login(bob)
    assert client.post("/billing/teams/vision/budget", {"amount": "1"}).status_code == 404
    assert Budget.objects.get().amount == Decimal("1500.00")


def test_cost_api(december, api_as, alice, bob, platform_admin):
    body = api_as(alice).get("/api/v1/billing/costs/?team=vision&month=2026-12").json()
    assert (body["team"], body["spend"], body["budget"], body["idle"]) == (
        "vision",
        "81.00",
        "100.00",
        None,
    )
    assert [j["name"] for j in body["top_jobs"]] == ["big", "small"]
    assert body["by_user"] == [{"user": "alice", "gpu_hours": 41.0, "cost": "81.00"}]
    assert api_as(bob).get("/api/v1/billing/costs/?team=vision").status_code == 404
    assert api_as(alice).get("/api/v1/billing/costs/").status_code == 404  # all teams: admins
    assert api_as(alice).get("/api/v1/billing/costs/?month=12-2026").status_code == 400
    everything = api_as(platform_admin).get("/api/v1/billing/costs/?month=2026-12").json()
    assert {t["team"]: t["spend"] for t in everything["teams"]} == {
        "research": "86.00",
        "vision": "81.00",
        "nlp": "5.00",
    }
