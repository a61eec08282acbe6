"""Where a gpuplatform replay spends its time: snapshot build vs decide() vs apply.

    nice .venv/bin/python benchmarks/simulation_profile.py [--nodes 80] [--max-jobs N]
        [--cprofile 15]

Replays the cluster04 benchmark window under `gpuplatform`, timing the three phases of every
policy call separately, and reports per-call percentiles, totals and the snapshot sizes seen. With
`--cprofile K` it also prints the K functions with the most own time inside decide().
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.policy import decide  # noqa: E402
from scheduler.simulation import (  # noqa: E402
    SimConfig,
    Simulator,
    load_itp,
    load_openb,
    parse_cluster,
    uniform_cluster,
)
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy  # noqa: E402
from scheduler.simulation.traces import default_traces_dir  # noqa: E402


class Timed(GpuPlatformPolicy):
    """The gpuplatform adapter with each phase of a call timed."""

    def __init__(self, profiler: cProfile.Profile | None) -> None:
        super().__init__()
        self.profiler = profiler
        self.t_snap: list[float] = []
        self.t_decide: list[float] = []
        self.t_apply: list[float] = []
        self.sizes: list[tuple[int, int, int]] = []

    def schedule(self, sim, now):
        t0 = time.perf_counter()
        snap = self.snapshot(sim, now)
        t1 = time.perf_counter()
        if self.profiler:
            self.profiler.enable()
        decisions = decide(snap)
        if self.profiler:
            self.profiler.disable()
        t2 = time.perf_counter()
        self.apply(sim, now, decisions)  # the replay's own apply, LAS wake-ups included
        t3 = time.perf_counter()
        self.t_snap.append(t1 - t0)
        self.t_decide.append(t2 - t1)
        self.t_apply.append(t3 - t2)
        self.sizes.append((len(snap.nodes), len(snap.running), len(snap.pending)))


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else 0.0


def main() -> None:
    """Run and print the profile."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=80)
    ap.add_argument("--openb", action="store_true", help="openb pods on the openb node list")
    ap.add_argument("--max-jobs", type=int)
    ap.add_argument("--cprofile", type=int, default=0)
    args = ap.parse_args()
    if args.openb:
        pods = default_traces_dir() / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv"
        trace = load_openb(pods)[: args.max_jobs]
        cluster = parse_cluster("openb")
    else:
        path = default_traces_dir() / "microsoft-itp-elasticflow" / "cluster04.csv"
        trace = load_itp(path, max_submit=2246340)[: args.max_jobs]
        cluster = uniform_cluster(args.nodes, 8)
    profiler = cProfile.Profile() if args.cprofile else None
    policy = Timed(profiler)
    t0 = time.perf_counter()
    Simulator(trace, cluster, policy, SimConfig()).run()
    wall = time.perf_counter() - t0
    calls = len(policy.t_decide)
    print(f"{len(trace)} jobs, {cluster.name}, wall {wall:.1f} s, {calls} calls")
    for name, ts in (
        ("snapshot", policy.t_snap),
        ("decide", policy.t_decide),
        ("apply", policy.t_apply),
    ):
        print(
            f"  {name:8s} total {sum(ts):7.2f} s  p50 {pct(ts, 50) * 1e3:7.3f} ms  "
            f"p90 {pct(ts, 90) * 1e3:7.3f} ms  p99 {pct(ts, 99) * 1e3:7.3f} ms  "
            f"max {max(ts) * 1e3:7.1f} ms"
        )
    for k, label in ((1, "running"), (2, "pending")):
        vals = [s[k] for s in policy.sizes]
        print(f"  {label:8s} jobs per snapshot: mean {sum(vals) / calls:.0f}, max {max(vals)}")
    slow = sorted(range(calls), key=lambda i: policy.t_decide[i])[-5:]
    for i in reversed(slow):
        n, r, p = policy.sizes[i]
        print(f"  slow call: {policy.t_decide[i] * 1e3:.1f} ms with {r} running, {p} pending")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.cprofile)


if __name__ == "__main__":
    main()
