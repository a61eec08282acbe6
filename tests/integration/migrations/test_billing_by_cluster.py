"""Billing 0004/0005 (issue 25) upgrade metered usage: each usage row gets its allocation's
cluster (NULL when the allocation is gone), and the daily rollup is split by cluster with the
same totals; going back merges it again. Price rates keep their ids as platform-wide rates.

Runs on PostgreSQL when DATABASE_URL points there (CI), on SQLite otherwise.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Sum

pytestmark = pytest.mark.django_db(transaction=True)

BILLING_BEFORE = ("billing", "0003_gpu_model_in_catalogue")
DAY = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _before():
    """Every other app as today, billing before the change."""
    return [leaf for leaf in _latest() if leaf[0] != "billing"] + [BILLING_BEFORE]


def _fill(apps) -> dict:
    """Two hours on cluster c1 and one on c2 by live allocations, one hour whose allocation is
    gone; the daily rollup as the meter wrote it before (one row for all of them)."""
    user = apps.get_model("auth", "User").objects.create(username="upgrader")
    h100 = apps.get_model("catalogue", "GpuModel").objects.create(name="h100-80gb", memory_gib=80)
    team = apps.get_model("tenants", "Team").objects.create(slug="vision", name="Vision")
    pc = apps.get_model("tenants", "PriorityClass").objects.create(name="research", value=500)
    Cluster = apps.get_model("scheduler", "Cluster")
    Node = apps.get_model("scheduler", "Node")
    c1, c2 = Cluster.objects.create(name="c1"), Cluster.objects.create(name="c2")
    n1 = Node.objects.create(cluster=c1, name="n1", gpu_model=h100, gpu_count=8)
    n2 = Node.objects.create(cluster=c2, name="n2", gpu_model=h100, gpu_count=8)
    job = apps.get_model("scheduler", "Job").objects.create(
        name="train",
        team=team,
        submitter=user,
        priority_class=pc,
        gpu_model=h100,
        workers=1,
        gpus_per_worker=1,
        submitted_at=DAY,
    )
    Allocation = apps.get_model("scheduler", "Allocation")
    a1 = Allocation.objects.create(
        job=job, node=n1, gpu_index=0, started_at=DAY, ended_at=DAY + dt.timedelta(hours=2)
    )
    a2 = Allocation.objects.create(
        job=job, node=n2, gpu_index=0, started_at=DAY, ended_at=DAY + dt.timedelta(hours=1)
    )
    gone = a2.pk + 1000
    rate = apps.get_model("billing", "PriceRate").objects.create(
        gpu_model=h100,
        capacity="on_demand",
        effective_from=DAY - dt.timedelta(days=1),
        rate_per_gpu_hour=Decimal("2.0000"),
        created_at=DAY,
    )
    UsageRecord = apps.get_model("billing", "UsageRecord")
    for alloc_id, hours in ((a1.pk, 2), (a2.pk, 1), (gone, 1)):
        for h in range(hours):
            UsageRecord.objects.create(
                allocation_id=alloc_id,
                hour=DAY + dt.timedelta(hours=h),
                job=job,
                team=team,
                user=user,
                gpu_model=h100,
                capacity="on_demand",
                gpu_seconds=3600.0,
                cost=Decimal("2.000000"),
                idle_fraction=0.25,
                finalized=True,
            )
    apps.get_model("billing", "UsageDaily").objects.create(
        team=team,
        day=DAY.date(),
        gpu_model=h100,
        capacity="on_demand",
        gpu_seconds=4 * 3600.0,
        cost=Decimal("8.000000"),
        telemetry_gpu_seconds=4 * 3600.0,
        idle_gpu_seconds=3600.0,
        idle_cost=Decimal("2.000000"),
    )
    return {"c1": c1.pk, "c2": c2.pk, "a1": a1.pk, "a2": a2.pk, "gone": gone, "rate": rate.pk}


def test_usage_gets_its_cluster_and_the_daily_rollup_splits_with_the_same_totals():
    apps = _migrate(_before())
    ids = _fill(apps)
    try:
        apps = _migrate(_latest())
        UsageRecord = apps.get_model("billing", "UsageRecord")
        assert dict(
            UsageRecord.objects.values_list("allocation_id", "cluster_id").distinct()
        ) == {ids["a1"]: ids["c1"], ids["a2"]: ids["c2"], ids["gone"]: None}
        UsageDaily = apps.get_model("billing", "UsageDaily")
        split = {
            r.cluster_id: (r.gpu_seconds, r.cost, r.idle_gpu_seconds, r.idle_cost)
            for r in UsageDaily.objects.all()
        }
        assert split == {
            ids["c1"]: (7200.0, Decimal("4.000000"), 1800.0, Decimal("1.000000")),
            ids["c2"]: (3600.0, Decimal("2.000000"), 900.0, Decimal("0.500000")),
            None: (3600.0, Decimal("2.000000"), 900.0, Decimal("0.500000")),
        }
        rate = apps.get_model("billing", "PriceRate").objects.get(pk=ids["rate"])
        assert rate.cluster_id is None  # an existing rate is the platform-wide one

        apps = _migrate(_before())  # a rollback of the release merges the rollup again
        merged = apps.get_model("billing", "UsageDaily").objects.aggregate(
            s=Sum("gpu_seconds"), c=Sum("cost")
        )
        assert (merged["s"], merged["c"]) == (4 * 3600.0, Decimal("8.000000"))
        assert apps.get_model("billing", "UsageDaily").objects.count() == 1
    finally:
        _migrate(_latest())
