"""Benchmark: the team cost dashboard's queries over 1,000,000 usage rows in PostgreSQL.

    .venv/bin/python benchmarks/billing_dashboard.py                    # defaults below
    .venv/bin/python benchmarks/billing_dashboard.py --rows 1000000 --repeat 15 --json out.json

It creates its own scratch database (``billing_bench_<pid>`` on 127.0.0.1:5432, user postgres,
trust auth; override with ``--server postgres://user@host:port``), migrates it, loads a
deterministic synthetic month of usage with COPY, times the selectors the portal pages call, and
drops the database afterwards (also on failure or Ctrl-C).

Data (seeded, ``--seed``): one month (December 2026, 744 hours) of per-(allocation, hour) usage
rows, ``--rows`` of them, from allocations of 1 to 72 hours on 1 to 8 GPUs; 12 leaf teams under 3
parents. The measured team ("vision") is the heaviest, with 25 % of the rows, so its dashboard
reads ~250,000 rows for the month: a team using ~340 GPUs around the clock. Half the rows carry a
telemetry idle fraction; 2 % of jobs have lost work.

Timed (wall clock, after one warm-up, median and p95 of ``--repeat`` runs; the series objects are
built, the Plotly figures are not):
- team dashboard: ``billing.dashboards.team_cost_dashboard`` for vision (rolled up: vision has no
  sub-teams here) — all of its queries;
- parent dashboard: the same for vision's parent (3 teams, ~40 % of the rows);
- admin overview: ``billing.dashboards.admin_cost_overview`` (all 1,000,000 rows, sorted table).
Then the meter itself: ``meter.meter_run`` with ``--live`` running allocations on top of the
month (the per-minute cost of keeping usage and rollups current).
Goal: team dashboard median <= 300 ms on the 2-core box.
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
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.scratch_db import create_database, drop_database  # noqa: E402

MONTH_START = datetime(2026, 12, 1, tzinfo=UTC)
HOURS = 744
TEAM_WEIGHTS = {  # leaf team -> share of usage
    "vision": 0.25,
    "speech": 0.08,
    "robotics": 0.07,
    "nlp": 0.10,
    "search": 0.08,
    "ads": 0.07,
    "infra": 0.06,
    "data": 0.06,
    "security": 0.05,
    "mobile": 0.06,
    "maps": 0.06,
    "health": 0.06,
}
PARENTS = {
    "research": ["vision", "speech", "robotics"],
    "product": ["nlp", "search", "ads", "mobile", "maps"],
    "platform": ["infra", "data", "security", "health"],
}
MODELS = [("h100-80gb", Decimal("4.00"), Decimal("1.60")), ("a100-40gb", Decimal("2.00"), None)]


def setup_django(server: str, name: str) -> None:
    os.environ["DATABASE_URL"] = f"{server.rstrip('/')}/{name}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def load(rows_wanted: int, seed: int) -> dict:
    """Reference rows through the ORM, then the usage rows with COPY. Returns what was built."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from billing.models import Budget, PriceRate
    from catalogue.models import GpuModel
    from scheduler.models import Cluster, Job, Node
    from tenants.models import Membership, PriorityClass, Team

    rng = random.Random(seed)
    models = {name: GpuModel.objects.create(name=name) for name, _, _ in MODELS}
    for name, on_demand, spot in MODELS:
        PriceRate.objects.create(
            gpu_model=models[name],
            capacity="on_demand",
            rate_per_gpu_hour=on_demand,
            effective_from=MONTH_START - timedelta(days=365),
        )
        if spot is not None:
            PriceRate.objects.create(
                gpu_model=models[name],
                capacity="spot",
                rate_per_gpu_hour=spot,
                effective_from=MONTH_START - timedelta(days=365),
            )
    cluster = Cluster.objects.create(name="bench")
    node = Node.objects.create(
        cluster=cluster, name="n0", gpu_model=models["h100-80gb"], gpu_count=8
    )
    del node
    priority = PriorityClass.objects.create(name="research", value=500)
    teams = {}
    for parent, children in PARENTS.items():
        teams[parent] = Team.objects.create(slug=parent, name=parent.title())
        for child in children:
            teams[child] = Team.objects.create(slug=child, name=child.title(), parent=teams[parent])
    User = get_user_model()
    users = {}
    for slug in TEAM_WEIGHTS:
        users[slug] = User.objects.create_user(username=f"user-{slug}", password="x")
        Membership.objects.create(user=users[slug], team=teams[slug], role="member")
    Budget.objects.create(team=teams["vision"], month=MONTH_START.date(), amount=Decimal(500000))

    # Allocations: (team, job, gpu model, spot, start hour, length) until the row budget is met.
    slugs = list(TEAM_WEIGHTS)
    weights = [TEAM_WEIGHTS[s] for s in slugs]
    allocations = []
    jobs_meta = []
    total = 0
    while total < rows_wanted:
        slug = rng.choices(slugs, weights)[0]
        gpus = rng.choice([1, 1, 2, 4, 8, 8])
        length = rng.randint(1, 72)
        start = rng.randrange(0, HOURS)
        length = min(length, HOURS - start)
        model = "h100-80gb" if rng.random() < 0.7 else "a100-40gb"
        spot = model == "h100-80gb" and rng.random() < 0.2
        jobs_meta.append((slug, f"{slug}-job-{len(jobs_meta)}", rng.random() < 0.02))
        job_index = len(jobs_meta) - 1
        for _ in range(gpus):
            allocations.append((job_index, slug, model, spot, start, length))
            total += length
    jobs = Job.objects.bulk_create(
        [
            Job(
                team=teams[slug],
                submitter=users[slug],
                name=name,
                workers=1,
                gpus_per_worker=1,
                priority_class=priority,
                submitted_at=MONTH_START,
                state="succeeded",
                lost_gpu_seconds=1800.0 if lost else 0.0,
            )
            for slug, name, lost in jobs_meta
        ],
        batch_size=2000,
    )
    rates = {(name, "on_demand"): od for name, od, _ in MODELS}
    rates.update({(name, "spot"): sp for name, _, sp in MODELS if sp is not None})
    buffer = io.StringIO()
    written = 0
    for alloc_id, (job_index, slug, model, spot, start, length) in enumerate(allocations, 1):
        capacity = "spot" if spot else "on_demand"
        rate = rates[(model, capacity)]
        for h in range(length):
            if written >= rows_wanted:
                break
            seconds = 3600 if 0 < h < length - 1 else rng.randint(60, 3600)
            cost = (rate * seconds / 3600).quantize(Decimal("0.000001"))
            idle = f"{rng.random() * 0.6:.3f}" if alloc_id % 2 else "\\N"
            hour = MONTH_START + timedelta(hours=start + h)
            buffer.write(
                f"{alloc_id}\t{hour.isoformat()}\t{jobs[job_index].pk}\t1\t{teams[slug].pk}\t"
                f"{users[slug].pk}\t{models[model].pk}\t{capacity}\t{seconds}\t{cost}\t0\t"
                f"{idle}\tt\n"
            )
            written += 1
    buffer.seek(0)
    columns = (
        "allocation_id, hour, job_id, attempt, team_id, user_id, gpu_model_id, capacity, "
        "gpu_seconds, cost, unpriced_gpu_seconds, idle_fraction, finalized"
    )
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY billing_usagerecord ({columns}) FROM STDIN") as copy:
            while chunk := buffer.read(1 << 20):
                copy.write(chunk)
        cursor.execute("ANALYZE")
    # Lost work through the real meter path (it only reads jobs and their events).
    from billing import lost_work, rollups, usage

    lost_work._meter_lost_work(now=MONTH_START + timedelta(days=20), result=usage.MeterResult())
    # The rollups the meter maintains incrementally, built here in one pass for the bulk load.
    started = time.perf_counter()
    daily, job_months = rollups.usage_rollup_rebuild(month=MONTH_START.date())
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {
        "rows": written,
        "allocations": len(allocations),
        "jobs": len(jobs),
        "rollup_rows": {"daily": daily, "job_month": job_months},
        "rollup_rebuild_s": round(time.perf_counter() - started, 1),
    }


