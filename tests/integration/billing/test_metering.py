"""The meter: GPU-seconds per allocation and hour, priced by the book in force at each instant,
accrued while running, finalized at the end, idempotent, spot vs on-demand, lost work."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing import meter, rollups, services
from billing.models import (
    AllocationMeter,
    LostWork,
    Statement,
    UsageDaily,
    UsageJobMonth,
    UsageRecord,
)
from scheduler.models import JobEvent, Node

from .conftest import utc

pytestmark = [pytest.mark.django_db, pytest.mark.engines]


def _rows():
    return list(
        UsageRecord.objects.order_by("allocation_id", "hour").values(
            "allocation_id",
            "hour",
            "gpu_seconds",
            "cost",
            "capacity",
            "finalized",
            "idle_fraction",
            "team_id",
            "user_id",
            "gpu_model_id",
            "job_id",
        )
    )


def test_month_boundary_and_price_change_split_exactly(make_job, allocate, price):
    # $2/GPU-h, raised to $3 at 00:30 on Dec 1st; the allocation runs 23:00 Nov 30 -> 01:00 Dec 1.
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    price("h100", "on_demand", "3.00", utc(2026, 12, 1, 0, 30))
    job = make_job()
    alloc = allocate(job, "n1", 0, utc(2026, 11, 30, 23), utc(2026, 12, 1, 1))

    meter.meter_run(now=utc(2026, 12, 1, 2))

    rows = _rows()
    assert [(r["hour"], r["gpu_seconds"], r["cost"]) for r in rows] == [
        (utc(2026, 11, 30, 23), 3600.0, Decimal("2.000000")),
        # 30 min at $2 then 30 min at $3: the change applies from its instant only.
        (utc(2026, 12, 1, 0), 3600.0, Decimal("2.500000")),
    ]
    assert all(r["finalized"] for r in rows)
    assert AllocationMeter.objects.get(allocation=alloc).finalized
    nov = services.team_spend(team=job.team, month=utc(2026, 11, 1).date())
    dec = services.team_spend(team=job.team, month=utc(2026, 12, 1).date())
    assert (nov, dec) == (Decimal("2.000000"), Decimal("2.500000"))
    # Both months got open statements for the team and its ancestor (roll-up).
    assert set(Statement.objects.values_list("team__slug", "month")) == {
        ("vision", utc(2026, 11, 1).date()),
        ("research", utc(2026, 11, 1).date()),
        ("vision", utc(2026, 12, 1).date()),
        ("research", utc(2026, 12, 1).date()),
    }


def test_running_allocation_accrues_then_finalizes(make_job, allocate, price):
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))  # $0.001 per GPU-second
    job = make_job()
    alloc = allocate(job, "n1", 0, utc(2026, 12, 1, 10, 15))

    meter.meter_run(now=utc(2026, 12, 1, 10, 45))
    assert [(r["gpu_seconds"], r["cost"], r["finalized"]) for r in _rows()] == [
        (1800.0, Decimal("1.800000"), False)
    ]
    meter.meter_run(now=utc(2026, 12, 1, 11, 30))
    assert [(r["gpu_seconds"], r["finalized"]) for r in _rows()] == [
        (2700.0, False),
        (1800.0, False),
    ]
    alloc.ended_at = utc(2026, 12, 1, 11, 40)
    alloc.save()
    meter.meter_run(now=utc(2026, 12, 1, 12, 0))
    assert [(r["gpu_seconds"], r["finalized"]) for r in _rows()] == [
        (2700.0, True),
        (2400.0, True),
    ]
    assert sum(r["cost"] for r in _rows()) == Decimal("5.100000")  # 85 min at $3.60/h


def test_an_end_recorded_after_a_meter_run_passed_it_is_billed_to_the_end_and_finalized(
    make_job, allocate, price
):
    """The loop records a job's end with the time of its poll; a meter run can commit between
    the poll and that record, having metered the still-live allocation a few seconds past the
    end. The next runs skipped the allocation ("an older clock"): the seconds after the end
    stayed billed and the allocation was never finalized. It is now priced to its end."""
    from scheduler.states import JobState
    from scheduler.transitions import job_finish

    price("h100", "on_demand", "3.60", utc(2026, 1, 1))  # $0.001 per GPU-second
    job = make_job()
    allocate(job, "n1", 0, utc(2026, 12, 1, 10, 15))
    meter.meter_run(now=utc(2026, 12, 1, 11, 30, 5))  # between the poll and the record
    job_finish(job=job, target=JobState.SUCCEEDED, now=utc(2026, 12, 1, 11, 30), exit_code=0)
    meter.meter_run(now=utc(2026, 12, 1, 12, 0))
    assert [(r["gpu_seconds"], r["finalized"]) for r in _rows()] == [
        (2700.0, True),
        (1800.0, True),
    ]
    assert sum(r["cost"] for r in _rows()) == Decimal("4.500000")  # 75 min at $3.60/h
    assert UsageDaily.objects.get().cost == Decimal("4.50")
    assert AllocationMeter.objects.get().finalized


def test_an_end_before_a_metered_hour_drops_that_hour(make_job, allocate, price):
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job()
    allocate(job, "n1", 0, utc(2026, 12, 1, 23, 15))
    meter.meter_run(now=utc(2026, 12, 2, 0, 0, 10))  # a row for the next day's first hour
    job_finish_at = utc(2026, 12, 2, 0, 0)
    from scheduler.states import JobState
    from scheduler.transitions import job_finish

    job_finish(job=job, target=JobState.SUCCEEDED, now=job_finish_at, exit_code=0)
    meter.meter_run(now=utc(2026, 12, 2, 1, 0))
    assert [(r["gpu_seconds"], r["finalized"]) for r in _rows()] == [(2700.0, True)]
    assert list(UsageDaily.objects.values_list("day", "gpu_seconds")) == [
        (utc(2026, 12, 1).date(), 2700.0)
    ]


def test_an_allocation_ended_at_its_start_is_billed_nothing(make_job, allocate, price):
    """What the loop leaves of a run the cluster never started: the meter billed its GPU while
    it waited; once it ends where it began, every row goes, its first hour's too."""
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job()
    alloc = allocate(job, "n1", 0, utc(2026, 12, 1, 23, 59))
    meter.meter_run(now=utc(2026, 12, 2, 0, 1))  # two hours' rows: 60 s each
    assert sum(r["gpu_seconds"] for r in _rows()) == 120.0
    type(alloc).objects.filter(pk=alloc.pk).update(ended_at=alloc.started_at)
    meter.meter_run(now=utc(2026, 12, 2, 0, 2))
    assert _rows() == []
    assert sum(UsageDaily.objects.values_list("gpu_seconds", flat=True)) == 0
    assert AllocationMeter.objects.get(allocation_id=alloc.pk).finalized


