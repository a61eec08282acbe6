"""The month-end forecast's burn rate is the team's, not the month's: it is measured over the
trailing 24 hours even when they cross the month's start, so in a month's first minutes it reads
the end of the month before (its usage rows and its egress charges) instead of extrapolating one
charge over a few seconds. Every caller agrees: the team dashboard, the admin overview's rows
and platform-wide dashboard, the cost API and the pages.

Uses the clusters of ``conftest``: an attempt on ``cloud`` (node c1) moves ``c4`` from
``archive`` for $16."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import calc, dashboards, meter

from .conftest import utc

pytestmark = pytest.mark.django_db

DEC = utc(2026, 12, 1).date()
# Thirty seconds into December: the audit's case.
NOW = utc(2026, 12, 1, 0, 0, 30)


@pytest.fixture
def month_turn(c4, clouds, make_job, allocate, price):
    """$2/GPU-h. vision, in November: 12 GPU-h on test until midnight ($24) and 1 GPU-h on the
    cloud on the 30th at 20:00 ($2 + $16 egress). In December: an attempt on the cloud started at
    midnight and still running (30 s: $0.016667, + $16 egress)."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    allocate(make_job(name="nov-local"), "n1", 0, utc(2026, 11, 30, 12), utc(2026, 12, 1))
    allocate(
        make_job(name="nov-cloud", dataset="c4"),
        "c1",
        0,
        utc(2026, 11, 30, 20),
        utc(2026, 11, 30, 21),
    )
    allocate(make_job(name="dec-cloud", dataset="c4"), "c1", 1, utc(2026, 12, 1))
    meter.meter_run(now=NOW)


def _expected() -> Decimal:
    # Spend to date is December's own: $16 of egress + 30 s of GPU. The burn rate is the last
    # day's, hour-aligned like the usage rows (from 30 Nov 00:00): $24 + $2 + $0.016667 of GPU,
    # $16 + $16 of egress, over 24 h 30 s.
    return calc.forecast_month_end(
        spend_to_date=Decimal("16.016667"),
        trailing_spend=Decimal("58.016667"),
        trailing_window=timedelta(hours=24, seconds=30),
        now=NOW,
        month=DEC,
    )


def test_the_expected_forecast_is_a_days_burn_per_day_not_thirty_seconds():
    # About $16 + $58 x 31, where the month-clipped window forecast about $1.4M.
    assert Decimal(1800) < _expected() < Decimal(1820)


def test_a_month_minutes_old_forecasts_from_the_previous_days_usage_and_egress(
    month_turn, alice, platform_admin
):
    d = dashboards.team_cost_dashboard(user=alice, team_slug="vision", month=DEC, now=NOW)
    assert (d.budget.gpu_spend, d.budget.egress, d.budget.spend) == (
        Decimal("0.02"),
        Decimal("16.00"),
        Decimal("16.02"),
    )
    assert d.budget.forecast == _expected()
    # Its parent's dashboard rolls the same team up: the same rate.
    parent = dashboards.team_cost_dashboard(
        user=platform_admin, team_slug="research", month=DEC, now=NOW
    )
    assert parent.budget.forecast == _expected()


def test_every_caller_gets_the_same_rate(month_turn, platform_admin, api_as, monkeypatch):
    overview = dashboards.admin_cost_overview(user=platform_admin, month=DEC, now=NOW)
    rows = {r.slug: r for r in overview.rows}
    assert rows["vision"].forecast == _expected()
    assert rows["research"].forecast == _expected()
    assert rows["nlp"].forecast == Decimal("0.00")
    # Only vision spent: the platform's forecast is vision's.
    assert overview.dashboard.budget.forecast == _expected()

    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: NOW)
    client = api_as(platform_admin)
    one = client.get("/api/v1/billing/costs/?team=vision&month=2026-12").json()
    assert one["forecast"] == str(_expected())
    every = client.get("/api/v1/billing/costs/?month=2026-12").json()
    assert every["forecast"] == str(_expected())
    assert {t["team"]: t["forecast"] for t in every["teams"]}["vision"] == str(_expected())


def test_the_pages_show_the_days_rate_forecast(
    month_turn, client, alice, platform_admin, monkeypatch
):
    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: NOW)
    client.force_login(alice)
    page = client.get("/billing/teams/vision/?month=2026-12").content.decode()
    assert f"${_expected():,}" in page
    client.force_login(platform_admin)
    overview = client.get("/billing/overview/?month=2026-12").content.decode()
    assert f"${_expected():,}" in overview


def test_a_month_over_or_not_begun_forecasts_only_its_own_spend(month_turn, alice):
    nov = utc(2026, 11, 1).date()
    over = dashboards.team_cost_dashboard(user=alice, team_slug="vision", month=nov, now=NOW)
    assert over.budget.forecast == over.budget.spend == Decimal("42.00")
    jan = utc(2027, 1, 1).date()
    ahead = dashboards.team_cost_dashboard(user=alice, team_slug="vision", month=jan, now=NOW)
    assert ahead.budget.forecast == Decimal("0.00")