def timed(fn, repeat: int) -> dict:
    from django.db import connection, reset_queries

    fn()  # warm-up (plans, caches)
    samples = []
    queries = 0
    for _ in range(repeat):
        reset_queries()
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
        queries = len(connection.queries)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 1),
        "p95_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.95))], 1),
        "min_ms": round(samples[0], 1),
        "queries": queries,
    }


def measure(repeat: int) -> dict:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db.models import Count

    from billing import dashboards
    from billing.models import UsageRecord

    settings.DEBUG = True  # count queries
    now = MONTH_START + timedelta(days=20, hours=12)
    month = MONTH_START.date()
    user = get_user_model().objects.get(username="user-vision")
    admin = get_user_model().objects.create_superuser(username="bench-admin", password="x")
    per_team = dict(
        UsageRecord.objects.values("team__slug")
        .annotate(n=Count("id"))
        .values_list("team__slug", "n")
    )
    from tenants.models import Membership, Team

    Membership.objects.create(user=user, team=Team.objects.get(slug="research"), role="viewer")
    results = {
        "team dashboard (vision)": timed(
            lambda: dashboards.team_cost_dashboard(
                user=user, team_slug="vision", month=month, now=now
            ),
            repeat,
        ),
        "parent dashboard (research = vision + speech + robotics)": timed(
            lambda: dashboards.team_cost_dashboard(
                user=user, team_slug="research", month=month, now=now
            ),
            repeat,
        ),
        "admin overview (all teams)": timed(
            lambda: dashboards.admin_cost_overview(user=admin, month=month, now=now), repeat
        ),
    }
    results["rows read"] = {
        "vision": per_team.get("vision", 0),
        "research subtree": sum(per_team.get(s, 0) for s in PARENTS["research"]),
        "all": sum(per_team.values()),
    }
    return results