def test_a_run_the_cluster_never_started_leaves_no_job_cost_behind(
    make_job, allocate, price, api_as, alice
):
    """8 GPUs placed at 23:55 on Nov 30, metered at 00:04 while the cluster kept the run
    pending (8 x 300 s in November, 8 x 240 s in December at $0.001/GPU-s: $2.40 + $1.92),
    then requeued as never started: the team's spend went back to $0, but the job's month
    rollup kept $2.40 and $1.92, so top jobs and the per-user split billed a run that never
    ran and no longer added up to the spend."""
    from scheduler.transitions import job_requeue_unstarted

    price("h100", "on_demand", "3.60", utc(2026, 1, 1))  # $0.001 per GPU-second
    job = make_job(name="ghost", attempts=1, started_at=utc(2026, 11, 30, 23, 55))
    for gpu in range(8):
        allocate(job, "n1", gpu, utc(2026, 11, 30, 23, 55))
    meter.meter_run(now=utc(2026, 12, 1, 0, 4))
    assert list(UsageJobMonth.objects.order_by("month").values_list("cost", flat=True)) == [
        Decimal("2.400000"),
        Decimal("1.920000"),
    ]

    job_requeue_unstarted(job=job, now=utc(2026, 12, 1, 0, 5), reason="cluster kept it pending")
    meter.meter_run(now=utc(2026, 12, 1, 0, 6))

    assert _rows() == []
    assert not UsageJobMonth.objects.exists()
    for month in ("2026-11", "2026-12"):
        body = api_as(alice).get(f"/api/v1/billing/costs/?team=vision&month={month}").json()
        assert (body["spend"], body["top_jobs"], body["by_user"]) == ("0.00", [], [])


