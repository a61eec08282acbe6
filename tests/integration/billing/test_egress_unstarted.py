"""Egress of a run the cluster never started: the meter charges an attempt's data movement when
it first sees the attempt, which may be while the cluster still keeps the run pending. A run the
cluster then gives up on (``job_requeue_unstarted``) moved no data and is billed nothing: its
charge goes with its usage rows. A run the cluster starts late (``job_run_started_late``) ran,
and keeps exactly one charge."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing import meter, selectors
from billing.models import EgressCharge, Statement
from scheduler.models import Allocation, Job, Node
from scheduler.transitions import (
    JobStart,
    job_requeue_unstarted,
    job_run_started_late,
    job_start_many,
)

from .conftest import utc

pytestmark = pytest.mark.django_db

DEC = utc(2026, 12, 1).date()


def _start(job, clouds, now) -> int:
    """Start ``job`` on the cloud's node c1, GPU 0, as the loop does; returns its attempt."""
    job_start_many(
        starts=[JobStart(job.pk, clouds["cloud"].pk, {"c1": [0]})],
        nodes={"c1": Node.objects.get(name="c1")},
        now=now,
    )
    return Job.objects.get(pk=job.pk).attempts


def _charges(job):
    return list(EgressCharge.objects.filter(job=job).values_list("attempt", "cost", "time"))


@pytest.fixture
def ghost(c4, clouds, make_job, price):
    """Job "ghost" reading c4 (800 GB, $0.02/GB from archive: $16 to move to the cloud), placed
    on the cloud at 10:00 and metered at 10:04 while the cluster keeps its run pending."""
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job(name="ghost", state="pending", dataset="c4")
    attempt = _start(job, clouds, utc(2026, 12, 1, 10))
    meter.meter_run(now=utc(2026, 12, 1, 10, 4))
    assert _charges(job) == [(attempt, Decimal("16.000000"), utc(2026, 12, 1, 10))]
    return Job.objects.get(pk=job.pk)


def test_a_run_the_cluster_never_started_is_charged_no_egress(ghost, clouds, alice, api_as):
    assert job_requeue_unstarted(job=ghost, now=utc(2026, 12, 1, 10, 5), reason="kept pending")
    meter.meter_run(now=utc(2026, 12, 1, 10, 6))

    assert _charges(ghost) == []
    body = api_as(alice).get("/api/v1/billing/costs/?team=vision&month=2026-12").json()
    assert (body["spend"], body["egress"]["cost"], body["egress"]["charges"]) == (
        "0.00",
        "0.00",
        [],
    )
    view = selectors.statement_view(statement=Statement.objects.get(team__slug="vision", month=DEC))
    assert (view.total, view.egress_lines) == (Decimal("0.00"), [])

    # Placed again and run this time: that attempt moved the data, once.
    attempt = _start(ghost, clouds, utc(2026, 12, 1, 11))
    meter.meter_run(now=utc(2026, 12, 1, 12))
    meter.meter_run(now=utc(2026, 12, 1, 12))
    assert attempt == 2
    assert _charges(ghost) == [(2, Decimal("16.000000"), utc(2026, 12, 1, 11))]
    body = api_as(alice).get("/api/v1/billing/costs/?team=vision&month=2026-12").json()
    assert (body["spend"], body["gpu_spend"], body["egress"]["cost"]) == ("19.60", "3.60", "16.00")


def test_an_unstarted_run_the_meter_first_sees_ended_is_charged_nothing(
    c4, clouds, make_job, price
):
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    job = make_job(name="ghost", state="pending", dataset="c4")
    _start(job, clouds, utc(2026, 12, 1, 10))
    job.refresh_from_db()
    assert job_requeue_unstarted(job=job, now=utc(2026, 12, 1, 10, 5), reason="kept pending")
    result = meter.meter_run(now=utc(2026, 12, 1, 10, 6))
    assert (result.egress_rows, _charges(job)) == (0, [])


def test_a_run_the_cluster_started_late_keeps_one_charge(ghost, clouds):
    assert job_run_started_late(
        job=ghost, started_at=utc(2026, 12, 1, 10, 3), now=utc(2026, 12, 1, 10, 5)
    )
    meter.meter_run(now=utc(2026, 12, 1, 10, 6))
    meter.meter_run(now=utc(2026, 12, 1, 11))

    assert _charges(ghost) == [(1, Decimal("16.000000"), utc(2026, 12, 1, 10))]
    assert Allocation.objects.filter(job=ghost, ended_at__isnull=True).count() == 1
