"""Benchmark: a cold policy cycle where ~900 jobs can start at once (after an outage, at start-up).

    .venv/bin/python benchmarks/cold_cycle.py [--runs 9] [--cli-runs 7] [--json out.json]

Shape (deterministic, seed 1): 1,000 nodes x 8 GPUs in 50 racks (the ``large`` cluster of
``policy_cycle.py``), 5,000 running jobs without the 4 x 8 gangs (those were lost with the
outage), so about 1,300 GPUs are free, and 10,000 pending jobs; about 860 of them start.

Every run is cold, as the command line is: the snapshot is parsed again from the JSON text and
the engine's cross-call memos are cleared before ``decide``. Reported, median of the runs:
- ``parse``: ``json.loads`` and ``snapshot_from_dict`` (validation included);
- ``decide``: the engine on the parsed snapshot, with the cyclic collector on (as in a
  long-lived process: the loop's worker, the simulator);
- ``decide-nogc``: the same with the collector off, as the command line runs it (``__main__``
  turns it off for its one pass over an acyclic document);
- ``encode``: ``decisions_to_dict`` and the CLI's JSON text (its default indent of 2);
- ``cli``: ``python -m scheduler.policy decide FILE`` in a new process, output discarded
  (interpreter start-up and imports from cached bytecode included; one uncounted run first
  writes the cache, as installing the package does); its CPU time is the child's user + system.
CPU time (``process_time``) is printed next to wall time because the machine is shared. The
decisions' SHA-256 is printed so two engines can be checked to decide the same.
Goals (issue 21): ``decide`` <= 100 ms, the whole CLI path <= 1 s.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from policy_cycle import SIZES, build  # noqa: E402

from scheduler.policy import (  # noqa: E402
    Snapshot,
    decide,
    decisions_to_dict,
    snapshot_from_dict,
    snapshot_to_dict,
)

try:
    from scheduler.policy.__main__ import dumps  # the command line's encoder
except ImportError:  # a tree from before it (before/after runs): the json module's

    def dumps(value, indent):
        return json.dumps(value, indent=indent)


# The large snapshot's running shapes without the 4 x 8 gangs.
COLD_RUNNING_SHAPES = [(1, 1, 880), (1, 2, 60), (1, 4, 30), (1, 8, 20), (2, 8, 7)]


def build_cold(seed: int = 1) -> Snapshot:
    """The cold-cycle snapshot (deterministic for a seed)."""
    return build(**SIZES["large"], seed=seed, running_shapes=COLD_RUNNING_SHAPES)


def clear_memos() -> None:
    """Forget what earlier ``decide`` calls left behind, as a new process would."""
    try:
        from scheduler.policy.memo import clear
    except ImportError:  # a tree from before the engine's split (before/after runs)
        from scheduler.policy import engine

        engine._TOPOLOGY_MEMO.clear()
        engine._STANDINGS_MEMO.clear()
        engine._LAST_INDEX.clear()
        engine._LAST_TOPOLOGY[0] = None
        engine._LAST_RANKS[0] = ({}, ((), 0.0), {})
        engine._LAST_PLACEMENTS[0] = {}
        return
    clear()


def fingerprint(decisions) -> str:
    """SHA-256 of the decisions' JSON (why texts included)."""
    text = json.dumps(decisions_to_dict(decisions), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _timed(fn):
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one table (and JSON with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=9, help="in-process runs (parse/decide/encode)")
    ap.add_argument("--cli-runs", type=int, default=7, help="command-line runs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--snapshot-out", help="also keep the snapshot JSON at this path")
    ap.add_argument("--json", help="write results to this JSON file")
    args = ap.parse_args(argv)

    text = json.dumps(snapshot_to_dict(build_cold(args.seed)))
    if args.snapshot_out:
        path = Path(args.snapshot_out)
    else:
        fd, name = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        path = Path(name)
    path.write_text(text)

    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"load average {' '.join(load)}; snapshot {len(text) / 2**20:.1f} MiB JSON"
    )
    phases: dict[str, dict[str, list[float]]] = {
        p: {"wall": [], "cpu": []} for p in ("parse", "decide", "decide-nogc", "encode", "cli")
    }
    digests = set()
    starts = 0
    for _ in range(args.runs):
        snap, wall, cpu = _timed(lambda: snapshot_from_dict(json.loads(text)))
        phases["parse"]["wall"].append(wall)
        phases["parse"]["cpu"].append(cpu)
        clear_memos()
        decisions, wall, cpu = _timed(lambda s=snap: decide(s))
        phases["decide"]["wall"].append(wall)
        phases["decide"]["cpu"].append(cpu)
        clear_memos()
        cold = snapshot_from_dict(json.loads(text))
        gc.collect()
        gc.disable()
        try:
            again, wall, cpu = _timed(lambda s=cold: decide(s))
        finally:
            gc.enable()
        phases["decide-nogc"]["wall"].append(wall)
        phases["decide-nogc"]["cpu"].append(cpu)
        digests.add(fingerprint(again))
        _, wall, cpu = _timed(lambda d=decisions: dumps(decisions_to_dict(d), 2))
        phases["encode"]["wall"].append(wall)
        phases["encode"]["cpu"].append(cpu)
        digests.add(fingerprint(decisions))
        starts = len(decisions.start)
    cmd = [sys.executable, "-m", "scheduler.policy", "decide", str(path)]
    # As installed code runs: from cached bytecode (the first, uncounted run writes it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
    for _ in range(args.cli_runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
        phases["cli"]["wall"].append((time.perf_counter() - t0) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        child_cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        phases["cli"]["cpu"].append(child_cpu_s * 1000)
    if not args.snapshot_out:
        path.unlink()

    print(f"{'phase':<11} {'median ms':>10} {'cpu ms':>8} {'min ms':>8} {'max ms':>8}")
    results: dict[str, object] = {}
    for name, r in phases.items():
        if not r["wall"]:
            continue
        med = statistics.median(r["wall"])
        cpu_med = statistics.median(r["cpu"]) if r["cpu"] else None
        results[name] = {"median_ms": med, "cpu_median_ms": cpu_med, "runs": r["wall"]}
        cpu_txt = f"{cpu_med:>8.1f}" if cpu_med is not None else f"{'-':>8}"
        print(f"{name:<11} {med:>10.1f} {cpu_txt} {min(r['wall']):>8.1f} {max(r['wall']):>8.1f}")
    if len(digests) != 1:
        print(f"decisions differ between runs: {sorted(digests)}")
        return 1
    digest = digests.pop()
    print(f"starts {starts}; decisions sha256 {digest[:16]}")
    results.update(starts=starts, decisions_sha256=digest, load_average=load)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
