"""How fast could an engine that keeps its plans between calls replay? An upper bound on the gain.

    nice .venv/bin/python benchmarks/incremental_bound.py [--cases a,b] [--held-out] [--seeds 0]
        [--out var/benchmarks/incremental_bound.json]

The wall-time goal of issue 21 (`gpuplatform`'s replay within 4x of `tiresias`') points at an
engine that keeps its plans between calls and re-plans only what changed. Before anyone writes
one: what would it save, at best? Each case is replayed under `gpuplatform` with every phase of
every call timed (the adapter's snapshot, the cycle's setup, the queue order, each pending job's
walk step, applying the result) and each walk step's outcome recorded (the starts, preemptions,
reservations, resizes and the `Pending` it added). A call's walk is compared with the previous
call's, position by position: the longest common prefix of (job, outcome) is what a perfect
incremental engine would not redo.

The bound credits that engine with everything it could conceivably keep, and charges nothing
for knowing what changed:

- ``keep prefix``: the snapshot, setup, order and apply as today, the walk only from the first
  job whose outcome differs from the last call's (a call that decides exactly what the last one
  did walks nothing);
- ``keep all``: the same walk, and no snapshot, setup or order at all (as if each were kept up
  to date for free);
- ``changed only``: no snapshot, setup or order, and a walk that pays only for the jobs whose
  (job, outcome) did not occur in the last call, wherever they stand in the queue: an engine
  that knows for free exactly which outcomes changed;
- ``no engine``: the replay with the same calls and an engine that costs nothing (the simulator
  and applying the decisions only): the floor of any engine that is called as often.

Each is reported as a replay wall time over `tiresias`' (timed in the same process, without
instrumentation), scaled from the instrumented replay by the fraction of its time each part
took, so the timers' own cost cancels (the plain replays' times are medians of ``--rounds``,
alternating with `tiresias`'). The instrumented replay must decide exactly as the plain one (a
SHA-256 over every call's decisions), or the run stops. Replays run one at a time in this
process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402
from engine_ab import hashed_decisions  # noqa: E402

from scheduler.policy import engine  # noqa: E402
from scheduler.simulation import SimConfig, simulate  # noqa: E402
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy  # noqa: E402
from scheduler.simulation.runner import make_policy  # noqa: E402
from scheduler.simulation.traces import default_traces_dir  # noqa: E402

clock = time.perf_counter


class _Recorder:
    """The phase times of every call, summed, and the bounds' walk sums, computed call by call
    against the previous call's walk (the only one kept: holding every call's walk would grow the
    heap and slow the replay's garbage collection, which the bound would then count)."""

    def __init__(self) -> None:
        self.calls = 0
        self.calls_same_as_last = 0
        self.steps = 0
        self.seconds = dict.fromkeys(("snapshot", "setup", "order", "apply", "walk"), 0.0)
        self.walk_suffix_s = 0.0  # from the first step that differs from the last call's
        self.walk_changed_s = 0.0  # steps that did not occur in the last call
        self.recording_s = 0.0  # the recording's own time, taken out of every phase
        self.digest = hashlib.sha256()  # every call's decisions, whys and estimates included
        self.previous: list[tuple[str, str]] = []
        self.walked: list[tuple[str, str, float]] = []  # this call's steps

    def add_call(self, walked: list[tuple[str, str, float]]) -> None:
        steps = [(job, outcome) for job, outcome, _ in walked]
        previous = self.previous
        seen = set(previous)
        self.walk_changed_s += sum(t for job, outcome, t in walked if (job, outcome) not in seen)
        k = 0
        for now_step, last_step in zip(steps, previous, strict=False):
            if now_step != last_step:
                break
            k += 1
        if k == len(steps) == len(previous):
            self.calls_same_as_last += 1
        self.walk_suffix_s += sum(t for _, _, t in walked[k:])
        self.calls += 1
        self.steps += len(steps)
        self.previous = steps


def _timed_cycle(rec: _Recorder) -> type:
    class TimedCycle(engine._Cycle):
        def consider(self, job):  # type: ignore[no-untyped-def]
            t_start = clock()
            lists = (self.starts, self.preempts, self.reserves, self.resizes, self.pendings)
            before = [len(x) for x in lists]
            t0 = clock()
            super().consider(job)
            t1 = clock()
            outcome = repr([x[n:] for x, n in zip(lists, before, strict=True)])
            rec.walked.append((job.id, outcome, t1 - t0))
            rec.recording_s += (t0 - t_start) + (clock() - t1)

    return TimedCycle


