"""Telemetry 0002: the rollup now reads the minutes the ingest marks; the upgrade marks the
minutes the old rollup had still to read (from two minutes before its newest rollup on), so no
minute received before the upgrade is left out, and marks nothing it had rolled long ago.

Runs on PostgreSQL when DATABASE_URL points there (CI), on SQLite otherwise.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("telemetry", "0001_initial")


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def test_the_upgrade_marks_the_minutes_not_rolled_up_yet():
    try:
        apps = _migrate([leaf for leaf in _latest() if leaf[0] != "telemetry"] + [BEFORE])
        h100 = apps.get_model("catalogue", "GpuModel").objects.create(name="h100", memory_gib=80)
        cluster = apps.get_model("scheduler", "Cluster").objects.create(name="c1")
        node = apps.get_model("scheduler", "Node").objects.create(
            cluster=cluster, name="n1", gpu_model=h100, gpu_count=8
        )
        now = timezone.now().replace(second=30, microsecond=0)
        minute = dt.timedelta(minutes=1)
        newest = (now - 3 * minute).replace(second=0)
        sample = dict(
            node=node, gpu_index=0, utilization=1.0, memory_used_mib=1, memory_total_mib=2,
            temperature_c=40, power_w=1.0,
        )  # fmt: skip
        apps.get_model("telemetry", "GpuSample").objects.bulk_create(
            apps.get_model("telemetry", "GpuSample")(time=newest - m * minute, **sample)
            for m in range(-2, 10)  # from 9 minutes before the newest rollup to 2 after
        )
        apps.get_model("telemetry", "GpuRollup").objects.create(
            node=node, gpu_index=0, bucket=newest, samples=1, util_avg=1, util_max=1,
            memory_used_max_mib=1, memory_total_mib=2, temperature_max_c=40,
        )  # fmt: skip

        apps = _migrate(_latest())
        marked = apps.get_model("telemetry", "GpuRollupPending").objects.values_list(
            "node_id", "minute"
        )
        assert sorted(marked) == [(node.pk, newest + m * minute) for m in range(-2, 3)]
    finally:
        _migrate(_latest())
