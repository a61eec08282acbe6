"""Routing across clusters (issue 25): an ITP trace over three clusters, per policy the total
cost, egress and waiting, against the cost-blind placement.

    .venv/bin/python benchmarks/routing_replay.py [--cases itp04,itp07,itp02,itp03]
        [--cluster 04] [--max-jobs N] [--scale 1] [--seeds 0] [--policies cost,cost-blind]
        [--out var/benchmarks/routing.json]

``--cases`` replays named cases (``CASES``: a trace and a scale each); without it, one ITP
cluster (``--cluster``, the cluster04 window by default) at ``--scale``. After the rows, each
routed policy's total cost and average wait against ``cost-blind`` per case and seed, and the
median over seeds.

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

# The cases (one sentence each): an ITP cluster's trace over ``three_clusters(scale)``, the scale
# the smallest that still holds the trace's largest EU-only gang, or one that makes it busy (offered
# load = GPU-seconds / span, against the spec's GPUs).
CASES = {
    # 10,098 jobs (the window), 572 busy GPUs on average over 896: 64 %, 210 gangs > 8 GPUs
    "itp04": ("04", CLUSTER04_WINDOW_S, None, 1),
    # 5,000 jobs, 263 busy GPUs on 448: 59 %, one-node jobs only (no gangs > 8 GPUs)
    "itp07": ("07", None, 5000, 2),
    # 5,778 jobs, 86 busy GPUs on 224: 38 %, 86 gangs > 8 GPUs (scale 8 could never hold an
    # EU-only 64-GPU gang: on-prem would have 32 GPUs)
    "itp02": ("02", None, None, 4),
    # 3,011 jobs, 140 busy GPUs on 224: 62 % on average, gang-heavy and bursty (an overload)
    "itp03": ("03", None, None, 4),
}

POLICIES = {
    "cost": (Config(), False),
    "cost-wait": (Config(wait_price_per_gpu_h=0.5), False),
    "cost-blind": (Config(route_by_cost=False), False),
    "pooled": (Config(), True),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cases",
        default=None,
        help=f"comma-separated named cases ({', '.join(CASES)}); overrides --cluster/--scale",
    )
    p.add_argument("--cluster", default="04", help="ITP cluster number (default 04, its window)")
    p.add_argument("--max-jobs", type=int, default=None)
    p.add_argument("--scale", type=int, default=1, help="divide every site's node count")
    p.add_argument("--seeds", default="0")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.cases:
        cases = {name: CASES[name] for name in args.cases.split(",")}
    else:
        window = CLUSTER04_WINDOW_S if args.cluster == "04" else None
        cases = {f"itp{args.cluster}": (args.cluster, window, args.max_jobs, args.scale)}
    chosen = {name: POLICIES[name] for name in args.policies.split(",")}
    results = {}
    header = (
        f"{'case':<6} {'seed':>4} {'policy':<11} {'total':>10} {'GPU':>10} {'egress':>8} "
        f"{'TB moved':>8} {'avg wait s':>10} {'p95 wait s':>10} {'viol':>5} {'resid':>5} "
        f"{'split':>5} {'wall s':>6}  GPU cost by cluster"
    )
    for case, (cluster, window, max_jobs, scale) in cases.items():
        spec = three_clusters(scale)
        path = TRACES / f"cluster{cluster}.csv"
        print(f"{case}: {spec.cluster_spec().name}; trace {path.name}, max jobs {max_jobs}")
        print(header)
        for seed in [int(s) for s in args.seeds.split(",")]:
            trace = load_itp(path, max_jobs=max_jobs, max_submit=window, seed=seed)
            for name, cfg in chosen.items():
                t0 = time.perf_counter()
                r = replay_policies(trace, spec, {name: cfg})[name]
                wall = time.perf_counter() - t0
                r["wall_s"] = wall
                results[f"{case}/{seed}/{name}"] = r
                by = ", ".join(f"{k} {v:,.0f}" for k, v in r["gpu_cost_by_cluster"].items())
                print(
                    f"{case:<6} {seed:>4} {name:<11} {r['total_cost']:>10,.0f} "
                    f"{r['gpu_cost']:>10,.0f} {r['egress_cost']:>8,.0f} "
                    f"{r['egress_gb'] / 1000:>8,.0f} {r['avg_queue_s']:>10,.0f} "
                    f"{r['p95_queue_s']:>10,.0f} {r['violating_starts']:>5} "
                    f"{r['residency_violations']:>5} {r['gangs_split_across_clusters']:>5} "
                    f"{wall:>6.1f}  {by}",
                    flush=True,
                )
    summarize(results)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=str))
    return 0


def summarize(results: dict[str, dict]) -> None:
    """Per case and routed policy: total cost and average wait against ``cost-blind`` (same
    case and seed), each seed and the median over seeds."""
    import statistics

    rows: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for key, r in results.items():
        case, seed, name = key.split("/")
        blind = results.get(f"{case}/{seed}/cost-blind")
        if blind is None or name == "cost-blind":
            continue
        dc = r["total_cost"] / blind["total_cost"] - 1.0
        dw = r["avg_queue_s"] / blind["avg_queue_s"] - 1.0 if blind["avg_queue_s"] else 0.0
        rows.setdefault((case, name), []).append((int(seed), dc, dw))
    if not rows:
        return
    print("\nagainst cost-blind (same case and seed): total cost, average wait")
    for (case, name), vals in rows.items():
        per = "  ".join(f"s{s}: {dc:+.1%} / {dw:+.1%}" for s, dc, dw in vals)
        med_c = statistics.median(v[1] for v in vals)
        med_w = statistics.median(v[2] for v in vals)
        print(f"{case:<6} {name:<11} {per}  median {med_c:+.1%} / {med_w:+.1%}")


if __name__ == "__main__":
    sys.exit(main())