def test_rerunning_the_meter_changes_nothing(make_job, allocate, price):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    price("a100", "on_demand", "1.00", utc(2026, 1, 1))
    done, running = make_job(name="done"), make_job(name="running")
    allocate(done, "n1", 0, utc(2026, 12, 1, 1, 10), utc(2026, 12, 1, 4, 20))
    allocate(done, "n1", 1, utc(2026, 12, 1, 1, 10), utc(2026, 12, 1, 4, 20))
    allocate(running, "n3", 0, utc(2026, 12, 1, 2, 5))
    now = utc(2026, 12, 1, 5, 7)

    first = meter.meter_run(now=now)
    before = _rows()
    assert first.usage_rows == len(before) == 4 + 4 + 4
    again = meter.meter_run(now=now)
    assert _rows() == before
    assert again.finalized_allocations == 0  # finalized allocations are never read again
    # The same rows, re-metered from scratch with the cursors gone, still come out identical.
    AllocationMeter.objects.all().delete()
    meter.meter_run(now=now)
    assert _rows() == before
    # And the database refuses a second row for an (allocation, hour) whatever the code does.
    row = UsageRecord.objects.first()
    with pytest.raises(IntegrityError), transaction.atomic():
        UsageRecord.objects.create(
            allocation_id=row.allocation_id,
            hour=row.hour,
            job_id=row.job_id,
            team_id=row.team_id,
            user_id=row.user_id,
            gpu_model_id=row.gpu_model_id,
            capacity=row.capacity,
            gpu_seconds=1.0,
            cost=Decimal("0.01"),
        )


def test_an_older_clock_never_shrinks_metered_usage(make_job, allocate, price):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    allocate(make_job(), "n1", 0, utc(2026, 12, 1, 1, 0))
    meter.meter_run(now=utc(2026, 12, 1, 1, 50))
    before = _rows()
    meter.meter_run(now=utc(2026, 12, 1, 1, 20))
    assert _rows() == before


def test_spot_and_on_demand_are_metered_and_priced_apart(make_job, allocate, price, cluster):
    Node.objects.filter(name="n2").update(spot=True)
    price("h100", "on_demand", "4.00", utc(2026, 1, 1))
    price("h100", "spot", "1.50", utc(2026, 1, 1))
    job = make_job()
    allocate(job, "n1", 0, utc(2026, 12, 2, 0), utc(2026, 12, 2, 2))
    allocate(job, "n2", 0, utc(2026, 12, 2, 0), utc(2026, 12, 2, 2))

    meter.meter_run(now=utc(2026, 12, 2, 3))

    by_capacity = {}
    for r in _rows():
        by_capacity[r["capacity"]] = by_capacity.get(r["capacity"], Decimal(0)) + r["cost"]
    assert by_capacity == {"on_demand": Decimal("8.000000"), "spot": Decimal("3.000000")}


def test_time_without_a_price_is_flagged_not_invented(make_job, allocate, price):
    price("a100", "on_demand", "1.00", utc(2026, 12, 1, 1, 30))
    allocate(make_job(), "n3", 0, utc(2026, 12, 1, 1), utc(2026, 12, 1, 2))
    meter.meter_run(now=utc(2026, 12, 1, 3))
    row = UsageRecord.objects.get()
    assert (row.gpu_seconds, row.cost, row.unpriced_gpu_seconds) == (
        3600.0,
        Decimal("0.500000"),
        1800.0,
    )


