"""Benchmark: cost of one policy ``decide`` cycle on synthetic snapshots of three sizes.

    .venv/bin/python benchmarks/policy_cycle.py                 # all sizes, table on stdout
    .venv/bin/python benchmarks/policy_cycle.py --sizes large --repeat 21
    .venv/bin/python benchmarks/policy_cycle.py --scaling      # also: time vs pending count

Sizes (deterministic, seeded):
- small:  16 nodes x 8 GPUs (2 racks), ~90 % busy, 100 pending
- medium: 256 nodes x 8 GPUs (16 racks), ~90 % busy, 2,000 pending
- large:  1,000 nodes x 8 GPUs in 50 racks (5 fabrics, 10 % spot), 5,000 running,
          10,000 pending, mixed gang sizes (1 to 8x8 GPUs), 20 teams in a tree with quotas

Reports the median and p95 wall time of ``decide`` (snapshot construction excluded: the live
loop and the simulator build it once per cycle) and the peak memory ``decide`` allocates
(tracemalloc, measured on a separate run because tracing slows Python down). ``--scaling`` times
the large cluster with 2,500 / 5,000 / 10,000 pending jobs to show the cost grows about linearly
with the queue, not with jobs x nodes x GPUs. Goal: large <= 100 ms median on the 2-core box.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.policy import (  # noqa: E402
    Config,
    Elastic,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    decide,
)

CLASSES = {"production": 1000, "research": 500, "best-effort": 100}
NOW = 1_000_000.0

# (workers, gpus_per_worker, weight)
RUNNING_SHAPES = [(1, 1, 880), (1, 2, 60), (1, 4, 30), (1, 8, 20), (2, 8, 7), (4, 8, 3)]
PENDING_SHAPES = [
    (1, 1, 600),
    (1, 2, 100),
    (1, 4, 100),
    (1, 8, 100),
    (2, 8, 60),
    (4, 8, 30),
    (8, 8, 10),
]


def _teams(rnd: random.Random) -> tuple[Team, ...]:
    teams = []
    for p in range(4):
        teams.append(Team(f"org{p}", None, weight=1.0 + p % 2, usage_gpu_s=0.0))
        for c in range(4):
            quota = {}
            if c % 2 == 0:
                quota = {"h100": Quota(guaranteed=400, borrow_limit=400)}
            teams.append(
                Team(
                    f"org{p}-team{c}",
                    f"org{p}",
                    weight=rnd.choice([1.0, 2.0]),
                    quota=quota,
                    usage_gpu_s=rnd.choice([0.0, 1e5, 1e6, 1e7]),
                )
            )
    return tuple(teams)


def _shape(rnd: random.Random, shapes) -> tuple[int, int]:
    w, g, _ = rnd.choices(shapes, weights=[s[2] for s in shapes])[0]
    return w, g


def build(
    n_nodes: int,
    n_racks: int,
    n_running: int | None,
    n_pending: int,
    seed: int = 1,
    running_shapes=RUNNING_SHAPES,
) -> Snapshot:
    """A synthetic snapshot: ``n_running`` None fills ~90 % of the GPUs."""
    rnd = random.Random(seed)
    teams = _teams(rnd)
    leaf = [t.name for t in teams if t.parent is not None]
    gpus = 8
    names = [f"r{i % n_racks:02d}-n{i // n_racks:03d}" for i in range(n_nodes)]
    free = {name: list(range(gpus)) for name in names}
    racks = {name: f"r{i % n_racks:02d}" for i, name in enumerate(names)}
    target = n_running if n_running is not None else 10**9
    budget = int(n_nodes * gpus * (0.93 if n_running is not None else 0.9))
    used = 0
    running = []
    order = names[:]
    rnd.shuffle(order)
    attempts = 0
    while len(running) < target and used < budget and attempts < target * 4 + 10_000:
        attempts += 1
        w, g = _shape(rnd, running_shapes)
        placement: dict[str, tuple[int, ...]] = {}
        start = rnd.randrange(n_nodes)
        for k in range(n_nodes):
            if len(placement) == w:
                break
            name = order[(start + k) % n_nodes]
            if len(free[name]) >= g and name not in placement:
                placement[name] = tuple(free[name][:g])
        if len(placement) < w:
            continue
        for name in placement:
            del free[name][:g]
        used += w * g
        started = NOW - rnd.uniform(60, 86_400)
        interval = rnd.choice([None, 1800.0, 3600.0])
        running.append(
            RunningJob(
                id=f"run-{len(running)}",
                team=rnd.choice(leaf),
                priority_class=rnd.choice(list(CLASSES)),
                gpu_model="h100",
                workers=w,
                gpus_per_worker=g,
                placement=placement,
                started_at=started,
                expected_end=None if rnd.random() < 0.1 else NOW + rnd.expovariate(1 / 7200),
                preemptible=rnd.random() < 0.5,
                last_checkpoint_at=None if interval is None else NOW - rnd.uniform(0, interval),
                checkpoint_interval_s=interval,
                elastic=Elastic(1, w + 2) if w > 1 and rnd.random() < 0.2 else None,
            )
        )
    nodes = tuple(
        Node(
            name=name,
            gpu_model="h100",
            gpus=gpus,
            free_gpus=tuple(free[name]),
            zone="z1",
            rack=racks[name],
            nvlink_domain=name,
            fabric=f"ib{int(racks[name][1:]) % 5}",
            spot=rnd.random() < 0.1,
            health=1.0 if rnd.random() < 0.98 else 0.3,
            state="ready" if rnd.random() < 0.98 else "draining",
            datasets=tuple(rnd.sample(["c4", "pile", "imagenet", "laion"], rnd.randint(0, 2))),
        )
        for name in names
    )
    pending = []
    for i in range(n_pending):
        w, g = _shape(rnd, PENDING_SHAPES)
        pending.append(
            PendingJob(
                id=f"pend-{i}",
                team=rnd.choice(leaf),
                priority_class=rnd.choices(list(CLASSES), weights=[1, 6, 3])[0],
                gpu_model="h100",
                workers=w,
                gpus_per_worker=g,
                submitted_at=NOW - rnd.uniform(0, 86_400),
                runtime_estimate_s=None if rnd.random() < 0.2 else rnd.lognormvariate(8, 1.5),
                preemptible=rnd.random() < 0.5,
                dataset=rnd.choice([None, "c4", "pile", "imagenet"]),
                dataset_ready=rnd.random() < 0.95,
                elastic=Elastic(1, w) if w > 1 and rnd.random() < 0.2 else None,
            )
        )
    return Snapshot(
        now=NOW,
        config=Config(),
        priority_classes=CLASSES,
        teams=teams,
        nodes=nodes,
        running=tuple(running),
        pending=tuple(pending),
    )


SIZES = {
    "small": dict(n_nodes=16, n_racks=2, n_running=None, n_pending=100),
    "medium": dict(n_nodes=256, n_racks=16, n_running=None, n_pending=2_000),
    "large": dict(n_nodes=1_000, n_racks=50, n_running=5_000, n_pending=10_000),
}
DEFAULT_REPEAT = {"small": 201, "medium": 41, "large": 15}


def measure(snapshot: Snapshot, repeat: int) -> dict[str, float]:
    """Median / p95 decide time (ms) over ``repeat`` runs, and peak traced memory (MiB)."""
    decide(snapshot)  # warm-up
    times = []
    cpu = []
    gc.collect()
    for _ in range(repeat):
        t0 = time.perf_counter()
        c0 = time.process_time()
        decide(snapshot)
        cpu.append((time.process_time() - c0) * 1000)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    tracemalloc.start()
    d = decide(snapshot)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "median_ms": statistics.median(times),
        "p95_ms": times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))],
        "cpu_median_ms": statistics.median(cpu),
        "peak_mib": peak / 2**20,
        "starts": len(d.start),
        "preempts": len(d.preempt),
        "reserves": len(d.reserve),
        "pending": len(d.pending),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table (and JSON with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="small,medium,large")
    ap.add_argument("--repeat", type=int, help="runs per size (default depends on size)")
    ap.add_argument("--scaling", action="store_true", help="time vs pending count (large)")
    ap.add_argument("--json", help="write results to this JSON file")
    args = ap.parse_args(argv)
    results = {}
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"load average {' '.join(load)} (wall time suffers when the box is shared)"
    )
    header = f"{'size':<8} {'nodes':>6} {'running':>8} {'pending':>8} {'median ms':>10} "
    header += f"{'p95 ms':>8} {'cpu ms':>7} {'peak MiB':>9}  starts/preempts/reserves"
    print(header)
    for size in args.sizes.split(","):
        snap = build(**SIZES[size])
        r = measure(snap, args.repeat or DEFAULT_REPEAT[size])
        r.update(nodes=len(snap.nodes), running=len(snap.running), pending_in=len(snap.pending))
        results[size] = r
        print(
            f"{size:<8} {r['nodes']:>6} {r['running']:>8} {r['pending_in']:>8} "
            f"{r['median_ms']:>10.1f} {r['p95_ms']:>8.1f} {r['cpu_median_ms']:>7.1f} "
            f"{r['peak_mib']:>9.1f}  "
            f"{r['starts']}/{r['preempts']}/{r['reserves']}"
        )
    if args.scaling:
        print("\nscaling on the large cluster (1,000 nodes, 5,000 running):")
        print(f"{'pending':>8} {'median ms':>10} {'cpu ms':>7} {'ms per 1k pending':>18}")
        results["scaling"] = {}
        for n in (2_500, 5_000, 10_000, 20_000):
            snap = build(**{**SIZES["large"], "n_pending": n})
            r = measure(snap, args.repeat or 9)
            results["scaling"][n] = r
            print(
                f"{n:>8} {r['median_ms']:>10.1f} {r['cpu_median_ms']:>7.1f} "
                f"{r['median_ms'] / n * 1000:>18.2f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
