"""Samples an agent sends late (a network delay, a retry after an outage) are rolled up into
their own minute, per node, after other nodes' rollups moved on: idle flags, idle billing and
the thermal rule see them. Rolling up again changes nothing."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.models import Allocation, Job, Node
from scheduler.states import JobState
from telemetry.health_scoring import health_evaluate
from telemetry.idle import idle_evaluate
from telemetry.models import GpuRollup, GpuRollupPending
from telemetry.rollups import rollup_build
from telemetry.selectors import job_idle_gpu_seconds
from telemetry.services import samples_ingest

from .conftest import make_sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def now():
    return timezone.now().replace(second=30, microsecond=0)


def every_minute(node, gpus, first, last, now, **over):
    """One sample per GPU per minute, ``first``..``last`` minutes before ``now``, one batch."""
    samples = [
        make_sample(gpu=g, at=now - timedelta(minutes=m), **over)
        for m in range(first, last + 1)
        for g in gpus
    ]
    return samples_ingest(node=node, body={"samples": samples}, now=now)


def on_time(node, gpus, minutes, now, **over):
    """An agent on time: each minute's samples sent (and rolled up by the tick) that minute."""
    for m in range(minutes, 0, -1):
        tick = now - timedelta(minutes=m - 1)
        every_minute(node, gpus, 1, 1, tick, **over)
        rollup_build(now=tick)


def ranges_in(sql):
    """The time ranges a raw read asks for: of several nodes, or of one node's (node, time)."""
    return sql.count('"telemetry_gpusample"."time" >=') + sql.count(
        '"telemetry_gpusample"."time") >='
    )


def rollups(node):
    return list(
        GpuRollup.objects.filter(node=node)
        .order_by("bucket", "gpu_index")
        .values_list("bucket", "gpu_index", "samples", "util_avg", "throttled")
    )


def test_a_late_batch_is_rolled_up_idle_flagged_and_billed(platform, priorities, cluster, now):
    n1, n2 = cluster.nodes.get(name="n1"), cluster.nodes.get(name="n2")
    started = now - timedelta(minutes=40)
    job = Job.objects.create(
        team=platform["alice"].memberships.first().team,
        submitter=platform["alice"],
        name="idler",
        workers=1,
        gpus_per_worker=2,
        priority_class=priorities["research"],
        state=JobState.RUNNING,
        submitted_at=started,
        started_at=started,
        attempts=1,
    )
    for g in (0, 1):
        Allocation.objects.create(job=job, node=n1, gpu_index=g, started_at=started)
    # n2's agent is on time: the rollups move on, minute by minute, to now.
    on_time(n2, range(8), 35, now, utilization=80.0)
    assert GpuRollup.objects.filter(node=n2).count() == 35 * 8
    # n1's agent was cut off for 35 minutes; its buffer arrives now, in one batch.
    every_minute(n1, (0, 1), 1, 35, now, utilization=1.5)
    tick = now + timedelta(minutes=1)
    with CaptureQueriesContext(connection) as queries:
        rollup_build(now=tick)

    assert len(rollups(n1)) == 35 * 2  # every late minute, in its own minute
    # Read one time range at a time (PostgreSQL plans an OR of ranges as a whole-table scan).
    reads = [q["sql"] for q in queries.captured_queries if "telemetry_gpusample" in q["sql"]]
    assert reads and all(ranges_in(r) == 1 for r in reads)
    assert {(n, u) for _, _, n, u, _ in rollups(n1)} == {(1, 1.5)}
    assert idle_evaluate(now=tick) == ([job.pk], [])
    idle = job_idle_gpu_seconds(start=started, end=tick, job_ids=[job.pk])
    assert idle == {job.pk: 35 * 2 * 60.0}
    # Idempotent: nothing left to roll, and the rows stay as they are.
    before = rollups(n1), rollups(n2)
    assert rollup_build(now=tick) == 0
    assert (rollups(n1), rollups(n2)) == before
    assert not GpuRollupPending.objects.exists()


def test_late_samples_join_their_minute_without_double_counting(node1, now):
    on_time(node1, (0,), 10, now, utilization=10.0)
    first = dict(((b, g), (n, u)) for b, g, n, u, _ in rollups(node1))
    # Second samples for minutes 8..3 ago arrive late; one batch is retried (a repeat).
    minutes = [now - timedelta(minutes=m, seconds=20) for m in range(3, 9)]
    late = {"samples": [make_sample(gpu=0, at=at, utilization=30.0) for at in minutes]}
    tick = now + timedelta(minutes=1)
    samples_ingest(node=node1, body=late, now=tick)
    assert samples_ingest(node=node1, body=late, now=tick).duplicate is True
    rollup_build(now=tick)
    rolled = {(b, g): (n, u) for b, g, n, u, _ in rollups(node1)}
    for at in minutes:
        key = (at.replace(second=0), 0)
        assert first[key] == (1, 10.0) and rolled[key] == (2, 20.0)
    # Rolled again from scratch (a re-marked minute), the same rows.
    GpuRollupPending.objects.bulk_create(
        GpuRollupPending(node=node1, minute=b, marked_at=tick) for b, _ in rolled
    )
    rollup_build(now=tick)
    assert {(b, g): (n, u) for b, g, n, u, _ in rollups(node1)} == rolled


