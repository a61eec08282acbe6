"""Two engine trees on the suite's cases, in one run: same decisions? how much faster?

    .venv/bin/python benchmarks/engine_ab.py --base /tmp/speed-base [--cases a,b] [--seeds 0]
        [--rounds 3] [--check-only] [--out var/benchmarks/engine_ab.json]

Every replay runs in a fresh process whose ``scheduler`` package comes from the tree given
(``--base``: a worktree of the engine before a change, e.g. ``git worktree add --detach
/tmp/speed-base main``; ``--new``: this tree by default), so the two engines never share memos
or imports. Per case and seed:

1. **Check** (once per tree): replay ``gpuplatform`` with a SHA-256 over every call's
   ``Decisions`` (``repr``: starts with their GPUs, preemptions with reasons and grace,
   reservations, resizes, every pending job's ``why`` and estimate) and the suite's columns.
   The two trees must agree on the digest and on every column but wall time.
2. **Time** (``--rounds`` rounds, alternating base / new, each round also timing ``tiresias``
   from the new tree): wall time of ``simulate`` (the suite's ``wall_s``, trace loading
   excluded) and its CPU time (``process_time``: steadier on a shared machine). The table
   gives medians and each engine's ratio to the median ``tiresias`` of the same run, which is
   the suite's goal (within 4x).

Processes run one at a time (``nice`` the command on a shared machine); wall times are only
compared within one run. Exit status 1 if any check differs, else 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# The suite's columns that must be equal (everything but wall time), plus the call count.
SAME = (
    "avg_wait_s",
    "p95_wait_s",
    "p99_jct_s",
    "preemptions_per_job",
    "lost_work_pct",
    "useful_util",
    "decide_calls",
)


def hashed_decisions(policy):  # type: ignore[no-untyped-def]
    """A SHA-256 that ``policy`` (an engine adapter) updates with every call's ``Decisions``
    (their ``repr``: whys and estimates included) as it applies them; read it after the replay."""
    digest = hashlib.sha256()
    apply = policy.apply

    def hashed_apply(sim, now, decisions):  # type: ignore[no-untyped-def]
        digest.update(repr(decisions).encode())
        apply(sim, now, decisions)

    policy.apply = hashed_apply
    return digest


def _worker(tree: str, case_name: str, policy: str, seed: int, digest: bool, traces: str) -> dict:
    """One replay with ``tree``'s engine (runs in a child process)."""
    sys.path.insert(0, str(Path(tree) / "benchmarks"))
    sys.path.insert(0, tree)

    import suite

    import scheduler
    from scheduler.simulation import SimConfig, simulate
    from scheduler.simulation.runner import make_policy

    for mod in (suite, scheduler):
        assert Path(mod.__file__).resolve().is_relative_to(Path(tree).resolve()), mod.__file__
    traces = Path(traces)
    case = next(c for c in suite.CASES if c.name == case_name)
    trace = case.trace(traces, seed)
    pol = make_policy(policy)
    h = hashed_decisions(pol) if digest else None
    cpu0 = time.process_time()
    metrics, sim = simulate(
        trace, case.cluster(traces), pol, SimConfig(seed=seed), timer=time.perf_counter
    )
    cpu_s = time.process_time() - cpu0
    row = suite.summarize(metrics)
    row["cpu_s"] = cpu_s
    row["decide_calls"] = sim.decide_calls
    if h is not None:
        row["digest"] = h.hexdigest()
    return row


