"""Benchmark: the statement close's "is the month fully metered?" check, and the meter's own
allocation queries, over a year of allocation history in PostgreSQL.

    .venv/bin/python benchmarks/billing_close_check.py                   # defaults below
    .venv/bin/python benchmarks/billing_close_check.py --allocations 200000 --repeat 15

It creates its own scratch database (``billing_close_<pid>`` on 127.0.0.1:5432, user postgres,
trust auth; ``--server`` to change), migrates it, loads a deterministic synthetic history with
COPY, prints each query's plan (``EXPLAIN (ANALYZE, BUFFERS)``) and its median time, and drops
the database afterwards (also on failure or Ctrl-C).

Data (seeded, ``--seed``): ``--allocations`` allocations from January to November 2026 (jobs of
1 to 8 GPUs, 1 to 72 hours, spread evenly over the eleven months), 12 leaf teams under 3
parents, every ended allocation metered and finalized as the meter leaves it; plus ``--live``
allocations still running on 30 November. Measured as of 1 December 2026, 00:05 UTC:
- close check: ``statements.unmetered_allocations`` for the research subtree (3 teams) and
  November: the query ``statement_close`` runs under its row locks;
- meter window: the allocations ``meter_run`` reads each run (live, or ended within the
  lookback, not finalized);
- meter backlog: the ended allocations older than the lookback it has not finalized (one
  batch of the hourly sweep; absent before the sweep existed): without the sweeps' mark (the
  whole history, as every sweep searched before the mark) and with it (after two sweeps an
  hour apart, as the hourly task leaves it); and the whole sweep with the mark.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.billing_dashboard import PARENTS, TEAM_WEIGHTS, setup_django  # noqa: E402
from benchmarks.scratch_db import create_database, drop_database  # noqa: E402

HISTORY_START = datetime(2026, 1, 1, tzinfo=UTC)
HISTORY_END = datetime(2026, 12, 1, tzinfo=UTC)
NOW = HISTORY_END + timedelta(minutes=5)
NODES = 128


def load(allocations_wanted: int, live: int, seed: int) -> dict:
    """Teams, users, nodes and jobs through the ORM; allocations and their meters with COPY."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from catalogue.models import GpuModel
    from scheduler.models import Cluster, Job, Node
    from tenants.models import Membership, PriorityClass, Team

    rng = random.Random(seed)
    model = GpuModel.objects.create(name="h100-80gb")
    cluster = Cluster.objects.create(name="bench")
    nodes = Node.objects.bulk_create(
        [Node(cluster=cluster, name=f"n{i}", gpu_model=model, gpu_count=8) for i in range(NODES)]
    )
    priority = PriorityClass.objects.create(name="research", value=500)
    teams = {}
    for parent, children in PARENTS.items():
        teams[parent] = Team.objects.create(slug=parent, name=parent.title())
        for child in children:
            teams[child] = Team.objects.create(slug=child, name=child.title(), parent=teams[parent])
    users = {}
    for slug in TEAM_WEIGHTS:
        users[slug] = get_user_model().objects.create_user(username=f"user-{slug}", password="x")
        Membership.objects.create(user=users[slug], team=teams[slug], role="member")

    slugs = list(TEAM_WEIGHTS)
    weights = [TEAM_WEIGHTS[s] for s in slugs]
    span_s = int((HISTORY_END - HISTORY_START).total_seconds())
    # (team, start, end or None, gpus) per job until the allocation budget is met.
    shapes: list[tuple[str, datetime, datetime | None, int]] = []
    total = 0
    while total < allocations_wanted:
        gpus = rng.choice([1, 1, 2, 4, 8, 8])
        start = HISTORY_START + timedelta(seconds=rng.randrange(span_s))
        end = min(start + timedelta(seconds=rng.randint(3600, 72 * 3600)), HISTORY_END)
        shapes.append((rng.choices(slugs, weights)[0], start, end, gpus))
        total += gpus
    for _ in range(live // 8):
        shapes.append(("vision", HISTORY_END - timedelta(hours=6), None, 8))
    jobs = Job.objects.bulk_create(
        [
            Job(
                team=teams[slug],
                submitter=users[slug],
                name=f"{slug}-{i}",
                workers=1,
                gpus_per_worker=gpus,
                priority_class=priority,
                submitted_at=start,
                started_at=start,
                state="running" if end is None else "succeeded",
            )
            for i, (slug, start, end, gpus) in enumerate(shapes)
        ],
        batch_size=5000,
    )
    allocations = io.StringIO()
    meters = io.StringIO()
    live_node = 0
    alloc_id = 0
    for job, (_, start, end, gpus) in zip(jobs, shapes, strict=True):
        if end is None:  # one whole node per live job: the one-live-holder constraint holds
            node_ids, live_node = [nodes[live_node].pk] * gpus, live_node + 1
        else:
            node_ids = [rng.choice(nodes).pk] * gpus
        for gpu, node_id in enumerate(node_ids):
            alloc_id += 1
            ended = end.isoformat() if end else "\\N"
            allocations.write(
                f"{alloc_id}\t{job.pk}\t{node_id}\t{gpu}\t0\t1\t{start.isoformat()}\t{ended}\n"
            )
            # As the meter leaves them: ended ones finalized, live ones metered to 00:00.
            until = end or HISTORY_END
            meters.write(f"{alloc_id}\t{until.isoformat()}\t{'t' if end else 'f'}\n")
    with connection.cursor() as cursor:
        for table, columns, buffer in (
            (
                "scheduler_allocation",
                "id, job_id, node_id, gpu_index, worker_index, attempt, started_at, ended_at",
                allocations,
            ),
            ("billing_allocationmeter", "allocation_id, metered_until, finalized", meters),
        ):
            buffer.seek(0)
            with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                while chunk := buffer.read(1 << 20):
                    copy.write(chunk)
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('scheduler_allocation', 'id'), %s)", [alloc_id]
        )
        cursor.execute("ANALYZE")
    return {"allocations": alloc_id, "jobs": len(jobs), "live": live // 8 * 8}


def timed(fn, repeat: int) -> dict:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.95))], 2),
        "min_ms": round(samples[0], 2),
    }


