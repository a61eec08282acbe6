"""Does the replay call the engine often enough? Event-driven replays against a fixed cadence.

    nice .venv/bin/python benchmarks/replay_cadence.py [--cases a,b] [--held-out] [--seeds 0]
        [--every 60] [--policy gpuplatform] [--out var/benchmarks/replay_cadence.json]

The live loop runs a cycle every ``SCHEDULER_CYCLE_SECONDS`` (3 s), so it acts within seconds on
whatever changes with time alone. The replay calls a policy only at events and at the wake-ups
the policy asks for (docs/simulation.md, "Wake-ups"). Each case is replayed both ways: as the
suite does, and with one more call every ``--every`` seconds of simulated time while jobs wait.
Where the two differ, the replay misses a moment at which the live loop would have acted. A
policy that decides only on events (``fifo-backfill``) gives the same numbers both ways.

The table gives, per case and seed, the average wait and p99 JCT both ways (and the event-driven
replay's deviation from the cadence), the calls and the CPU seconds of each replay. The cases are
the suite's (``benchmarks/suite.py``); replays run one at a time in this process.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402

from scheduler.simulation import SimConfig, simulate  # noqa: E402
from scheduler.simulation.runner import make_policy  # noqa: E402
from scheduler.simulation.traces import default_traces_dir  # noqa: E402


def with_cadence(policy, every_s: float):
    """``policy``, also asking the replay for a call ``every_s`` after each call while jobs wait
    (its own wake-ups still count: the replay keeps the earliest)."""
    schedule = policy.schedule

    def schedule_then_wake(sim, now):
        schedule(sim, now)
        if sim.pending:
            sim.wake_at(now + every_s)

    policy.schedule = schedule_then_wake
    return policy


def replay(case, traces: Path, policy_name: str, seed: int, every_s: float | None) -> dict:
    policy = make_policy(policy_name)
    if every_s:
        policy = with_cadence(policy, every_s)
    cpu0 = time.process_time()
    metrics, sim = simulate(
        case.trace(traces, seed), case.cluster(traces), policy, SimConfig(seed=seed)
    )
    row = suite.summarize(metrics)
    return {
        "avg_wait_s": row["avg_wait_s"],
        "p99_jct_s": row["p99_jct_s"],
        "calls": sim.decide_calls,
        "cpu_s": time.process_time() - cpu0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", help="comma-separated case names (default: every case of the set)")
    ap.add_argument("--held-out", action="store_true", help="the held-out cases instead")
    ap.add_argument("--seeds", type=suite.seed_list, default=[0])
    ap.add_argument("--every", type=float, default=60.0, help="cadence, s of simulated time")
    ap.add_argument("--policy", default="gpuplatform")
    ap.add_argument("--traces", type=Path, default=default_traces_dir())
    ap.add_argument("--out", type=Path, default=Path("var/benchmarks/replay_cadence.json"))
    args = ap.parse_args(argv)
    if not 0 < args.every < math.inf:  # also refuses nan, which would never compare
        ap.error("--every must be a positive number of seconds")
    cases = suite.HELD_OUT if args.held_out else suite.CASES
    names = [c.name for c in cases]
    chosen = args.cases.split(",") if args.cases else names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        ap.error(f"unknown cases {unknown}; expected some of {names}")
    try:
        make_policy(args.policy)  # an unknown policy fails here, before any replay
    except ValueError as e:
        ap.error(str(e))

    rows = []
    deviations = []
    print(
        f"| case | seed | avg wait s, every {args.every:g} s | event-driven (deviation) "
        "| p99 JCT s, cadence / event-driven | calls | CPU s |"
    )
    print("|---|---:|---:|---:|---|---|---|")
    for case in (c for c in cases if c.name in chosen):
        for seed in args.seeds:
            events = replay(case, args.traces, args.policy, seed, None)
            cadence = replay(case, args.traces, args.policy, seed, args.every)
            deviation = (
                events["avg_wait_s"] / cadence["avg_wait_s"] - 1 if cadence["avg_wait_s"] else 0.0
            )
            deviations.append(abs(deviation))
            rows.append(
                {
                    "case": case.name,
                    "seed": seed,
                    "events": events,
                    "cadence": cadence,
                    "deviation": deviation,
                }
            )
            print(
                f"| {case.name} | {seed} | {cadence['avg_wait_s']:,.0f} | "
                f"{events['avg_wait_s']:,.0f} ({deviation * 100:+.1f} %) | "
                f"{cadence['p99_jct_s']:,.0f} / {events['p99_jct_s']:,.0f} | "
                f"{events['calls']:,} / {cadence['calls']:,} | "
                f"{events['cpu_s']:.1f} / {cadence['cpu_s']:.1f} |",
                flush=True,
            )
    print(
        f"\nmedian |deviation| of the event-driven average wait: "
        f"{statistics.median(deviations) * 100:.1f} %, largest {max(deviations) * 100:.1f} %"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"every_s": args.every, "policy": args.policy, "rows": rows}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
