"""Allocations older than the meter's lookback that it never finalized (the meter was down
longer than ``BILLING_METER_LOOKBACK_DAYS``, or the allocation was recorded late): the meter
catches them up by itself, a bounded number per run, and their month can then be closed; until
then the close is a 409 naming them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing import services, statements
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
    try, until an operator raised the lookback. Now the meter's next run bills both, and
    October closes at 3 GPU-hours x $3.60."""
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    seen = allocate(make_job(name="seen-live"), "n1", 0, utc(2026, 10, 10, 0))
    services.meter_run(now=utc(2026, 10, 10, 1))
    type(seen).objects.filter(pk=seen.pk).update(ended_at=utc(2026, 10, 10, 2))
    never = allocate(
        make_job(name="never-seen"), "n1", 1, utc(2026, 10, 12, 0), utc(2026, 10, 12, 1)
    )

    result = services.meter_run(now=utc(2026, 12, 1, 0, 5))

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
    # Caught up: the next run has nothing older than the lookback left to meter.
    assert services.meter_run(now=utc(2026, 12, 1, 0, 6)).backlog_allocations == 0


def test_a_backlog_is_metered_a_bounded_number_per_run_and_the_close_names_what_it_waits_for(
    make_job, allocate, price, platform_admin, settings
):
    """Three October allocations never metered, two per run: the first run meters the two
    oldest; the close then refuses, naming the third; the next run meters it."""
    settings.BILLING_METER_BACKLOG_PER_RUN = 2
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job(name="old")
    day3, day1, day2 = (
        allocate(job, "n1", gpu, utc(2026, 10, day, 0), utc(2026, 10, day, 1))
        for gpu, day in ((0, 3), (1, 1), (2, 2))
    )

    assert services.meter_run(now=utc(2026, 12, 1, 0, 5)).backlog_allocations == 2
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
        f"(allocation {day3.pk}); the meter catches up by itself" in refused.value.message
    )
    research.refresh_from_db()
    assert (research.status, research.total) == ("open", None)

    assert services.meter_run(now=utc(2026, 12, 1, 0, 7)).backlog_allocations == 1
    closed = statements.statement_close(
        user=platform_admin, statement_id=research.pk, now=utc(2026, 12, 1, 0, 8)
    )
    assert closed.total == Decimal("10.80")
