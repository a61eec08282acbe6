"""Billing of retired nodes and clusters (scheduler.retirement): a node retired while a job runs
on it bills that job to its end, exactly, and nothing after; its usage stays on the team's
statement under the cluster's name once the whole cluster is retired too."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import meter, selectors
from billing.calc import month_start
from billing.models import Statement, UsageRecord
from scheduler.models import Node, NodeState
from scheduler.retirement import cluster_retire, node_retire, retirements_finish
from scheduler.states import JobState
from scheduler.transitions import job_finish

from .conftest import utc

pytestmark = pytest.mark.django_db


def test_a_node_retired_under_a_running_job_bills_it_to_its_end_and_nothing_after(
    make_job, allocate, price, platform_admin
):
    price("h100", "on_demand", "3.60", utc(2026, 1, 1))
    t0 = utc(2026, 11, 10, 9)
    job = make_job(started_at=t0, attempts=1)
    for gpu in range(2):
        allocate(job, "n1", gpu, t0)
    n1 = Node.objects.get(name="n1")

    assert node_retire(user=platform_admin, node_id=n1.pk).state == NodeState.DRAINING
    meter.meter_run(now=t0 + timedelta(hours=1))
    assert job_finish(job=job, target=JobState.SUCCEEDED, now=t0 + timedelta(minutes=90))
    retirements_finish(now=t0 + timedelta(minutes=91), node_ids=[n1.pk])
    n1.refresh_from_db()
    assert n1.state == NodeState.RETIRED
    cluster_retire(user=platform_admin, name="test")
    for minutes in (120, 150, 180):
        meter.meter_run(now=t0 + timedelta(minutes=minutes))

    # 2 GPUs x 90 min at $3.60 per GPU-hour, all finalized, nothing after the end.
    rows = UsageRecord.objects.filter(job=job)
    assert sum(r.gpu_seconds for r in rows) == 2 * 90 * 60
    assert sum(r.cost for r in rows) == Decimal("10.800000")
    assert all(r.finalized for r in rows)
    assert max(r.hour for r in rows) < t0 + timedelta(minutes=90)
    statement = Statement.objects.get(team=job.team, month=month_start(t0))
    view = selectors.statement_view(statement=statement)
    assert [(line.cluster, line.gpu_hours, line.cost) for line in view.lines] == [
        ("test", Decimal("3.0000"), Decimal("10.80"))
    ]