def test_usage_is_attributed_to_job_team_user_and_gpu_model(make_job, allocate, price, bob):
    price("a100", "on_demand", "1.00", utc(2026, 1, 1))
    job = make_job(team="nlp", user=bob)
    allocate(job, "n3", 5, utc(2026, 12, 1, 1), utc(2026, 12, 1, 1, 30))
    meter.meter_run(now=utc(2026, 12, 1, 2))
    row = UsageRecord.objects.select_related("team", "user", "gpu_model").get()
    assert (row.job_id, row.team.slug, row.user.username, row.gpu_model.name) == (
        job.pk,
        "nlp",
        "bob",
        "a100-40gb",
    )


def test_idle_fraction_is_recorded_when_a_telemetry_source_knows_it(make_job, allocate, price):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    allocate(make_job(), "n1", 0, utc(2026, 12, 1, 1), utc(2026, 12, 1, 3))

    def idle_source(slices):  # telemetry only for the first hour
        return {(s.allocation_id, s.hour): 0.25 for s in slices if s.hour.hour == 1}

    meter.meter_run(now=utc(2026, 12, 1, 4), idle_source=idle_source)
    assert [r["idle_fraction"] for r in _rows()] == [0.25, None]


def test_lost_work_is_metered_once_per_loss(make_job, allocate, price):
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job()
    allocate(job, "n1", 0, utc(2026, 12, 1, 1), utc(2026, 12, 1, 2))
    JobEvent.objects.create(job=job, kind="preempted", time=utc(2026, 12, 1, 2))
    job.lost_gpu_seconds = 600.0
    job.save()

    meter.meter_run(now=utc(2026, 12, 1, 3))
    meter.meter_run(now=utc(2026, 12, 1, 3, 5))
    assert list(LostWork.objects.values_list("kind", "gpu_seconds", "cost", "occurred_at")) == [
        ("preempted", 600.0, Decimal("0.600000"), utc(2026, 12, 1, 2))
    ]

    allocate(job, "n1", 0, utc(2026, 12, 1, 4), utc(2026, 12, 1, 5), attempt=2)
    JobEvent.objects.create(job=job, kind="node_failed", time=utc(2026, 12, 1, 5))
    job.lost_gpu_seconds = 1500.0
    job.save()
    meter.meter_run(now=utc(2026, 12, 1, 6))
    meter.meter_run(now=utc(2026, 12, 1, 6) + timedelta(minutes=1))
    assert list(LostWork.objects.values_list("kind", "gpu_seconds")) == [
        ("preempted", 600.0),
        ("node_failed", 900.0),
    ]
    # Lost work is waste inside billed time, not an extra charge: usage is unchanged by it.
    assert services.team_spend(team=job.team, month=utc(2026, 12, 1).date()) == Decimal("7.2")


def _daily():
    from billing.models import UsageDaily, UsageJobMonth

    daily = list(
        UsageDaily.objects.order_by("team_id", "day", "gpu_model_id", "capacity").values_list(
            "team_id",
            "day",
            "gpu_model_id",
            "capacity",
            "gpu_seconds",
            "cost",
            "telemetry_gpu_seconds",
            "idle_cost",
        )
    )
    jobs = list(
        UsageJobMonth.objects.order_by("job_id", "month").values_list(
            "job_id", "month", "gpu_seconds", "cost"
        )
    )
    return daily, jobs


def test_rollups_match_usage_incrementally_and_rebuilt(make_job, allocate, price, bob):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    price("a100", "spot", "0.50", utc(2026, 1, 1))
    Node.objects.filter(name="n4").update(spot=True)
    a, b = make_job(name="a"), make_job(team="nlp", user=bob, name="b")
    allocate(a, "n1", 0, utc(2026, 11, 30, 20, 10), utc(2026, 12, 1, 3, 0))
    allocate(b, "n4", 2, utc(2026, 11, 30, 23, 30))

    def idle(slices):
        return {(s.allocation_id, s.hour): 0.5 for s in slices}

    for minutes in (0, 50, 200, 400):
        meter.meter_run(now=utc(2026, 12, 1, 0) + timedelta(minutes=minutes), idle_source=idle)
    incremental = _daily()
    raw_total = sum(UsageRecord.objects.values_list("cost", flat=True))
    assert sum(row[5] for row in incremental[0]) == raw_total == sum(r[3] for r in incremental[1])
    assert {row[1] for row in incremental[0]} == {utc(2026, 11, 30).date(), utc(2026, 12, 1).date()}
    for month in (utc(2026, 11, 1).date(), utc(2026, 12, 1).date()):
        rollups.usage_rollup_rebuild(month=month)
    assert _daily() == incremental