def measure(repeat: int) -> dict:
    from billing import statements

    try:
        from billing import meter
    except ImportError:  # a checkout from before the meter had a module of its own
        from billing import services as meter
    from tenants.models import Team
    from tenants.tree import TeamTree

    research = Team.objects.get(slug="research")
    team_ids = TeamTree.load().subtree(research.pk)
    november = datetime(2026, 11, 1, tzinfo=UTC).date()
    queries = {
        "close check (research, 2026-11)": statements.unmetered_allocations_query(
            team_ids=team_ids, month=november
        ),
        "meter window": meter.meter_window_query(now=NOW),
    }
    sweep = None
    if hasattr(meter, "meter_backlog_search"):  # the sweep's mark
        from billing.models import BacklogMark

        batch = meter.BACKLOG_BATCH
        # No mark: what every sweep searched before the mark, and the first sweep still does.
        queries["meter backlog, no mark (whole history)"] = meter.meter_backlog_query(
            now=NOW, mark=BacklogMark(pk=1)
        )[:batch]
        # Two sweeps an hour apart leave the mark where the hourly task keeps it.
        meter.meter_backlog_run(now=NOW - timedelta(hours=2))
        meter.meter_backlog_run(now=NOW - timedelta(hours=1))
        queries["meter backlog, with the mark (hourly)"] = meter.meter_backlog_query(now=NOW)[
            :batch
        ]
        sweep = lambda: meter.meter_backlog_run(now=NOW)  # noqa: E731
    elif hasattr(meter, "meter_backlog_query"):  # absent before the backlog was metered
        # As the hourly sweep reads it: one batch per transaction.
        batch = getattr(meter, "BACKLOG_BATCH", 200)
        queries["meter backlog"] = meter.meter_backlog_query(now=NOW)[:batch]
    out = {}
    if sweep is not None:
        # The whole sweep (its batch query, then moving the mark), nothing left to meter.
        out["backlog sweep, with the mark (meter_backlog_run)"] = timed(sweep, repeat)
    for label, query in queries.items():
        plan = query.explain(analyze=True, buffers=True)
        out[label] = {
            "rows": len(list(query.values_list("pk", flat=True))),
            **timed(lambda q=query: list(q.values_list("pk", flat=True)), repeat),
            "plan": plan.splitlines(),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocations", type=int, default=200_000)
    parser.add_argument("--live", type=int, default=512, help="allocations running at the end")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch database (for EXPLAIN by hand)"
    )
    args = parser.parse_args()

    name = f"billing_close_{os.getpid()}"
    create_database(args.server, name)
    try:
        setup_django(args.server, name)
        started = time.perf_counter()
        built = load(args.allocations, args.live, args.seed)
        built["load_s"] = round(time.perf_counter() - started, 1)
        results = measure(args.repeat)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            pg_version = cursor.fetchone()[0]
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # django may not be set up if creation failed
            pass
        if args.keep:
            print(f"kept database {name}", file=sys.stderr)
        else:
            drop_database(args.server, name)

    report = {
        "built": built,
        "results": results,
        "machine": {
            "python": platform.python_version(),
            "postgresql": pg_version,
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
