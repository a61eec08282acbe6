"""Routing across clusters (issue 25): an ITP trace over three clusters, per policy the total
cost, egress and waiting, against the cost-blind placement.

    .venv/bin/python benchmarks/routing_replay.py [--cluster 04] [--max-jobs N] [--scale 1]
        [--seeds 0] [--out var/benchmarks/routing.json]

The clusters are ``scheduler.simulation.multicluster.three_clusters(scale)``: on-premises
32 x 8 H100 (eu-west, InfiniBand, 1.90 per GPU-hour), cloud-a 64 x 8 A100 (us-east,
InfiniBand, 3.40 on demand, half of it spot at 1.20), cloud-b 16 x 8 H100 (eu-central,
Ethernet, 4.10 / spot 1.60). Jobs get a synthetic dataset from ``(seed, job id)`` (web-eu 3 TB,
residency EU, 25 %; code 400 GB, 25 %; images 1.5 TB, 20 %; none, 30 %), 20 % refuse spot and
team-d may only use the EU clusters. Policies (the same engine defaults otherwise):

- ``cost``: routing by expected total (rule 3b), never waiting for a cheaper busy pool;
- ``cost-wait``: the same with ``wait_price_per_gpu_h`` 0.5 (holds out for a cheaper pool);
- ``cost-blind``: the same constraints, pools in name order (``route_by_cost: false``);
- ``pooled``: the engine without clusters (one pool per GPU model): the status quo, which
  knows no constraint (its violations are counted, not prevented).

Exit status 0 whatever the numbers (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.policy import Config  # noqa: E402
from scheduler.simulation import load_itp  # noqa: E402
from scheduler.simulation.multicluster import replay_policies, three_clusters  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "microsoft-itp-elasticflow"
CLUSTER04_WINDOW_S = 2246340.0

POLICIES = {
    "cost": (Config(), False),
    "cost-wait": (Config(wait_price_per_gpu_h=0.5), False),
    "cost-blind": (Config(route_by_cost=False), False),
    "pooled": (Config(), True),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="04", help="ITP cluster number (default 04, its window)")
    p.add_argument("--max-jobs", type=int, default=None)
    p.add_argument("--scale", type=int, default=1, help="divide every site's node count")
    p.add_argument("--seeds", default="0")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    spec = three_clusters(args.scale)
    path = TRACES / f"cluster{args.cluster}.csv"
    window = CLUSTER04_WINDOW_S if args.cluster == "04" else None
    chosen = {name: POLICIES[name] for name in args.policies.split(",")}
    results = {}
    print(f"{spec.cluster_spec().name}; trace {path.name}, max jobs {args.max_jobs}")
    header = (
        f"{'seed':>4} {'policy':<11} {'total':>10} {'GPU':>10} {'egress':>8} {'TB moved':>8} "
        f"{'avg wait s':>10} {'p95 wait s':>10} {'viol':>5} {'resid':>5} {'split':>5} "
        f"{'wall s':>6}  GPU cost by cluster"
    )
    print(header)
    for seed in [int(s) for s in args.seeds.split(",")]:
        trace = load_itp(path, max_jobs=args.max_jobs, max_submit=window, seed=seed)
        for name, cfg in chosen.items():
            t0 = time.perf_counter()
            r = replay_policies(trace, spec, {name: cfg})[name]
            wall = time.perf_counter() - t0
            r["wall_s"] = wall
            results[f"{seed}/{name}"] = r
            by = ", ".join(f"{k} {v:,.0f}" for k, v in r["gpu_cost_by_cluster"].items())
            print(
                f"{seed:>4} {name:<11} {r['total_cost']:>10,.0f} {r['gpu_cost']:>10,.0f} "
                f"{r['egress_cost']:>8,.0f} {r['egress_gb'] / 1000:>8,.0f} "
                f"{r['avg_queue_s']:>10,.0f} {r['p95_queue_s']:>10,.0f} "
                f"{r['violating_starts']:>5} {r['residency_violations']:>5} "
                f"{r['gangs_split_across_clusters']:>5} {wall:>6.1f}  {by}",
                flush=True,
            )
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
