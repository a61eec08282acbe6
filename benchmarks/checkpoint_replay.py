"""Replay with node failures and spot interruptions: work lost with users' checkpoint intervals
against the advised (Young/Daly) intervals learned from the replay's own history.

Jobs (duration, GPUs) come from the Microsoft ITP traces (../shared/traces). Each job runs on its
own, without queueing (what is measured is the waste of one run, not the queue): on
``ceil(gpus / 8)`` nodes, a share of the jobs on spot capacity. Interruptions are Poisson: each
node fails at ``node_mtbf_h``, each spot node is reclaimed at ``spot_mtbi_h``; an interrupted run
resumes from its last checkpoint after ``restart_s``. Writing a checkpoint costs the job
``checkpoint_cost_s`` (drawn per job). The traces do not say how often users checkpoint; their
intervals are drawn from what users type (30 min, 1 h, 2 h, 4 h, 8 h).

The first half of the jobs (by submission) is the history: the interruptions seen there per
running hour, per pool (capacity type x team; ITP has one GPU model), are the observed rates, as
``scheduler.checkpoint_advice`` reads them from requeues. The second half runs twice with the same
random interruptions: once with the users' intervals, once with ``daly_interval_s(cost, 1 /
observed rate)``. Reported: GPU-hours lost (work since the last checkpoint at each interruption,
plus time spent writing checkpoints), per policy, medians over seeds.

    .venv/bin/python benchmarks/checkpoint_replay.py [--clusters cluster04,cluster07] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.checkpoint_interval import daly_interval_s  # noqa: E402
from scheduler.simulation.traces import default_traces_dir, load_itp  # noqa: E402

USER_INTERVALS_S = (1800, 3600, 7200, 14400, 28800)


def run_job(
    work_s: float,
    interval_s: float,
    cost_s: float,
    rate_per_s: float,
    restart_s: float,
    rng: random.Random,
) -> tuple[float, int, float]:
    """Run ``work_s`` of work checkpointing every ``interval_s`` of work; returns (seconds wasted
    (lost work + checkpoint writing + restarts), interruptions, running seconds)."""
    done = 0.0  # checkpointed work
    wasted = 0.0
    running = 0.0
    interruptions = 0
    while done < work_s - 1e-9:
        # One segment: work until the next checkpoint (or the end), then write it.
        segment = min(interval_s, work_s - done)
        needs = segment + (cost_s if done + segment < work_s - 1e-9 else 0.0)
        until_interrupt = rng.expovariate(rate_per_s) if rate_per_s > 0 else math.inf
        if until_interrupt >= needs:
            running += needs
            done += segment
            wasted += needs - segment
            continue
        interruptions += 1
        running += until_interrupt + restart_s
        wasted += until_interrupt + restart_s
    return wasted, interruptions, running


def replay(cluster: str, seed: int, args) -> dict:
    path = default_traces_dir() / "microsoft-itp-elasticflow" / f"{cluster}.csv"
    jobs = [j for j in load_itp(path) if j.duration >= 60]
    rng = random.Random(seed)
    setup = []
    for job in jobs:
        nodes = max(1, math.ceil(job.gpus / 8))
        spot = rng.random() < args.spot_share
        rate = nodes / (args.node_mtbf_h * 3600) + (
            nodes / (args.spot_mtbi_h * 3600) if spot else 0.0
        )
        setup.append(
            {
                "job": job,
                # As the platform pools observations: GPU model (one in ITP) x capacity x team.
                "pool": (spot, job.tenant),
                "rate": rate,
                "cost": rng.uniform(args.cost_min_s, args.cost_max_s),
                "user": rng.choice(USER_INTERVALS_S),
                "seed": rng.getrandbits(32),
            }
        )
    half = len(setup) // 2
    # History: the first half runs with the users' intervals; what was seen per pool.
    seen: dict[tuple, list[float]] = {}
    for s in setup[:half]:
        _, interrupts, running = run_job(
            s["job"].duration,
            s["user"],
            s["cost"],
            s["rate"],
            args.restart_s,
            random.Random(s["seed"]),
        )
        pool = seen.setdefault(s["pool"], [0, 0.0])
        pool[0] += interrupts
        pool[1] += running / 3600
    lost = {"users": 0.0, "advised": 0.0}
    work_gpu_h = 0.0
    for s in setup[half:]:
        job = s["job"]
        work_gpu_h += job.duration * job.gpus / 3600
        count, hours = seen.get(s["pool"], [0, 0.0])
        advised = daly_interval_s(s["cost"], hours * 3600 / count) if count and hours else s["user"]
        for name, interval in (("users", s["user"]), ("advised", advised)):
            wasted, _, _ = run_job(
                job.duration,
                interval,
                s["cost"],
                s["rate"],
                args.restart_s,
                random.Random(s["seed"]),
            )
            lost[name] += wasted * job.gpus / 3600
    return {"jobs": len(setup) - half, "work_gpu_h": work_gpu_h, **lost}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="cluster04,cluster07")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--node-mtbf-h", type=float, default=24 * 30.0)
    parser.add_argument("--spot-mtbi-h", type=float, default=12.0)
    parser.add_argument("--spot-share", type=float, default=0.3)
    parser.add_argument("--cost-min-s", type=float, default=30.0)
    parser.add_argument("--cost-max-s", type=float, default=300.0)
    parser.add_argument("--restart-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}"
    )
    print(
        f"node MTBF {args.node_mtbf_h:g} h, spot MTBI {args.spot_mtbi_h:g} h per node, "
        f"{args.spot_share:.0%} of jobs on spot, checkpoint cost {args.cost_min_s:g}-"
        f"{args.cost_max_s:g} s, restart {args.restart_s:g} s, seeds {seeds}"
    )
    print(
        "| trace | jobs replayed | work (GPU-h) | lost, users' intervals (GPU-h) | lost, advised (GPU-h) | advised / users |"
    )
    print("|---|---|---|---|---|---|")
    started = time.perf_counter()
    for cluster in args.clusters.split(","):
        runs = [replay(cluster, seed, args) for seed in seeds]
        users = statistics.median(r["users"] for r in runs)
        advised = statistics.median(r["advised"] for r in runs)
        ratio = statistics.median(r["advised"] / r["users"] for r in runs if r["users"])
        print(
            f"| ITP {cluster} | {runs[0]['jobs']} | {runs[0]['work_gpu_h']:,.0f} | "
            f"{users:,.0f} | {advised:,.0f} | {ratio:.2f} |"
        )
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