def test_management_command_meters_and_rebuilds(make_job, allocate, price):
    from io import StringIO

    from django.core.management import CommandError, call_command

    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    allocate(make_job(), "n1", 0, utc(2026, 12, 1, 1), utc(2026, 12, 1, 2))
    out = StringIO()
    call_command("billing_meter", stdout=out)
    assert "usage rows 1, finalized allocations 1" in out.getvalue()
    call_command("billing_meter", "--rebuild-rollups", "2026-12", stdout=out)
    assert "2026-12: 1 daily rows, 1 job rows" in out.getvalue()
    for bad in ("december", "2026-13"):
        with pytest.raises(CommandError) as refused:
            call_command("billing_meter", "--rebuild-rollups", bad)
        # A usage error: exit 2, naming the option and the reason.
        assert refused.value.returncode == 2
        assert str(refused.value) == f"--rebuild-rollups: not a YYYY-MM month: {bad!r}"


@pytest.mark.django_db(transaction=True)
def test_a_second_concurrent_run_is_skipped_on_postgresql(make_job, allocate, price):
    """Two meter runs never interleave: the second finds the lock taken and does nothing."""
    import threading

    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the advisory lock is PostgreSQL's; SQLite serializes writers itself")
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    allocate(make_job(), "n1", 0, utc(2026, 12, 1, 1), utc(2026, 12, 1, 2))
    outcome = {}
    with transaction.atomic():
        assert meter._meter_lock()  # held by this transaction until it ends

        def other():
            outcome["result"] = meter.meter_run(now=utc(2026, 12, 1, 3))
            connection.close()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert outcome["result"].skipped and UsageRecord.objects.count() == 0
    assert not meter.meter_run(now=utc(2026, 12, 1, 3)).skipped
    assert UsageRecord.objects.count() == 1


def test_lost_work_is_priced_where_it_was_lost_not_where_the_job_runs_next(
    make_job, allocate, price
):
    # Preempted on a spot H100 at 10:00, requeued onto an on-demand A100 at 10:00:30; the meter
    # only sees the loss at 10:05, when the new attempt is already running.
    Node.objects.filter(name="n2").update(spot=True)
    price("h100", "spot", "3.60", utc(2026, 1, 1))
    price("a100", "on_demand", "36.00", utc(2026, 1, 1))
    job = make_job()
    allocate(job, "n2", 0, utc(2026, 12, 1, 9), utc(2026, 12, 1, 10))
    JobEvent.objects.create(job=job, kind="preempted", time=utc(2026, 12, 1, 10))
    allocate(job, "n3", 0, utc(2026, 12, 1, 10, 0, 30), attempt=2)
    job.lost_gpu_seconds = 600.0
    job.save()

    meter.meter_run(now=utc(2026, 12, 1, 10, 5))

    lost = LostWork.objects.select_related("gpu_model").get()
    assert (lost.gpu_model.name, lost.capacity, lost.cost) == (
        "h100-80gb",
        "spot",
        Decimal("0.600000"),
    )


