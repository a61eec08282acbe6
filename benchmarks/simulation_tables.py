"""Reproduce the simulator tables of docs/benchmarks.md (section "Simulation").

    .venv/bin/python benchmarks/simulation_tables.py [--only fidelity,itp80,itp128,openb]
        [--traces DIR] [--out DIR] [--policies a,b,...]

Runs each policy once, one after the other (run it with `nice`; the full set takes a few minutes,
dominated by the gpuplatform replays), prints a Markdown table per setting and writes every
metric dict as JSON under --out (default var/benchmarks/simulation). The fidelity check compares
fifo and sjf in the reference model against the published research simulator's numbers on the
same window at 80 x 8 and exits 1 if either is outside 3 % on avg JCT or 10 % on avg queue.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.simulation import (  # noqa: E402
    SimConfig,
    load_itp,
    load_openb,
    parse_cluster,
    simulate,
    uniform_cluster,
)
from scheduler.simulation.cluster import sample_nodes  # noqa: E402
from scheduler.simulation.traces import default_traces_dir, scale_arrivals  # noqa: E402

WINDOW = 2246340
ALL = (
    "fifo",
    "fifo-backfill",
    "sjf",
    "tiresias",
    "gpuplatform",
    "gpuplatform-nolas",
    "gpuplatform-res1",
    "gpuplatform-tail",
)
# The published reference simulator on cluster04, submission_time <= 2246340, 80 x 8 GPUs.
REFERENCE = {"fifo": (23022.6, 6413.5), "sjf": (18524.9, 1915.9)}
REFERENCE_UTIL = 0.84
COLUMNS = (
    ("avg_jct_s", "avg JCT s", "{:,.0f}"),
    ("p99_jct_s", "p99 JCT s", "{:,.0f}"),
    ("avg_queue_s", "avg queue s", "{:,.0f}"),
    ("p95_queue_s", "p95 queue s", "{:,.0f}"),
    ("gpu_utilization", "util", "{:.3f}"),
    ("gpu_utilization_window", "util (window)", "{:.3f}"),
    ("idle_while_pending_frac", "idle while pending", "{:.4f}"),
    ("preemptions", "preemptions", "{:,}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.0f}"),
    ("jain_fairness", "Jain", "{:.4f}"),
    ("wall_s", "wall s", "{:.1f}"),
    ("decide_calls", "decide calls", "{:,}"),
    ("decide_p50_ms", "decide p50 ms", "{:.3f}"),
)


def table(results: dict[str, dict]) -> str:
    """A Markdown table, one row per policy."""
    head = "| policy | " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    sep = "|---|" + "---:|" * len(COLUMNS)
    rows = [
        f"| `{name}` | " + " | ".join(f.format(m[k]) for k, _, f in COLUMNS) + " |"
        for name, m in results.items()
    ]
    return "\n".join([head, sep, *rows])


def run_set(name, trace, cluster, policies, config, out_dir) -> dict[str, dict]:
    results = {}
    for policy in policies:
        sys.stderr.write(f"{name}: {policy} ({len(trace)} jobs on {cluster.name}) ...\n")
        metrics, _ = simulate(trace, cluster, policy, config, timer=time.perf_counter)
        results[policy] = metrics
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n### {name}\n\n{table(results)}\n", flush=True)
    return results


def main() -> int:
    """Run the selected settings; returns 1 when the fidelity check fails."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="fidelity,itp80,itp128,openb,openb-stress")
    ap.add_argument("--traces", type=Path, default=default_traces_dir())
    ap.add_argument("--out", type=Path, default=Path("var/benchmarks/simulation"))
    ap.add_argument("--policies", default=",".join(ALL))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    policies = args.policies.split(",")
    status = 0
    itp = args.traces / "microsoft-itp-elasticflow" / "cluster04.csv"
    if only & {"fidelity", "itp80", "itp128"}:
        window = load_itp(itp, max_submit=WINDOW)
    if "fidelity" in only:
        ref_cfg = SimConfig(checkpoint_interval_s=None, restart_overhead_s=0.0, preemptible=False)
        res = run_set(
            "fidelity-80x8", window, uniform_cluster(80, 8), ["fifo", "sjf"], ref_cfg, args.out
        )
        print(
            "| policy | avg JCT ours / ref | diff | avg queue ours / ref | diff | util (window) |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for p, (ref_jct, ref_q) in REFERENCE.items():
            m = res[p]
            d_jct = m["avg_jct_s"] / ref_jct - 1
            d_q = m["avg_queue_s"] / ref_q - 1
            ok = abs(d_jct) <= 0.03 and abs(d_q) <= 0.10
            status |= 0 if ok else 1
            print(
                f"| `{p}` | {m['avg_jct_s']:,.1f} / {ref_jct:,.1f} | {d_jct:+.2%} | "
                f"{m['avg_queue_s']:,.1f} / {ref_q:,.1f} | {d_q:+.2%} | "
                f"{m['gpu_utilization_window']:.3f} (ref {REFERENCE_UTIL}) |"
            )
    if "itp80" in only:
        run_set(
            "itp-cluster04-80x8", window, uniform_cluster(80, 8), policies, SimConfig(), args.out
        )
    if "itp128" in only:
        run_set(
            "itp-cluster04-128x8", window, uniform_cluster(128, 8), policies, SimConfig(), args.out
        )
    if "openb" in only:
        pods = load_openb(args.traces / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv")
        cluster = parse_cluster("openb", traces_dir=args.traces)
        run_set("openb-default", pods, cluster, policies, SimConfig(), args.out)
    if "openb-stress" in only:
        # a labelled stress variant: every 8th node (same model mix), arrivals 100x denser
        pods = load_openb(args.traces / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv")
        cluster = sample_nodes(parse_cluster("openb", traces_dir=args.traces), 8)
        stress = scale_arrivals(pods, 0.01)
        run_set(
            "openb-stress-nodes8-arrivals0.01", stress, cluster, policies, SimConfig(), args.out
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