class TimedPolicy(GpuPlatformPolicy):
    """The gpuplatform adapter with each phase of a call timed and each walk step recorded."""

    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec
        self.cycle_type = _timed_cycle(rec)

    def schedule(self, sim, now):  # type: ignore[no-untyped-def]
        rec = self.rec
        rec.walked = []
        recording_before = rec.recording_s
        t0 = clock()
        snap = self.snapshot(sim, now)
        t1 = clock()
        cycle = self.cycle_type(snap)
        t2 = clock()
        decisions = cycle.run()
        t3 = clock()
        self.apply(sim, now, decisions)
        t4 = clock()
        walk = sum(t for _, _, t in rec.walked)
        seconds = rec.seconds
        seconds["snapshot"] += t1 - t0
        seconds["setup"] += t2 - t1
        # the order, and the rest of run() around the walk
        seconds["order"] += t3 - t2 - walk - (rec.recording_s - recording_before)
        seconds["apply"] += t4 - t3
        seconds["walk"] += walk
        rec.digest.update(repr(decisions).encode())
        rec.add_call(rec.walked)
        rec.recording_s += clock() - t4


def _replay(trace, cluster, seed: int, policy) -> float:  # type: ignore[no-untyped-def]
    t0 = clock()
    simulate(trace, cluster, policy, SimConfig(seed=seed), timer=clock)
    return clock() - t0


def _digest(trace, cluster, seed: int) -> str:  # type: ignore[no-untyped-def]
    """The decisions' SHA-256 of a plain `gpuplatform` replay (untimed), as engine_ab checks."""
    policy = make_policy("gpuplatform")
    digest = hashed_decisions(policy)
    _replay(trace, cluster, seed, policy)
    return digest.hexdigest()


def bound(trace, cluster, seed: int, rounds: int = 3) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The bounds for one replay; the plain replays' times are medians of ``rounds``, taken
    alternately with `tiresias`' so that the machine's load reaches both alike."""
    tiresias, plain = [], []
    for _ in range(rounds):
        tiresias.append(_replay(trace, cluster, seed, make_policy("tiresias")))
        plain.append(_replay(trace, cluster, seed, make_policy("gpuplatform")))
    tiresias_s, plain_s = statistics.median(tiresias), statistics.median(plain)
    rec = _Recorder()
    timed_s = _replay(trace, cluster, seed, TimedPolicy(rec))
    if rec.digest.hexdigest() != _digest(trace, cluster, seed):
        raise AssertionError("the instrumented replay decided differently")
    sec = rec.seconds
    fixed = sec["snapshot"] + sec["setup"] + sec["order"]
    apply_s, walk = sec["apply"], sec["walk"]
    timed_s -= rec.recording_s
    rest = timed_s - fixed - apply_s - walk  # the simulator's own work
    scale = plain_s / timed_s

    def ratio(seconds: float) -> float:
        return seconds * scale / tiresias_s

    return {
        "tiresias_s": tiresias_s,
        "gpuplatform_s": plain_s,
        "calls": rec.calls,
        "calls_same_as_last": rec.calls_same_as_last,
        "steps": rec.steps,
        "walk_share": walk / timed_s,
        "walk_kept_share": (walk - rec.walk_suffix_s) / walk if walk else 0.0,
        "fixed_share": fixed / timed_s,
        "simulator_share": rest / timed_s,
        "now_x": plain_s / tiresias_s,
        "keep_prefix_x": ratio(rest + apply_s + fixed + rec.walk_suffix_s),
        "keep_all_x": ratio(rest + apply_s + rec.walk_suffix_s),
        "changed_only_x": ratio(rest + apply_s + rec.walk_changed_s),
        "no_engine_x": ratio(rest + apply_s),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default="", help="comma-separated case names (default: the set)")
    ap.add_argument("--held-out", action="store_true", help="the held-out cases")
    ap.add_argument("--seeds", type=suite.seed_list, default=[0])
    ap.add_argument("--rounds", type=int, default=3, help="plain replays per policy (median)")
    ap.add_argument("--out", default="var/benchmarks/incremental_bound.json")
    args = ap.parse_args(argv)
    cases = suite.HELD_OUT if args.held_out else suite.CASES
    if args.cases:
        wanted = args.cases.split(",")
        cases = [c for c in suite.ALL_CASES if c.name in wanted]
    traces = default_traces_dir()
    rows: dict[str, dict[str, float]] = {}
    print(
        "| case | calls (same as the last) | walk, share of the replay | of it kept (same prefix)"
        " | snapshot + setup + order | simulator | now / `tiresias` | keep prefix | keep all"
        " | changed only | no engine |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        per_seed = [
            bound(case.trace(traces, seed), case.cluster(traces), seed, args.rounds)
            for seed in args.seeds
        ]
        row = {k: statistics.median(r[k] for r in per_seed) for k in per_seed[0]}
        rows[case.name] = row
        print(
            f"| {case.name} | {row['calls']:,.0f} ({row['calls_same_as_last']:,.0f}) "
            f"| {row['walk_share']:.0%} | {row['walk_kept_share']:.0%} "
            f"| {row['fixed_share']:.0%} | {row['simulator_share']:.0%} "
            f"| {row['now_x']:.1f}x | {row['keep_prefix_x']:.1f}x | {row['keep_all_x']:.1f}x "
            f"| {row['changed_only_x']:.1f}x | {row['no_engine_x']:.1f}x |",
            flush=True,
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