@pytest.mark.parametrize("earlier_preemption", [False, True])
def test_a_loss_with_no_event_of_its_own_is_the_requeue_that_recorded_it(
    make_job, allocate, price, earlier_preemption
):
    # Slurm preempted the run on a spot H100 at 10:00 (the loop requeued it, no "preempted"
    # event: the platform did not decide it); attempt 3 already runs on an A100 at 10:05. With
    # an earlier preemption by the platform, that event belongs to the earlier requeue.
    Node.objects.filter(name="n2").update(spot=True)
    price("h100", "on_demand", "7.20", utc(2026, 1, 1))
    price("h100", "spot", "3.60", utc(2026, 1, 1))
    price("a100", "on_demand", "36.00", utc(2026, 1, 1))
    job = make_job()
    if earlier_preemption:
        allocate(job, "n1", 0, utc(2026, 12, 1, 7), utc(2026, 12, 1, 8, 2))
        JobEvent.objects.create(job=job, kind="preempted", time=utc(2026, 12, 1, 8))
        JobEvent.objects.create(
            job=job, kind="requeued", time=utc(2026, 12, 1, 8, 2), data={"reason": "preempted"}
        )
    allocate(job, "n2", 0, utc(2026, 12, 1, 9), utc(2026, 12, 1, 10), attempt=2)
    JobEvent.objects.create(
        job=job,
        kind="requeued",
        time=utc(2026, 12, 1, 10),
        data={"reason": "preempted by Slurm"},
    )
    allocate(job, "n3", 0, utc(2026, 12, 1, 10, 0, 30), attempt=3)
    job.lost_gpu_seconds = 600.0
    job.save()

    meter.meter_run(now=utc(2026, 12, 1, 10, 5))

    lost = LostWork.objects.select_related("gpu_model").get()
    assert (lost.kind, lost.occurred_at) == ("preempted", utc(2026, 12, 1, 10))
    assert (lost.gpu_model.name, lost.capacity, lost.cost) == (
        "h100-80gb",
        "spot",
        Decimal("0.600000"),
    )


def test_work_lost_to_a_node_failure_is_tagged_as_one(make_job, allocate, price):
    # The loop requeues a job whose node went down with the reason "node <name> failed" and no
    # event of its own: that loss was tagged "other".
    from scheduler.transitions import job_requeue

    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job(started_at=utc(2026, 12, 1, 9), attempts=1)
    allocate(job, "n1", 0, utc(2026, 12, 1, 9))
    assert job_requeue(job=job, now=utc(2026, 12, 1, 10), reason="node n1 failed")

    meter.meter_run(now=utc(2026, 12, 1, 10, 5))

    lost = LostWork.objects.get()
    assert (lost.kind, lost.occurred_at, lost.gpu_seconds) == (
        "node_failed",
        utc(2026, 12, 1, 10),
        3600.0,
    )


def test_days_and_months_stay_utc_when_a_local_time_zone_is_active(
    make_job, allocate, price, alice
):
    # A portal showing local times activates the viewer's zone. New York leaves daylight time
    # at 06:00 UTC on 2026-11-01; this job runs 22:00 UTC Oct 31 -> 08:00 UTC Nov 1 (18:00 to
    # 03:00 local, still Oct 31 there until 04:00 UTC) and loses work at 02:00 UTC Nov 1.
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from billing import dashboards

    price("h100", "on_demand", "1.00", utc(2026, 1, 1))
    job = make_job()
    allocate(job, "n1", 0, utc(2026, 10, 31, 22), utc(2026, 11, 1, 8))
    JobEvent.objects.create(job=job, kind="preempted", time=utc(2026, 11, 1, 2))
    job.lost_gpu_seconds = 3600.0
    job.save()
    oct_, nov = utc(2026, 10, 1).date(), utc(2026, 11, 1).date()

    with timezone.override(ZoneInfo("America/New_York")):
        meter.meter_run(now=utc(2026, 11, 1, 9))
        incremental = _daily()
        for month in (oct_, nov):
            rollups.usage_rollup_rebuild(month=month)
        assert _daily() == incremental
        spends = [services.team_spend(team=job.team, month=m) for m in (oct_, nov)]
        dashboard = dashboards.team_cost_dashboard(
            user=alice, team_slug="vision", month=nov, now=utc(2026, 11, 1, 9)
        )

    assert spends == [Decimal("2.000000"), Decimal("8.000000")]
    assert {d.day for d in dashboard.days} == {nov}
    assert [(p.day, p.kind) for p in dashboard.lost] == [(nov, "preempted")]
