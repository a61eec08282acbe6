"""Pure billing arithmetic: hour buckets, months, piecewise pricing, forecast."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing import calc

T0 = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def test_hour_buckets_split_at_hours_and_months():
    pieces = list(calc.hour_buckets(utc(2026, 11, 30, 23, 20), utc(2026, 12, 1, 1, 5)))
    assert pieces == [
        (utc(2026, 11, 30, 23), utc(2026, 11, 30, 23, 20), utc(2026, 12, 1, 0)),
        (utc(2026, 12, 1, 0), utc(2026, 12, 1, 0), utc(2026, 12, 1, 1)),
        (utc(2026, 12, 1, 1), utc(2026, 12, 1, 1), utc(2026, 12, 1, 1, 5)),
    ]
    assert list(calc.hour_buckets(T0, T0)) == []


def test_months():
    assert calc.month_bounds(date(2026, 12, 1)) == (utc(2026, 12, 1), utc(2027, 1, 1))
    assert calc.parse_month("2026-02") == date(2026, 2, 1)
    for bad in ("2026-2", "26-02", "2026/02", "", "2026-13"):
        with pytest.raises(ValueError):
            calc.parse_month(bad)


def test_price_applies_from_its_instant_only():
    schedule = calc.PriceSchedule(
        [calc.RateStep(utc(2026, 12, 1, 0, 30), Decimal("3")), calc.RateStep(T0, Decimal("2"))]
    )
    assert schedule.rate_at(T0 - timedelta(seconds=1)) is None
    assert schedule.rate_at(utc(2026, 12, 1, 0, 30)) == Decimal("3")
    cost, unpriced = schedule.price(utc(2026, 12, 1, 0), utc(2026, 12, 1, 1))
    assert (cost, unpriced) == (Decimal("2.500000"), 0)
    cost, unpriced = schedule.price(T0 - timedelta(minutes=30), T0 + timedelta(minutes=30))
    assert (cost, unpriced) == (Decimal("1.000000"), 30 * 60 * 1_000_000)


STEPS = st.lists(
    st.tuples(st.integers(0, 48 * 3600), st.decimals("0", "50", places=4)),
    min_size=0,
    max_size=5,
    unique_by=lambda s: s[0],
)


@settings(max_examples=200, deadline=None)
@given(
    steps=STEPS, a=st.integers(0, 48 * 3600), length=st.integers(0, 48 * 3600), cut=st.floats(0, 1)
)
def test_splitting_an_interval_never_changes_its_price(steps, a, length, cut):
    """Metering in hour pieces (or any pieces) bills exactly what one piece would, to 1e-6."""
    schedule = calc.PriceSchedule(
        [calc.RateStep(T0 + timedelta(seconds=s), rate) for s, rate in steps]
    )
    start = T0 + timedelta(seconds=a)
    end = start + timedelta(seconds=length)
    whole, whole_unpriced = schedule.price(start, end)
    mid = start + timedelta(seconds=int(length * cut))
    left, lu = schedule.price(start, mid)
    right, ru = schedule.price(mid, end)
    assert abs((left + right) - whole) <= Decimal("0.000002")
    assert lu + ru == whole_unpriced
    by_hour = [schedule.price(lo, hi) for _, lo, hi in calc.hour_buckets(start, end)]
    assert abs(sum((c for c, _ in by_hour), Decimal(0)) - whole) <= Decimal("0.000001") * (
        len(by_hour) + 1
    )


def test_a_clusters_override_takes_over_from_its_first_step():
    platform = calc.PriceSchedule(
        [calc.RateStep(T0, Decimal("2")), calc.RateStep(utc(2026, 12, 1, 2), Decimal("4"))]
    )
    own = calc.PriceSchedule([calc.RateStep(utc(2026, 12, 1, 1), Decimal("5"))])
    merged = platform.overridden_by(own)
    assert merged.rate_at(utc(2026, 12, 1, 0, 59)) == Decimal("2")  # the platform's, before
    assert merged.rate_at(utc(2026, 12, 1, 1)) == Decimal("5")
    assert merged.rate_at(utc(2026, 12, 1, 3)) == Decimal("5")  # a later platform step: not here
    assert platform.overridden_by(calc.PriceSchedule([])) is platform
    # An override before any platform rate prices the time the platform left unpriced.
    early = calc.PriceSchedule([calc.RateStep(T0 - timedelta(hours=1), Decimal("1"))])
    cost, unpriced = platform.overridden_by(early).price(T0 - timedelta(hours=1), T0)
    assert (cost, unpriced) == (Decimal("1.000000"), 0)


@settings(max_examples=200, deadline=None)
@given(base=STEPS, own=STEPS, at=st.integers(-3600, 50 * 3600))
def test_an_overridden_rate_is_the_clusters_once_it_has_one(base, own, at):
    platform = calc.PriceSchedule([calc.RateStep(T0 + timedelta(seconds=s), r) for s, r in base])
    cluster = calc.PriceSchedule([calc.RateStep(T0 + timedelta(seconds=s), r) for s, r in own])
    instant = T0 + timedelta(seconds=at)
    expected = cluster.rate_at(instant)
    if expected is None:
        expected = platform.rate_at(instant)
    assert platform.overridden_by(cluster).rate_at(instant) == expected


def test_forecast_window_is_the_trailing_day_even_across_the_months_start():
    # The burn rate is the team's, not the month's: a month two hours old is measured over the
    # last 24 hours, 22 of them in the month before.
    assert calc.forecast_window(utc(2026, 12, 1, 2), date(2026, 12, 1)) == (
        utc(2026, 11, 30, 2),
        utc(2026, 12, 1, 2),
    )
    assert calc.forecast_window(utc(2026, 12, 1), date(2026, 12, 1)) == (
        utc(2026, 11, 30),
        utc(2026, 12, 1),
    )
    assert calc.forecast_window(utc(2026, 12, 10, 5), date(2026, 12, 1)) == (
        utc(2026, 12, 9, 5),
        utc(2026, 12, 10, 5),
    )
    # A month over: its last day (its forecast is its actual spend anyway).
    assert calc.forecast_window(utc(2027, 1, 5), date(2026, 12, 1)) == (
        utc(2026, 12, 31),
        utc(2027, 1, 1),
    )
    # A month not begun has no burn of its own to extrapolate: an empty window.
    lo, hi = calc.forecast_window(utc(2026, 11, 20), date(2026, 12, 1))
    assert lo == hi
    empty = calc.forecast_month_end(
        spend_to_date=Decimal("5"),
        trailing_spend=Decimal(0),
        trailing_window=timedelta(0),
        now=utc(2026, 12, 1),
        month=date(2026, 12, 1),
    )
    assert empty == Decimal("5.00")


def test_a_charge_in_the_months_first_minute_forecasts_a_day_of_burn_not_a_minute():
    """The audit's case: at 00:00:30 on the 1st, one $16 egress charge (nothing else in the last
    day) is $16 a day for the month's 31 days, not $16 per 30 seconds (about $1.4M)."""
    month = date(2026, 12, 1)
    now = utc(2026, 12, 1, 0, 0, 30)
    lo, hi = calc.forecast_window(now, month)
    forecast = calc.forecast_month_end(
        spend_to_date=Decimal(16),
        trailing_spend=Decimal(16),
        trailing_window=hi - lo,
        now=now,
        month=month,
    )
    remaining = calc.month_bounds(month)[1] - now
    assert forecast == (16 + Decimal(16) * Decimal(remaining / timedelta(hours=24))).quantize(
        calc.CENT
    )
    assert forecast < Decimal(16 * 32)


@settings(max_examples=300, deadline=None)
@given(
    offset=st.integers(0, 31 * 24 * 3600 * 1_000_000 - 1),
    spend=st.decimals("0", "100000", places=2),
    trailing=st.decimals("0", "100000", places=2),
)
def test_the_forecast_never_extrapolates_more_than_a_days_burn_per_day_left(
    offset, spend, trailing
):
    """Whatever instant of the month it is read at, the window is a whole trailing day ending
    now, so the forecast adds at most the window's spend per day left in the month (to the
    cent): a charge minutes into a month can never be read as a rate per minute."""
    month = date(2026, 12, 1)
    start, end = calc.month_bounds(month)
    now = start + timedelta(microseconds=offset)
    lo, hi = calc.forecast_window(now, month)
    assert (lo, hi) == (now - timedelta(hours=24), now)
    forecast = calc.forecast_month_end(
        spend_to_date=spend,
        trailing_spend=trailing,
        trailing_window=hi - lo,
        now=now,
        month=month,
    )
    days_left = Decimal(calc.microseconds(end - now)) / Decimal(24 * 3600 * 1_000_000)
    assert spend <= forecast <= (spend + trailing * days_left).quantize(calc.CENT) + calc.CENT