def measure_meter(live: int) -> dict:
    """The per-minute meter run on top of the 1M-row month: ``live`` running allocations (one
    per GPU of ``live / 8`` nodes, vision's jobs) accrued for 12 hours on the first run, then one
    minute later (the steady state: one hour bucket per allocation, rollups of one day)."""
    from django.contrib.auth import get_user_model

    from billing import meter
    from catalogue.models import GpuModel
    from scheduler.models import Allocation, Cluster, Job, Node
    from tenants.models import PriorityClass, Team

    cluster = Cluster.objects.get(name="bench")
    model = GpuModel.objects.get(name="h100-80gb")
    team = Team.objects.get(slug="vision")
    user = get_user_model().objects.get(username="user-vision")
    priority = PriorityClass.objects.get(name="research")
    start = MONTH_START + timedelta(days=20)
    nodes = Node.objects.bulk_create(
        [
            Node(cluster=cluster, name=f"live-{i}", gpu_model=model, gpu_count=8)
            for i in range(live // 8)
        ]
    )
    jobs = Job.objects.bulk_create(
        [
            Job(
                team=team,
                submitter=user,
                name=f"live-{i}",
                workers=1,
                gpus_per_worker=8,
                priority_class=priority,
                submitted_at=start,
                state="running",
            )
            for i in range(len(nodes))
        ]
    )
    Allocation.objects.bulk_create(
        [
            Allocation(job=job, node=node, gpu_index=g, started_at=start)
            for job, node in zip(jobs, nodes, strict=True)
            for g in range(8)
        ]
    )
    out = {}
    now = start + timedelta(hours=12)
    for label, at in (("first run (12 h to accrue)", now), ("next run (+1 min)", now)):
        at = at if label.startswith("first") else now + timedelta(minutes=1)
        started = time.perf_counter()
        result = meter.meter_run(now=at)
        out[label] = {
            "ms": round((time.perf_counter() - started) * 1000, 1),
            "usage_rows_written": result.usage_rows,
        }
    samples = []
    for i in range(2, 7):
        started = time.perf_counter()
        meter.meter_run(now=now + timedelta(minutes=i))
        samples.append((time.perf_counter() - started) * 1000)
    out["steady state median ms (5 runs)"] = round(statistics.median(samples), 1)
    out["live allocations"] = len(nodes) * 8
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--live", type=int, default=512, help="running allocations to meter")
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    name = f"billing_bench_{os.getpid()}"
    create_database(args.server, name)
    try:
        setup_django(args.server, name)
        started = time.perf_counter()
        built = load(args.rows, args.seed)
        built["load_s"] = round(time.perf_counter() - started, 1)
        results = measure(args.repeat)
        results["meter_run"] = measure_meter(args.live)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            pg_version = cursor.fetchone()[0]
        connection.close()
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # django may not be set up if creation failed
            pass
        drop_database(args.server, name)

    report = {
        "built": built,
        "results": results,
        "machine": {
            "python": platform.python_version(),
            "postgresql": pg_version,
            "cpus": os.cpu_count(),
        },
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
