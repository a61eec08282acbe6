"""Allocations older than the meter's lookback that it never finalized (the meter was down
longer than ``BILLING_METER_LOOKBACK_DAYS``, or the allocation was recorded late): the hourly
backlog sweep meters them by itself, a bounded number per sweep, and their month can then be
closed; until then the close is a 409 naming them."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import meter, statements
from billing.models import AllocationMeter, Statement, UsageRecord
from core.errors import Conflict

from .conftest import utc

pytestmark = pytest.mark.django_db

OCT = utc(2026, 10, 1).date()


def test_a_month_whose_allocations_aged_out_of_the_lookback_unmetered_is_closed_whole(
    make_job, allocate, price, platform_admin
):
    """The meter ran at 01:00 on 10 October while a run was live, then was down until
    1 December 00:05. The run had ended at 02:00; another ran 12 October 00:00-01:00 and was
    never metered. Both ended more than 35 days before the meter came back, so it never read
    them again: October's close was a 409 ("1 GPU allocation ... still to be metered") on every
    try, until an operator raised the lookback. Now the meter's backlog sweep bills both, and
    October closes at 3 GPU-hours x $3.60."""
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    seen = allocate(make_job(name="seen-live"), "n1", 0, utc(2026, 10, 10, 0))
    meter.meter_run(now=utc(2026, 10, 10, 1))
    type(seen).objects.filter(pk=seen.pk).update(ended_at=utc(2026, 10, 10, 2))
    never = allocate(
        make_job(name="never-seen"), "n1", 1, utc(2026, 10, 12, 0), utc(2026, 10, 12, 1)
    )

    meter.meter_run(now=utc(2026, 12, 1, 0, 5))
    result = meter.meter_backlog_run(now=utc(2026, 12, 1, 0, 5))

    research = Statement.objects.get(team__slug="research", month=OCT)
    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 1, 0, 6)
    )
    assert closed.total == Decimal("10.80")
    assert sorted(
        UsageRecord.objects.filter(allocation_id__in=[seen.pk, never.pk]).values_list(
            "hour", "gpu_seconds"
        )
    ) == [
        (utc(2026, 10, 10, 0), 3600.0),
        (utc(2026, 10, 10, 1), 3600.0),
        (utc(2026, 10, 12, 0), 3600.0),
    ]
    assert set(
        AllocationMeter.objects.filter(finalized=True).values_list("allocation_id", flat=True)
    ) == {seen.pk, never.pk}
    assert result.backlog_allocations == 2
    # Caught up: the next sweep has nothing older than the lookback left to meter.
    assert meter.meter_backlog_run(now=utc(2026, 12, 1, 1, 5)).backlog_allocations == 0


def test_a_backlog_is_metered_a_bounded_number_per_sweep_and_the_close_names_what_it_waits_for(
    make_job, allocate, price, platform_admin, settings
):
    """Three October allocations never metered, two per sweep: the first sweep meters the two
    oldest; the close then refuses, naming the third; the next sweep meters it."""
    settings.BILLING_METER_BACKLOG_PER_SWEEP = 2
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job(name="old")
    day3, day1, day2 = (
        allocate(job, "n1", gpu, utc(2026, 10, day, 0), utc(2026, 10, day, 1))
        for gpu, day in ((0, 3), (1, 1), (2, 2))
    )

    assert meter.meter_run(now=utc(2026, 12, 1, 0, 5)).usage_rows == 0  # out of its window
    assert meter.meter_backlog_run(now=utc(2026, 12, 1, 0, 5)).backlog_allocations == 2
    assert set(AllocationMeter.objects.values_list("allocation_id", flat=True)) == {
        day1.pk,
        day2.pk,
    }

    research = Statement.objects.get(team__slug="research", month=OCT)
    with pytest.raises(Conflict) as refused:
        statements.statement_close(
            user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 1, 0, 6)
        )
    assert refused.value.field == "status"
    assert (
        f"1 GPU allocation of its teams still to be metered to the month's end "
        f"(allocation {day3.pk}); the meter catches up by itself"
        in refused.value.message
        and "manage.py billing_meter --backlog" in refused.value.message
    )
    research.refresh_from_db()
    assert (research.status, research.total) == ("open", None)

    assert meter.meter_backlog_run(now=utc(2026, 12, 1, 1, 5)).backlog_allocations == 1
    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 1, 0, 8)
    )
    assert closed.total == Decimal("10.80")


def test_a_sweep_meters_its_backlog_batch_after_batch(make_job, allocate, price, monkeypatch):
    """One transaction (and one hold of the meter's lock) per batch, until the backlog is empty."""
    monkeypatch.setattr(meter, "BACKLOG_BATCH", 2)
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job(name="old")
    for gpu in range(5):
        allocate(job, "n1", gpu, utc(2026, 10, 1, gpu), utc(2026, 10, 1, gpu + 1))

    result = meter.meter_backlog_run(now=utc(2026, 12, 1, 0, 5))

    assert (result.backlog_allocations, result.usage_rows, result.skipped) == (5, 5, False)
    assert AllocationMeter.objects.filter(finalized=True).count() == 5


def test_billing_meter_backlog_meters_what_ended_before_the_lookback(
    make_job, allocate, price, capsys
):
    from django.core.management import call_command
    from django.utils import timezone

    ended = timezone.now() - timedelta(days=60)
    price("h100", "on_demand", "3.60", ended - timedelta(days=1))
    allocate(make_job(name="old"), "n1", 0, ended - timedelta(hours=2), ended)

    call_command("billing_meter")
    assert not AllocationMeter.objects.exists()  # beyond the per-minute window
    call_command("billing_meter", "--backlog")

    assert "allocations older than the lookback metered 1, usage rows" in capsys.readouterr().out
    assert AllocationMeter.objects.get().finalized


def test_no_price_in_the_book_can_keep_an_allocation_in_the_backlog(
    make_job, allocate, price, platform_admin
):
    """What the meter logs as "not metered" (a cost that does not fit a usage row) cannot come
    from the price book: a rate is at most $100,000 per GPU-hour (a database constraint) and a
    usage row holds at most one GPU-hour, so at most $100,000, a ten-millionth of what the row
    holds. So a month never waits for pricing: the whole of October at the largest rate is
    metered by the backlog sweep, time with no rate at all is metered at $0 as unpriced
    GPU-hours, and the month closes with nothing left in the backlog."""
    from billing.models import MAX_RATE

    price("h100", "on_demand", str(MAX_RATE), utc(2026, 1, 1))  # no rate for the a100 nodes
    job = make_job(name="october")
    allocate(job, "n1", 0, utc(2026, 10, 1), utc(2026, 11, 1))
    allocate(job, "n3", 0, utc(2026, 10, 1), utc(2026, 10, 1, 2))

    meter.meter_backlog_run(now=utc(2026, 12, 10))

    assert not meter.meter_backlog_query(now=utc(2026, 12, 10)).exists()
    research = Statement.objects.get(team__slug="research", month=OCT)
    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 10)
    )
    assert closed.total == Decimal("74400000.00")  # 744 GPU-hours x $100,000
    assert sorted(closed.lines.values_list("gpu_hours", "unpriced_gpu_hours", "cost")) == [
        (Decimal("2.0000"), Decimal("2.0000"), Decimal("0.00")),
        (Decimal("744.0000"), Decimal("0.0000"), Decimal("74400000.00")),
    ]
