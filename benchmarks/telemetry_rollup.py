"""Benchmark: what one rollup tick reads from a realistic raw table (samples marked by the ingest,
rolled per node-minute), in the steady state and with one node's late backlog.

    .venv/bin/python benchmarks/telemetry_rollup.py --database-url postgres://postgres@127.0.0.1:5432/mydb
    .venv/bin/python benchmarks/telemetry_rollup.py                  # a scratch database

The table: ``--nodes`` (100) x 8 GPUs, one sample per GPU per second for ``--hours`` (24) up to
two minutes ago (100 x 8 x 1 day = 69 M rows; the default raw retention keeps 6 h), plus a day
of one-minute rollups, all rolled up already (no marks). Filled with ``generate_series`` in
the database; the sample table is UNLOGGED while it is filled and for the measurements (reads
are what is measured; WAL would only slow the fill down) and emptied afterwards.

Measured (each ``--rounds`` times, median; the machine is shared):
1. steady: every node's agent sends its last minute; ``rollup_build`` rolls that minute;
2. late: the same, plus one node's last 35 minutes sent again late (an agent's retry after an
   outage); ``rollup_build`` rolls the late minutes of that node too;
3. the raw-table read of each (``EXPLAIN (ANALYZE, BUFFERS)``: rows read, buffers, time);
4. the ingest's extra statement (the marks of a 240-sample batch), median of 200;
5. with ``--insert-batches N``: the table made LOGGED again (as deployed), then the write of N
   240-sample batches (one node's 30 s, nodes in turn; the COPY and the marks, one transaction
   each, committed as the ingest commits them) with every index of the raw table, without
   ``gpusample_node_time``, and with it again (rebuilt): the per-batch cost of that index, in
   time and in WAL bytes written (which the machine's load does not blur).

The raw table is filled without its secondary indexes (whatever the migrations made), which are
then built once (minutes, not a quarter hour). Rows are laid out as the ingest writes them: each
node's 30 s batch (240 rows, one COPY) together, the batches of a window one node after another.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.scratch_db import create_database, drop_database  # noqa: E402

GPUS = 8


def setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


# (name, CREATE INDEX statement) of the raw table's secondary indexes, read before the fill.
INDEXES: list[tuple[str, str]] = []


def secondary_indexes() -> list[tuple[str, str]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'telemetry_gpusample' "
            "AND indexname <> 'telemetry_gpusample_pkey' ORDER BY indexname"
        )
        return cursor.fetchall()


def fill(nodes: int, hours: float, now: datetime) -> list[int]:
    from django.db import connection

    from catalogue.models import GpuModel
    from scheduler.models import Cluster, Node

    model, _ = GpuModel.objects.get_or_create(name="bench-h100", defaults={"memory_gib": 80})
    cluster = Cluster.objects.create(name=f"rollup-bench-{os.getpid()}", backend_kind="simulated")
    Node.objects.bulk_create(
        Node(cluster=cluster, name=f"b{i:04d}", gpu_model=model, gpu_count=GPUS)
        for i in range(nodes)
    )
    ids = list(cluster.nodes.order_by("pk").values_list("pk", flat=True))
    end = now.replace(second=0, microsecond=0) - timedelta(minutes=2)
    start = end - timedelta(hours=hours)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE telemetry_gpusample SET UNLOGGED")
        for name, _ in INDEXES:
            cursor.execute(f"DROP INDEX {name}")
        t0 = time.perf_counter()
        cursor.execute(
            """
            INSERT INTO telemetry_gpusample (node_id, gpu_index, time, utilization,
                memory_used_mib, memory_total_mib, temperature_c, power_w, throttle_thermal)
            SELECT n, g, t, (n * 7 + g * 13 + extract(epoch FROM t)::int) %% 100, 40000, 81559,
                   60, 300.0, false
            FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 second',
                                 interval '1 second') t,
                 unnest(%s::int[]) n, generate_series(0, 7) g
            ORDER BY floor(extract(epoch FROM t) / 30), n, t, g
            """,
            [start, end, ids],
        )
        print(f"filled {cursor.rowcount:,} samples in {time.perf_counter() - t0:.0f} s")
        cursor.execute(
            """
            INSERT INTO telemetry_gpurollup (node_id, gpu_index, bucket, samples, util_avg,
                util_max, memory_used_max_mib, memory_total_mib, temperature_max_c,
                power_avg_w, throttled)
            SELECT n, g, b, 60, 50, 99, 40000, 81559, 60, 300.0, 0
            FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 minute',
                                 interval '1 minute') b,
                 unnest(%s::int[]) n, generate_series(0, 7) g
            """,
            [start, end, ids],
        )
        print(f"rollups: {cursor.rowcount:,}")
        for name, definition in INDEXES:
            t1 = time.perf_counter()
            cursor.execute(definition)
            print(f"index {name} built in {time.perf_counter() - t1:.0f} s")
        # Hint bits and statistics as on a table that has been live for a while (the first
        # read after a bulk fill would otherwise rewrite every page).
        cursor.execute("VACUUM ANALYZE telemetry_gpusample")
        print(f"indexed and vacuumed in {time.perf_counter() - t0:.0f} s in all")
        cursor.execute(
            "SELECT c.relname, pg_size_pretty(pg_relation_size(c.oid)) FROM pg_class c "
            "WHERE c.relname LIKE 'gpusample%%' OR c.relname = 'telemetry_gpusample' "
            "ORDER BY c.relname"
        )
        print("sizes: " + ", ".join(f"{name} {size}" for name, size in cursor.fetchall()))
        cursor.execute("ANALYZE telemetry_gpurollup")
    return ids


def batch(node_id: int, first: datetime, seconds: int) -> dict:
    return {
        "samples": [
            {
                "gpu": g,
                "time": (first + timedelta(seconds=s)).timestamp(),
                "utilization": 50.0,
                "memory_used_mib": 1000,
                "memory_total_mib": 81559,
                "temperature_c": 60,
                "power_w": 300.0,
            }
            for s in range(seconds)
            for g in range(GPUS)
        ]
    }


def explain_read(now: datetime) -> str:
    """EXPLAIN ANALYZE of the raw-table reads rollup_build would make at ``now`` (one per
    range of marked minutes; the marks are kept)."""
    from django.db import connection

    from telemetry.models import GpuRollupPending, GpuSample
    from telemetry.rollups import _marked_ranges, _minute

    end = _minute(now - timedelta(seconds=20))
    marks = list(
        GpuRollupPending.objects.filter(minute__lt=end).values_list("pk", "node_id", "minute")
    )
    out = []
    for q in _marked_ranges(marks):
        sql, params = (
            GpuSample.objects.filter(q)
            .values_list("node_id", "gpu_index", "utilization")
            .query.sql_with_params()
        )
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) {sql}", params)
            out.extend(r[0] for r in cursor.fetchall())
    return "\n".join(out)


def measure(ids: list[int], now: datetime, rounds: int) -> None:
    from django.core.cache import cache
    from django.db import transaction

    from scheduler.models import Node
    from telemetry.models import GpuRollupPending
    from telemetry.rollups import rollup_build
    from telemetry.services import _mark_unrolled, samples_ingest

    nodes = {n.pk: n for n in Node.objects.filter(pk__in=ids)}
    tick = now.replace(second=30, microsecond=0)
    last = tick.replace(second=0) - timedelta(minutes=1)
    late = tick.replace(second=0) - timedelta(minutes=36)
    for label, extra in (("steady", False), ("late", True)):
        times, written = [], []
        for _ in range(rounds):
            # A new round is new batches: forget the last round's (the ingest's duplicate
            # check and the nodes' per-minute budgets live in the cache).
            cache.clear()
            for pk in ids:  # every node's last minute
                samples_ingest(node=nodes[pk], body=batch(pk, last, 60), now=tick)
            if extra:  # one node's 35 minutes again, late (a retry after an outage)
                body = batch(ids[0], late, 35 * 60)
                for i in range(0, len(body["samples"]), 5000):
                    part = {"samples": body["samples"][i : i + 5000]}
                    samples_ingest(node=nodes[ids[0]], body=part, now=tick)
            if _ == 0:
                print(f"\n{label}: marks {GpuRollupPending.objects.count():,}")
                print(explain_read(tick))
            t0 = time.perf_counter()
            written.append(rollup_build(now=tick))
            times.append(time.perf_counter() - t0)
        print(
            f"{label}: rollup_build median {statistics.median(times) * 1000:.0f} ms "
            f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}), rows {written[0]:,}"
        )
    samples = [
        (g, (last + timedelta(seconds=s)).timestamp(), 50.0, 1000, 81559, 60, 300.0, False)
        for s in range(30)
        for g in range(GPUS)
    ]
    marks = []
    for _ in range(200):
        with transaction.atomic():
            t0 = time.perf_counter()
            _mark_unrolled(ids[1], samples, tick)
            marks.append(time.perf_counter() - t0)
    print(
        f"ingest: the marks of a 240-sample batch, median {statistics.median(marks) * 1e3:.2f} ms"
    )


def insert_cost(ids: list[int], now: datetime, batches: int) -> None:
    """The write of ``batches`` 240-sample batches, with and without the (node, time) index."""
    from django.db import connection, transaction

    from telemetry.services import _insert_samples, _mark_unrolled

    with connection.cursor() as cursor:
        t0 = time.perf_counter()
        cursor.execute("ALTER TABLE telemetry_gpusample SET LOGGED")
        print(f"\ntable made LOGGED in {time.perf_counter() - t0:.0f} s")
    first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    written = 0

    def wal_lsn() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_insert_lsn()")
            return cursor.fetchone()[0]

    def run(label: str) -> None:
        nonlocal written
        times = []
        first_lsn = wal_lsn()
        for _ in range(batches):
            node_id = ids[written % len(ids)]
            start = (first + timedelta(seconds=30 * (written // len(ids)))).timestamp()
            samples = [
                (g, start + s, 50.0, 1000, 81559, 60, 300.0, False)
                for s in range(30)
                for g in range(GPUS)
            ]
            t0 = time.perf_counter()
            with transaction.atomic():
                _insert_samples(node_id, samples, durable=False)
                _mark_unrolled(node_id, samples, now)
            times.append(time.perf_counter() - t0)
            written += 1
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", [first_lsn])
            wal_bytes = float(cursor.fetchone()[0])
        times.sort()
        print(
            f"insert {label}: a 240-sample batch, median {statistics.median(times) * 1e3:.2f} ms, "
            f"p95 {times[int(len(times) * 0.95)] * 1e3:.2f} ms, WAL {wal_bytes / batches:,.0f} "
            f"bytes ({batches} batches)"
        )

    node_time = dict(INDEXES).get("gpusample_node_time")
    run("with every index")
    if node_time is None:
        return
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX gpusample_node_time")
    run("without gpusample_node_time")
    with connection.cursor() as cursor:
        t0 = time.perf_counter()
        cursor.execute(node_time)
        print(f"gpusample_node_time rebuilt in {time.perf_counter() - t0:.0f} s")
    run("with every index, again")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="an existing database (else a scratch one)")
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--insert-batches", type=int, default=0)
    args = parser.parse_args()
    scratch = None if args.database_url else f"rollup_bench_{os.getpid()}"
    if scratch:
        create_database(args.server, scratch)
    try:
        setup(args.database_url or f"{args.server.rstrip('/')}/{scratch}")
        from django.conf import settings
        from django.db import connection

        # A day of samples: keep all of it in the raw retention for the measurement.
        settings.TELEMETRY_RAW_RETENTION_SECONDS = int(args.hours * 3600) + 3600
        now = datetime.now(UTC)
        INDEXES.extend(secondary_indexes())
        try:
            ids = fill(args.nodes, args.hours, now)
            measure(ids, now, args.rounds)
            if args.insert_batches:
                insert_cost(ids, now, args.insert_batches)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE telemetry_gpusample, telemetry_gpurollup")
                cursor.execute("TRUNCATE telemetry_gpurolluppending")
                cursor.execute("ALTER TABLE telemetry_gpusample SET LOGGED")
                for _, definition in INDEXES:
                    cursor.execute(definition.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS"))
            from scheduler.models import Cluster

            Cluster.objects.filter(name=f"rollup-bench-{os.getpid()}").delete()
    finally:
        if scratch:
            drop_database(args.server, scratch)


if __name__ == "__main__":
    main()
