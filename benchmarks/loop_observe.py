"""Benchmark: the cycle's observe stage (``scheduler.loop.observe.sync_cluster``: the cluster's
nodes, its running jobs, their runs' accounts, the poll, each job's news, the stale-run sweep,
utilization) on PostgreSQL with many running jobs on a simulated cluster. It runs at the start
of every cycle, under the loop's lock; ``benchmarks/loop_cycle.py`` times the stages after it.

Usage (PostgreSQL on 127.0.0.1:5432 with trust auth; a scratch database is created and dropped):

    .venv/bin/python benchmarks/loop_observe.py [--nodes 1000] [--running 5000] [--repeat 7]
        [--profile]

Every running job has a live simulated run that lasts far beyond the benchmark, so each sync
finds the same jobs running and changes nothing: the cost of looking. Prints the median and p95
wall time of a sync, and the number of SQL queries of one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCRATCH_DB = "gpuplatform_bench_observe"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--running", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile the last sync")
    args = parser.parse_args()
    from benchmarks.scratch_db import django_on_scratch_database

    with django_on_scratch_database(SCRATCH_DB):
        run(args)


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    call_command("migrate", verbosity=0)
    from catalogue.models import GpuModel
    from scheduler.loop.observe import sync_cluster
    from scheduler.models import Allocation, Cluster, Job, Node, SimulatedRun
    from scheduler.states import JobState
    from tenants.models import PriorityClass, Team

    now = timezone.now()
    user = get_user_model().objects.create_user("bench")
    model = GpuModel.objects.create(name="h100-80gb")
    research = PriorityClass.objects.create(name="research", value=500)
    teams = [Team.objects.create(slug=f"t{i}", name=f"t{i}") for i in range(20)]
    cluster = Cluster.objects.create(name="bench", backend_kind="simulated")
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, name=f"n{i:04d}", gpu_model=model, gpu_count=8, rack=f"r{i // 20}")
        for i in range(args.nodes)
    )
    gpus = [(node, index) for node in nodes for index in range(8)]
    if args.running > len(gpus):
        raise SystemExit(f"--running {args.running} needs more than {args.nodes} nodes of 8 GPUs")
    started = now - timedelta(minutes=5)
    jobs = Job.objects.bulk_create(
        Job(
            team=teams[i % len(teams)],
            submitter=user,
            name=f"j{i}",
            command=["python", "train.py", f"--seed={i}"],
            env={"EPOCHS": "90", "LR": "3e-4"},
            workers=1,
            gpus_per_worker=1,
            gpu_model=model,
            priority_class=research,
            state=JobState.RUNNING,
            attempts=1,
            cluster=cluster,
            submitted_at=started,
            started_at=started,
            backend_ref=f"gp-{i}-a1",
            backend_accounts={"1": ""},
        )
        for i in range(args.running)
    )
    Allocation.objects.bulk_create(
        (
            Allocation(job=job, node=gpus[i][0], gpu_index=gpus[i][1], started_at=started)
            for i, job in enumerate(jobs)
        ),
        batch_size=5000,
    )
    SimulatedRun.objects.bulk_create(
        (
            SimulatedRun(
                cluster=cluster,
                job_id=str(job.pk),
                attempt=1,
                nodes=[gpus[i][0].name],
                started_at=started,
                service_time_s=10**9,
            )
            for i, job in enumerate(jobs)
        ),
        batch_size=5000,
    )
    print(f"{args.nodes} nodes x 8 GPUs, {args.running} running jobs", flush=True)

    times_ms = []
    queries = 0
    for repeat in range(args.repeat):
        profiler = None
        if args.profile and repeat == args.repeat - 1:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        with CaptureQueriesContext(connection) as captured:
            began = time.perf_counter()
            sync_cluster(Cluster.objects.get(pk=cluster.pk), now=timezone.now())
            times_ms.append((time.perf_counter() - began) * 1000)
        queries = len(captured)
        if profiler is not None:
            import pstats

            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(
                "scheduler|billing|telemetry|tenants", 40
            )
    # The sync's read of the running jobs, as it was (a full Job, with a team and a cluster
    # object, per row) and as it is (scheduler.loop.holders): the two in one run, alternating,
    # so their ratio holds on a noisy VM.
    from scheduler.loop.holders import holders_read

    reads: dict[str, list[float]] = {"full jobs": [], "rows (holders_read)": []}
    for _ in range(args.repeat):
        began = time.perf_counter()
        list(
            Job.objects.filter(cluster=cluster, state__in=[JobState.RUNNING, JobState.PREEMPTED])
            .exclude(backend_ref="")
            .select_related("team", "cluster")
        )
        reads["full jobs"].append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        holders_read(cluster)
        reads["rows (holders_read)"].append((time.perf_counter() - began) * 1000)
    for name, values in reads.items():
        print(f"running jobs read as {name}: median {statistics.median(values):.0f} ms")
    still_running = Job.objects.filter(state=JobState.RUNNING).count()
    assert still_running == args.running, f"the syncs changed jobs: {still_running} running"
    times_ms.sort()
    p95 = times_ms[min(len(times_ms) - 1, round(0.95 * (len(times_ms) - 1)))]
    print(
        f"sync_cluster: median {statistics.median(times_ms):.0f} ms, p95 {p95:.0f} ms, "
        f"{queries} queries (load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
