"""The backlog sweep's mark: after a sweep, the next one searches only what ended since, what
was recorded since and the cursors not finalized, not the whole allocation history (an hourly
sweep cost ~1.5 s at 2 million allocations), and still finds every allocation owed, on either
side of the mark: one that ended since, one recorded late with an end long past, one whose end
was recorded after the meter had metered it live, and one that was live and never metered
when the mark moved."""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing import meter
from billing.models import AllocationMeter, BacklogMark, UsageRecord
from scheduler.models import Allocation

from .conftest import utc

pytestmark = [pytest.mark.django_db, pytest.mark.engines]

SWEEP = utc(2026, 12, 1, 0, 5)  # lookback 35 days: the sweep reads what ended before 27 Oct 00:05
HOUR = timedelta(hours=1)


@pytest.fixture
def history(make_job, allocate, price):
    """Nine months of allocations, each ended and never metered (the meter was down): the first
    sweeps meter them all."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    job = make_job(name="history")
    return [
        allocate(job, "n1", month % 4, utc(2026, month, 2, 0), utc(2026, month, 2, 2))
        for month in range(1, 10)
    ]


def _sweep(at):
    return meter.meter_backlog_run(now=at)


def test_after_two_sweeps_the_search_leaves_the_metered_history_out(history):
    """The first sweep searches the whole history (no mark yet) and meters it; the highest id it
    saw is trusted an hour later, when the second sweep sets the mark at the lookback's start.
    From then on the metered history is outside the search: only what is owed can be in it."""
    history_ids = {a.pk for a in history}
    assert set(meter.meter_backlog_search(now=SWEEP).values_list("pk", flat=True)) == history_ids

    assert _sweep(SWEEP).backlog_allocations == 9
    assert AllocationMeter.objects.filter(finalized=True).count() == 9
    assert _sweep(SWEEP + HOUR).backlog_allocations == 0

    mark = BacklogMark.objects.get()
    assert mark.ended_before == SWEEP + HOUR - timedelta(days=35)
    assert mark.checked_id == max(history_ids)
    assert not meter.meter_backlog_search(now=SWEEP + 2 * HOUR).exists()
    assert not meter.meter_backlog_search(now=SWEEP + 30 * 24 * HOUR).filter(pk__in=history_ids)


def test_every_allocation_owed_is_found_on_either_side_of_the_mark(
    history, make_job, allocate, settings
):
    job = make_job(name="owed")
    # Live since 20 October and metered live (cursor not finalized); its end is recorded
    # only after the mark has passed it.
    ends_late = allocate(job, "n2", 0, utc(2026, 10, 20, 0))
    meter.meter_run(now=utc(2026, 10, 20, 6))
    # Live since 21 October and never metered (the meter was down): the mark may not pass its
    # start, since its end may be recorded before the lookback.
    never_seen_live = allocate(job, "n2", 1, utc(2026, 10, 21, 0))
    # Ended after the lookback's start at the first sweeps, before it at the third.
    ended_since = allocate(job, "n2", 2, utc(2026, 10, 27, 0, 30), utc(2026, 10, 27, 1, 30))

    _sweep(SWEEP)
    _sweep(SWEEP + HOUR)
    mark = BacklogMark.objects.get()
    assert mark.ended_before == utc(2026, 10, 21, 0)  # held at the unmetered live start
    assert not UsageRecord.objects.filter(
        allocation_id__in=[ends_late.pk, never_seen_live.pk, ended_since.pk],
        hour__gte=utc(2026, 10, 20, 6),
    ).exists()

    Allocation.objects.filter(pk=ends_late.pk).update(ended_at=utc(2026, 10, 20, 8))
    Allocation.objects.filter(pk=never_seen_live.pk).update(ended_at=utc(2026, 10, 21, 3))
    # Recorded after the mark moved, ended long before it.
    recorded_late = allocate(job, "n2", 3, utc(2026, 9, 15, 0), utc(2026, 9, 15, 1))

    owed = {ends_late.pk, never_seen_live.pk, ended_since.pk, recorded_late.pk}
    found = set(meter.meter_backlog_query(now=SWEEP + 2 * HOUR).values_list("pk", flat=True))
    assert found == owed
    assert _sweep(SWEEP + 2 * HOUR).backlog_allocations == 4
    assert set(
        AllocationMeter.objects.filter(finalized=True, allocation__in=owed).values_list(
            "allocation_id", "metered_until"
        )
    ) == {
        (ends_late.pk, utc(2026, 10, 20, 8)),
        (never_seen_live.pk, utc(2026, 10, 21, 3)),
        (ended_since.pk, utc(2026, 10, 27, 1, 30)),
        (recorded_late.pk, utc(2026, 9, 15, 1)),
    }
    gpu_hours = {
        pk: sum(UsageRecord.objects.filter(allocation_id=pk).values_list("gpu_seconds", flat=True))
        / 3600
        for pk in owed
    }
    assert gpu_hours == {
        ends_late.pk: 8,
        never_seen_live.pk: 3,
        ended_since.pk: 1,
        recorded_late.pk: 1,
    }
    # Caught up: the mark moves to the lookback's start and the search is empty again.
    _sweep(SWEEP + 3 * HOUR)
    assert BacklogMark.objects.get().ended_before == SWEEP + 3 * HOUR - timedelta(days=35)
    assert not meter.meter_backlog_query(now=SWEEP + 4 * HOUR).exists()


def test_an_allocation_owed_and_not_metered_holds_the_mark_at_its_end(history, settings):
    """A sweep that stops before the backlog's end (its cap) leaves the mark at the oldest end
    still owed, so the next sweeps find the rest."""
    settings.BILLING_METER_BACKLOG_PER_SWEEP = 2
    _sweep(SWEEP)
    _sweep(SWEEP + HOUR)
    assert AllocationMeter.objects.filter(finalized=True).count() == 4
    assert BacklogMark.objects.get().ended_before == utc(2026, 5, 2, 2)  # the fifth's end
    for hours in (2, 3, 4):
        _sweep(SWEEP + hours * HOUR)
    assert AllocationMeter.objects.filter(finalized=True).count() == 9
    assert BacklogMark.objects.get().ended_before == SWEEP + 4 * HOUR - timedelta(days=35)


def test_an_allocation_committed_after_a_higher_id_is_found(history, make_job, allocate):
    """A transaction draws an allocation id, another draws a higher one and commits, and the
    first commits only after a sweep read the highest id (a long import of old allocations):
    the mark trusts an id only an hour after it read it, so the late row is still searched."""
    _sweep(SWEEP)
    job = make_job(name="import")
    drawn = allocate(job, "n2", 0, utc(2026, 9, 1, 0), utc(2026, 9, 1, 1))
    drawn_id = drawn.pk
    drawn.delete()  # its id drawn, its row not visible yet
    allocate(job, "n2", 1, utc(2026, 11, 30, 0), utc(2026, 11, 30, 1))
    _sweep(SWEEP + HOUR)

    late = Allocation.objects.create(
        pk=drawn_id,
        job=job,
        node=drawn.node,
        gpu_index=0,
        started_at=utc(2026, 9, 1, 0),
        ended_at=utc(2026, 9, 1, 1),
    )
    assert _sweep(SWEEP + 2 * HOUR).backlog_allocations == 1
    assert AllocationMeter.objects.get(allocation_id=late.pk).finalized