def test_late_hot_samples_reach_the_thermal_rule(cluster, now):
    n1, n3 = cluster.nodes.get(name="n1"), cluster.nodes.get(name="n3")
    on_time(n1, range(8), 12, now)
    every_minute(n3, range(8), 1, 12, now, temperature_c=91)  # late, and throttling
    tick = now + timedelta(minutes=1)
    rollup_build(now=tick)
    verdict = health_evaluate(now=tick, node_ids=[n3.pk])[n3.pk]
    assert "thermal throttling in 100% of samples" in verdict.reasons


def test_a_tick_reads_only_the_marked_minutes(cluster, now):
    nodes = list(cluster.nodes.order_by("pk"))
    for node in nodes:
        every_minute(node, range(8), 1, 30, now - timedelta(minutes=5))
    rollup_build(now=now)
    tick = now + timedelta(minutes=1)
    for node in nodes:
        every_minute(node, range(8), 1, 1, tick)  # the steady state: a minute per node
    with CaptureQueriesContext(connection) as queries:
        assert rollup_build(now=tick + timedelta(minutes=1)) == 4 * 8
    (read,) = [q["sql"] for q in queries.captured_queries if "telemetry_gpusample" in q["sql"]]
    # One time range (the marked minute) for the marked nodes, not the raw table since a
    # watermark.
    assert ranges_in(read) == 1


@pytest.mark.django_db(transaction=True)
def test_a_batch_in_flight_while_the_rollup_runs_is_read_or_marked_again(cluster, now):
    """A late batch for a minute the rollup is clearing, still uncommitted: the rollup waits for
    it and reads its samples (PostgreSQL: real locks between two connections)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks between connections: PostgreSQL")
    node = cluster.nodes.get(name="n1")
    minute = now - timedelta(minutes=2)
    samples_ingest(node=node, body={"samples": [make_sample(gpu=0, at=minute)]}, now=now)
    marked, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def late_batch():
        try:
            with transaction.atomic():  # held open: the batch is stored and marked, uncommitted
                late = make_sample(gpu=0, at=minute + timedelta(seconds=10), utilization=90.0)
                samples_ingest(node=node, body={"samples": [late]}, now=now)
                marked.set()
                go.wait(30)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    def rollup():
        try:
            rollup_build(now=now)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    batch, roll = threading.Thread(target=late_batch), threading.Thread(target=rollup)
    batch.start()
    assert marked.wait(30)
    roll.start()
    with connection.cursor() as cursor:  # until the rollup waits on the batch's lock
        for _ in range(300):
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the rollup did not wait for the batch in flight")
    go.set()
    batch.join(30)
    roll.join(30)
    assert not errors
    r = GpuRollup.objects.get(node=node, gpu_index=0, bucket=minute.replace(second=0))
    assert (r.samples, r.util_avg) == (2, 70.0)
    assert not GpuRollupPending.objects.exists()


def test_a_late_backlog_reads_only_its_nodes_samples(cluster, now):
    """A node's late minutes are read through the (node, time) index: its own samples only, not
    every node's samples of those minutes (through the time index, filtered: 100x the rows here,
    1,000x on a big cluster). The plans of the reads rollup_build really makes, on a table of
    100 nodes with statistics."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's plans")
    n1 = cluster.nodes.get(name="n1")
    Node.objects.bulk_create(
        Node(cluster=cluster, name=f"x{i:03d}", gpu_model=n1.gpu_model, gpu_count=8)
        for i in range(96)
    )
    node_ids = list(cluster.nodes.values_list("pk", flat=True))
    start, end = now - timedelta(minutes=40), now - timedelta(minutes=1)
    with connection.cursor() as cursor:  # 40 minutes of 100 nodes x 2 GPUs, every 5 s
        cursor.execute(
            """
            INSERT INTO telemetry_gpusample (node_id, gpu_index, time, utilization,
                memory_used_mib, memory_total_mib, temperature_c, power_w, throttle_thermal)
            SELECT n, g, t, 50, 1000, 81559, 60, 300.0, false
            FROM generate_series(%s::timestamptz, %s::timestamptz, interval '5 seconds') t,
                 unnest(%s::int[]) n, generate_series(0, 1) g
            """,
            [start, end, node_ids],
        )
        cursor.execute("ANALYZE telemetry_gpusample")
    every_minute(n1, (0, 1), 2, 36, now)  # n1's agent resends 35 minutes, late
    with CaptureQueriesContext(connection) as queries:
        rollup_build(now=now)
    reads = [q["sql"] for q in queries.captured_queries if "telemetry_gpusample" in q["sql"]]
    assert reads
    for read in reads:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {read}")
            plan = cursor.fetchone()[0][0]["Plan"]
        steps = list(_steps_of(plan))
        assert {s["Index Name"] for s in steps if "Index Name" in s} == {"gpusample_node_time"}
        table = [s for s in steps if s.get("Relation Name") == "telemetry_gpusample"]
        assert [s["Node Type"] for s in table] != ["Seq Scan"], table
        # Nothing read and thrown away: the rows read are n1's (its 2 GPUs x 35 minutes,
        # every 5 s, plus the 70 late samples).
        assert all(s.get("Rows Removed by Filter", 0) == 0 for s in table), table
        assert sum(s["Actual Rows"] for s in table) == 2 * 35 * 12 + 70


def _steps_of(plan):
    """Every node of a JSON plan."""
    yield plan
    for child in plan.get("Plans", []):
        yield from _steps_of(child)
