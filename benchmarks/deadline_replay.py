"""Replays for issue 24: deadline hit rate with and without the deadline rule, and ordering with
learned run-time predictions against ordering with users' limits.

    .venv/bin/python benchmarks/deadline_replay.py [--cases itp02,itp06,itp04-window]
        [--seeds 0,1] [--what deadlines,prediction] [--traces DIR]

Cases are the suite's (benchmarks/suite.py: the first 1,500 jobs of ITP clusters, on sizes where
they are busy). The public traces record neither deadlines nor limits, so both are given here,
deterministically from `(seed, job id)`:
- deadlines on 30 % of the jobs, `submit + duration x f` with `f` uniform in [1.5, 4]
  (`traces.with_deadlines`): each is feasible on an idle cluster;
- limits as users set them: the duration times a factor uniform in [1, 5], rounded up to the
  next of 1, 2, 4, 8, 12, 24, 48, 72, 168 h (users over-ask and pick round numbers).

`deadlines`: the engine with the deadline rule (rule 1b) against the same engine with the
deadlines hidden (no-deadline ordering). `prediction`: the engine planning with the limits,
with the simulator's per-(tenant, GPUs) median (the limits hidden) and with the learned model
(`scheduler.prediction`, limits hidden). Medians over the seeds.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.suite import CASES  # noqa: E402
from scheduler.simulation import SimConfig  # noqa: E402
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy  # noqa: E402
from scheduler.simulation.runner import simulate  # noqa: E402
from scheduler.simulation.traces import default_traces_dir, with_deadlines  # noqa: E402

LIMIT_STEPS_H = (1, 2, 4, 8, 12, 24, 48, 72, 168)


def with_limits(trace, seed: int):
    out = []
    for j in trace:
        digest = hashlib.blake2b(f"limit:{seed}:{j.id}".encode(), digest_size=8).digest()
        asked = j.duration * (1 + 4 * int.from_bytes(digest, "big") / 2**64)
        limit_h = next((h for h in LIMIT_STEPS_H if h * 3600 >= asked), LIMIT_STEPS_H[-1])
        out.append(replace(j, runtime_limit_s=float(max(limit_h * 3600, j.duration))))
    return tuple(out)


def run(case, seed: int, traces: Path, policy: GpuPlatformPolicy, trace) -> dict:
    m, _ = simulate(
        trace, case.cluster(traces), policy, SimConfig(seed=seed), timer=time.perf_counter
    )
    return {
        "deadline_hit_rate": m["deadline_hit_rate"] or 0.0,
        "avg_jct_h": m["avg_jct_s"] / 3600,
        "avg_queue_h": m["avg_queue_s"] / 3600,
        "p95_queue_h": m["p95_queue_s"] / 3600,
        "preemptions": m["preemptions"],
        "wall_s": m["wall_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="itp02,itp06,itp04-window")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--what", default="deadlines,prediction")
    parser.add_argument("--traces", type=Path, default=default_traces_dir())
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    what = args.what.split(",")
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"python {platform.python_version()}"
    )
    for name in args.cases.split(","):
        case = next(c for c in CASES if c.name == name)
        variants: dict[str, list[dict]] = {}
        for seed in seeds:
            base = with_limits(case.trace(args.traces, seed), seed)
            due = with_deadlines(base, share=0.3, seed=seed)
            unlimited = tuple(replace(j, runtime_limit_s=None) for j in due)
            todo = []
            if "deadlines" in what:
                todo += [
                    ("deadline rule, median estimates", GpuPlatformPolicy(), unlimited),
                    (
                        "no-deadline ordering, median estimates",
                        GpuPlatformPolicy(deadlines=False),
                        unlimited,
                    ),
                ]
            if "prediction" in what:
                todo += [
                    ("users' limits", GpuPlatformPolicy(deadlines=False), due),
                    ("per-team/GPU median", GpuPlatformPolicy(deadlines=False), unlimited),
                    (
                        "learned model",
                        GpuPlatformPolicy(deadlines=False, runtime_model=True),
                        unlimited,
                    ),
                ]
            for label, policy, trace in todo:
                variants.setdefault(label, []).append(run(case, seed, args.traces, policy, trace))
                print(f"  {name} seed {seed} {label}: {variants[label][-1]}", file=sys.stderr)
        print(f"\n{case.name}: {case.describe}, seeds {args.seeds}")
        print(
            "| estimates / ordering | deadline hit rate | avg JCT (h) | avg wait (h) | "
            "p95 wait (h) | preemptions |"
        )
        print("|---|---|---|---|---|---|")
        for label, runs in variants.items():
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(
                f"| {label} | {med['deadline_hit_rate']:.1%} | {med['avg_jct_h']:.2f} | "
                f"{med['avg_queue_h']:.2f} | {med['p95_queue_h']:.2f} | "
                f"{med['preemptions']:.0f} |"
            )


if __name__ == "__main__":
    main()