def _run(tree: Path, case: str, policy: str, seed: int, digest: bool) -> dict:
    from scheduler.simulation.traces import default_traces_dir  # this tree's: ../shared/traces

    args = [str(tree), case, policy, seed, digest, str(default_traces_dir())]
    cmd = [sys.executable, __file__, "--worker", json.dumps(args)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--base", type=Path, help="tree with the engine before the change")
    ap.add_argument("--new", type=Path, default=HERE, help="tree with the changed engine")
    ap.add_argument("--cases", help="comma-separated suite case names (default: all)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (0: check only)")
    ap.add_argument("--check-only", action="store_true", help="same as --rounds 0")
    ap.add_argument("--no-check", action="store_true", help="time only")
    ap.add_argument("--out", type=Path, default=HERE / "var/benchmarks/engine_ab.json")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(*json.loads(args.worker))))
        return 0
    if args.base is None:
        ap.error("--base is required")
    sys.path.insert(0, str(HERE / "benchmarks"))
    import suite

    names = [c.name for c in suite.CASES]
    cases = args.cases.split(",") if args.cases else names
    unknown = set(cases) - set(names)
    if unknown:
        ap.error(f"unknown cases {sorted(unknown)}; expected some of {names}")
    seeds = [int(s) for s in args.seeds.split(",")]
    rounds = 0 if args.check_only else args.rounds
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    results: dict = {"trees": {k: str(v) for k, v in trees.items()}, "cases": {}}
    failed = False
    started = time.perf_counter()
    for case in cases:
        for seed in seeds:
            label = f"{case} seed {seed}"
            res: dict = {"check": {}}
            if not args.no_check:
                for k, tree in trees.items():
                    res["check"][k] = _run(tree, case, "gpuplatform", seed, True)
                b, n = res["check"]["base"], res["check"]["new"]
                diff = [c for c in (*SAME, "digest") if b[c] != n[c]]
                res["same"] = not diff
                failed |= bool(diff)
                verdict = "same decisions" if not diff else f"DIFFERENT: {', '.join(diff)}"
                sys.stderr.write(
                    f"{label}: {verdict} ({n['decide_calls']} calls, digest {n['digest'][:16]}; "
                    f"wall {b['wall_s']:.1f} -> {n['wall_s']:.1f} s)\n"
                )
            runs = {"base": [], "new": [], "tiresias": []}
            for _ in range(rounds):
                for k in ("base", "new"):
                    runs[k].append(_run(trees[k], case, "gpuplatform", seed, False))
                runs["tiresias"].append(_run(trees["new"], case, "tiresias", seed, False))
            if rounds:
                res["runs"] = {k: [(r["wall_s"], r["cpu_s"]) for r in v] for k, v in runs.items()}
                med = {
                    (k, col): statistics.median(r[col] for r in v)
                    for k, v in runs.items()
                    for col in ("wall_s", "cpu_s")
                }
                res["median"] = {f"{k} {col}": v for (k, col), v in med.items()}
                sys.stderr.write(
                    f"{label}: median wall / CPU s: base {med['base', 'wall_s']:.2f} / "
                    f"{med['base', 'cpu_s']:.2f}, new {med['new', 'wall_s']:.2f} / "
                    f"{med['new', 'cpu_s']:.2f}, tiresias {med['tiresias', 'wall_s']:.2f} / "
                    f"{med['tiresias', 'cpu_s']:.2f}\n"
                )
            results["cases"][label] = res
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    if rounds:
        print(
            "| case | tiresias s | base s | new s | base / tiresias | new / tiresias "
            "| CPU: base / tiresias | new / tiresias |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, res in results["cases"].items():
            m = res["median"]
            tw, tc = m["tiresias wall_s"], m["tiresias cpu_s"]
            print(
                f"| {label} | {tw:.2f} | {m['base wall_s']:.2f} | {m['new wall_s']:.2f} | "
                f"{m['base wall_s'] / tw:.1f}x | {m['new wall_s'] / tw:.1f}x | "
                f"{m['base cpu_s'] / tc:.1f}x | {m['new cpu_s'] / tc:.1f}x |"
            )
    if not args.no_check:
        same = sum(1 for r in results["cases"].values() if r.get("same"))
        print(f"\nsame decisions: {same} of {len(results['cases'])} replays")
    print(
        f"{time.perf_counter() - started:.0f} s; rounds {rounds}; load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
