"""Benchmark: one full scheduling cycle on PostgreSQL (snapshot from the database + decide + apply
in one transaction + backend reconcile) at 1,000 nodes × 8 GPUs and 10,000 pending jobs.

Usage (PostgreSQL on 127.0.0.1:5432 with trust auth; a scratch database is created and dropped):

    .venv/bin/python benchmarks/loop_cycle.py [--nodes 1000] [--pending 10000] [--running 3000]
        [--cycles 7] [--clusters 1]

``--clusters N`` (N > 1) spreads the nodes over N clusters in two regions with a price book, so
routing is in force (docs/routing.md) and a tenth of the pending jobs carry routing constraints.

It prints the median and p95 of each phase and of the whole cycle. The machine is shared and
noisy: compare medians from one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCRATCH_DB = "gpuplatform_bench_loop"

from benchmarks.scratch_db import django_on_scratch_database  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--running", type=int, default=3000)
    parser.add_argument("--cycles", type=int, default=7)
    parser.add_argument("--clusters", type=int, default=1, help="routing across N clusters")
    parser.add_argument("--profile", action="store_true", help="cProfile the last cycle")
    args = parser.parse_args()

    with django_on_scratch_database(SCRATCH_DB):
        run(args)


def run(args) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from catalogue.models import GpuModel
    from scheduler.loop.apply import apply_decisions
    from scheduler.loop.enforce import reconcile
    from scheduler.loop.observe import fail_jobs_out_of_bounds
    from scheduler.models import Allocation, Cluster, Job, Node
    from scheduler.policy import decide
    from scheduler.snapshot import build_snapshot
    from tenants.models import PriorityClass, Quota, Team

    rng = random.Random(1)
    now = timezone.now()
    user = get_user_model().objects.create_user("bench")
    models = [GpuModel.objects.create(name="h100-80gb"), GpuModel.objects.create(name="a100-40gb")]
    classes = [
        PriorityClass.objects.create(name=n, value=v)
        for n, v in (("production", 1000), ("research", 500), ("best-effort", 100))
    ]
    root = Team.objects.create(slug="org", name="org")
    teams = [
        Team.objects.create(slug=f"t{i}", name=f"t{i}", parent=root, fair_share_weight=1 + i % 3)
        for i in range(20)
    ]
    for team in teams[:10]:
        Quota.objects.create(
            team=team, gpu_model=models[0], guaranteed_gpus=300, borrow_limit_gpus=100
        )
    clusters = [
        Cluster.objects.create(
            name="bench" if c == 0 else f"bench-{c}",
            backend_kind="simulated",
            region="eu-west" if c % 2 == 0 else "us-east",
        )
        for c in range(max(args.clusters, 1))
    ]
    if args.clusters > 1:
        from billing.models import PriceRate

        for model, capacity, rate in (
            (models[0], "on_demand", "2.50"),
            (models[1], "on_demand", "1.60"),
            (models[0], "spot", "1.10"),
        ):
            PriceRate.objects.create(
                gpu_model=model,
                capacity=capacity,
                effective_from=now - timedelta(days=1),
                rate_per_gpu_hour=rate,
            )
    nodes = Node.objects.bulk_create(
        Node(
            cluster=clusters[i % len(clusters)],
            name=f"r{i // 20:02d}-n{i % 20:02d}",
            gpu_model=models[i % 2],
            gpu_count=8,
            rack=f"r{i // 20:02d}",
            nvlink_domain=f"r{i // 20:02d}-n{i % 20:02d}",
            zone="z1",
            fabric=f"ib{i // 200}",
        )
        for i in range(args.nodes)
    )

    def job(state, **extra):
        return Job(
            team=rng.choice(teams),
            submitter=user,
            name="bench",
            workers=1,
            gpus_per_worker=rng.choice([1, 1, 2, 4, 8]),
            priority_class=rng.choice(classes),
            preemptible=True,
            state=state,
            submitted_at=now - timedelta(seconds=rng.random() * 86400),
            runtime_limit_s=rng.choice([3600, 7200, 14400, 86400]),
            **extra,
        )

    # Running jobs packed onto the nodes; pending jobs with mixed gang sizes.
    running, allocations = [], []
    free = {n.pk: list(range(8)) for n in nodes}
    order = list(nodes)
    while len(running) < args.running:
        j = job(
            "running",
            started_at=now - timedelta(seconds=rng.random() * 7200),
            attempts=1,
            backend_ref="ref",
        )
        node = next((n for n in order if len(free[n.pk]) >= j.gpus_per_worker), None)
        if node is None:
            break
        j.gpu_model = node.gpu_model
        j.cluster_id = node.cluster_id
        running.append((j, node, [free[node.pk].pop() for _ in range(j.gpus_per_worker)]))
    Job.objects.bulk_create([r[0] for r in running], batch_size=2000)
    for j, node, gpus in running:
        allocations += [
            Allocation(job=j, node=node, gpu_index=g, started_at=j.started_at) for g in gpus
        ]
    Allocation.objects.bulk_create(allocations, batch_size=5000)
    pending = []
    for _ in range(args.pending):
        j = job("pending")
        if rng.random() < 0.1:
            j.workers, j.gpus_per_worker = rng.choice([2, 4, 8]), 8
        j.gpu_model = rng.choice(models + [None])
        if args.clusters > 1 and rng.random() < 0.1:
            j.routing = rng.choice(
                [{"regions": ["eu-west"]}, {"clusters": ["bench"]}, {"max_price_per_gpu_h": 2.0}]
            )
        pending.append(j)
    Job.objects.bulk_create(pending, batch_size=2000)
    busy = len(allocations)
    print(
        f"cluster: {args.nodes} nodes x 8 GPUs, {len(running)} running jobs on {busy} GPUs, "
        f"{args.pending} pending",
        flush=True,
    )

    phases = {
        "guard": [],
        "snapshot": [],
        "decide": [],
        "apply": [],
        "reconcile": [],
        "total": [],
    }
    queries = []
    profiler = None
    for cycle in range(args.cycles):
        if args.profile and cycle == args.cycles - 1:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        t0 = time.perf_counter()
        connection.queries_log.clear()
        # As run_cycle: live jobs outside the model's bounds are failed before the snapshot.
        fail_jobs_out_of_bounds(now=timezone.now())
        tg = time.perf_counter()
        snapshot, index = build_snapshot(now=timezone.now())
        t1 = time.perf_counter()
        decisions = decide(snapshot)
        t2 = time.perf_counter()
        result = apply_decisions(decisions, index=index, now=timezone.now(), snapshot=snapshot)
        t3 = time.perf_counter()
        reconcile(now=timezone.now())
        t4 = time.perf_counter()
        if profiler is not None:
            profiler.disable()
        for name, value in (
            ("guard", tg - t0),
            ("snapshot", t1 - tg),
            ("decide", t2 - t1),
            ("apply", t3 - t2),
            ("reconcile", t4 - t3),
            ("total", t4 - t0),
        ):
            phases[name].append(value * 1000)
        print(
            f"  cycle: started {len(result.started)}, pending {result.pending}, "
            f"total {(t4 - t0) * 1000:.0f} ms",
            flush=True,
        )
        # Free some GPUs for the next cycle, as finishing jobs would.
        with transaction.atomic():
            done = list(Job.objects.filter(state="running").order_by("?")[:50])
            Allocation.objects.filter(job__in=done, ended_at__isnull=True).update(
                ended_at=timezone.now()
            )
            Job.objects.filter(pk__in=[j.pk for j in done]).update(state="succeeded")
    del queries
    if profiler is not None:
        import pstats

        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    print(f"\n{'phase':<10} {'median ms':>10} {'p95 ms':>10}")
    for name, values in phases.items():
        values = sorted(values)
        p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
        print(f"{name:<10} {statistics.median(values):>10.1f} {p95:>10.1f}")


if __name__ == "__main__":
    main()
