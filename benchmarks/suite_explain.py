"""Where a suite case's waiting and its p99 JCT go: `gpuplatform` and baselines replayed, job by job.

    nice .venv/bin/python benchmarks/suite_explain.py itp07 [--seed 0] [--against tiresias]
        [--gpus 1] [--top 8] [--out var/benchmarks/explain-itp07.json]
    nice .venv/bin/python benchmarks/suite_explain.py itp02 itp03 ... --p99-only

The suite (benchmarks/suite.py) says whether a case meets a goal; this says where a miss comes
from. Four tables, from the replays of one seed:

- **By job size** (GPUs per job): the jobs, their average wait under each policy, what the size
  adds to the difference in the case's average wait (its jobs' waits minus the baseline's, over
  all of the case's jobs, so the rows sum to the difference), and the preemptions of each.
- **Why `gpuplatform`'s jobs waited**: every job-second of waiting charged to the reason the
  engine gave the job (`Pending.why`), with job ids and numbers folded so that one rule is one
  row. The time from one call of the engine to the next goes to the reason each waiting job was
  given at the first (between two calls nothing starts), so the rows sum to the jobs' waiting.
  `--gpus N` keeps only the jobs of N GPUs.
- **What `gpuplatform` preempted for**: its preemptions by the rule that made them (the reason up
  to its first colon: `attained service`, `defragment`, `submission order`, ...).
- **What its p99 JCT is made of**, against `fifo-backfill`'s (the p99 goal's baseline, replayed
  too unless it is ``--against``): the jobs that finish later after submission than the goal
  allows (1.05 x `fifo-backfill`'s p99 JCT), how many of them must finish sooner for the goal to
  hold (the p99 is the nearest rank), and, by job size, where their time went: waiting for the
  first start, waiting again after a preemption, and running (redone work and restarts
  included); and how many of them `fifo-backfill` also finishes that late.

The cases are those of every set of the suite (`suite.ALL_CASES`: the suite, held-out, shapes
and issue table); the replay is the suite's (its default conditions).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402

from scheduler.simulation import simulate  # noqa: E402
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy  # noqa: E402
from scheduler.simulation.metrics import percentile  # noqa: E402
from scheduler.simulation.runner import make_policy  # noqa: E402
from scheduler.simulation.simulator import SimJob, Simulator  # noqa: E402
from scheduler.simulation.traces import default_traces_dir  # noqa: E402

# A job id: a word of several dash-joined parts with a digit in it (the ITP traces' UUIDs,
# `syn-000042`, `openb-pod-0017`). Folded before numbers, so that its digits do not become them.
_JOB_ID = re.compile(r"\b(?=[\w.-]*\d)[\w.]+(?:-[\w.]+)+")
_TIME = re.compile(r"t=[0-9][0-9.:dhms]*")
_NUMBER = re.compile(r"\d[\d,.]*")


def fold_reason(why: str) -> str:
    """``why`` with job ids, times and numbers replaced, so that one rule's reasons are one row."""
    return _NUMBER.sub("N", _TIME.sub("t=T", _JOB_ID.sub("JOB", why)))


def preemption_rule(reason: str) -> str:
    """The rule a preemption's reason names: the text before its first colon."""
    return reason.split(":", 1)[0].strip() or "(no reason)"


@dataclass
class ReasonClock:
    """Charges a policy's waiting jobs' time to the reasons its last call gave them, and counts
    its preemptions by rule. ``attach`` it to a `GpuPlatformPolicy` before the replay."""

    waiting_s: Counter = field(default_factory=Counter)  # (GPUs, folded why) -> job-seconds
    preempted: Counter = field(default_factory=Counter)  # rule -> preemptions the replay made
    _last_call: float | None = None
    _waiting: list[tuple[int, str]] = field(default_factory=list)

    def attach(self, policy: GpuPlatformPolicy) -> None:
        apply = policy.apply

        def apply_and_charge(sim: Simulator, now: float, decisions) -> None:
            self._charge(now)
            victims = [(sim.by_id[p.job], p.reason) for p in decisions.preempt]
            before = [job.preemptions for job, _ in victims]
            apply(sim, now, decisions)
            for (job, reason), count in zip(victims, before, strict=True):
                if job.preemptions > count:  # the simulator refuses some (already stopping)
                    self.preempted[preemption_rule(reason)] += 1
            by_id = sim.by_id
            self._waiting = [(by_id[p.job].gpus, fold_reason(p.why)) for p in decisions.pending]

        policy.apply = apply_and_charge

    def _charge(self, now: float) -> None:
        if self._last_call is not None and now > self._last_call:
            elapsed = now - self._last_call
            for key in self._waiting:
                self.waiting_s[key] += elapsed
        self._last_call = now


def size_rows(ours: Sequence[SimJob], theirs: Sequence[SimJob]) -> list[dict]:
    """Per GPUs per job: jobs, average wait under each policy, what the size adds to the
    difference in the average wait over all jobs, and preemptions. Same jobs on both sides."""
    theirs_by_id = {j.id: j for j in theirs}
    n = len(ours)
    groups: dict[int, list[tuple[SimJob, SimJob]]] = {}
    for job in ours:
        groups.setdefault(job.gpus, []).append((job, theirs_by_id[job.id]))
    rows = []
    for gpus in sorted(groups):
        pairs = groups[gpus]
        ours_wait = sum(a.queue_s for a, _ in pairs)
        theirs_wait = sum(b.queue_s for _, b in pairs)
        rows.append(
            {
                "gpus": gpus,
                "jobs": len(pairs),
                "avg_wait_s": ours_wait / len(pairs),
                "against_avg_wait_s": theirs_wait / len(pairs),
                "adds_s": (ours_wait - theirs_wait) / n,
                "preemptions": sum(a.preemptions for a, _ in pairs),
                "against_preemptions": sum(b.preemptions for _, b in pairs),
            }
        )
    return rows


def reason_rows(waiting_s: Counter, gpus: int | None, top: int) -> list[dict]:
    """The ``top`` reasons by job-seconds (of jobs of ``gpus`` GPUs, or all), each with its share
    of their waiting, and the rest in one row."""
    by_reason: Counter = Counter()
    for (size, why), seconds in waiting_s.items():
        if gpus is None or size == gpus:
            by_reason[why] += seconds
    total = sum(by_reason.values())
    rows = [
        {"why": why, "job_s": s, "share": s / total if total else 0.0}
        for why, s in by_reason.most_common(top)
    ]
    rest = total - sum(r["job_s"] for r in rows)
    if rest > 0:
        rows.append({"why": "(every other reason)", "job_s": rest, "share": rest / total})
    return rows


# The p99 goal of issue 21: `gpuplatform`'s p99 JCT within this factor of `fifo-backfill`'s.
P99_GOAL_FACTOR = 1.05


def _jct_s(job: SimJob) -> float:
    assert job.finish is not None  # every job of a replay finishes
    return job.finish - job.submit


def p99_rows(ours: Sequence[SimJob], fifo: Sequence[SimJob]) -> dict:
    """What stands between `gpuplatform`'s p99 JCT and the goal (``P99_GOAL_FACTOR`` x the
    nearest-rank p99 of ``fifo``'s JCTs): the jobs over that limit, by GPUs per job, with the
    medians of where their time went; the same jobs' JCT under ``fifo``."""
    fifo_by_id = {j.id: j for j in fifo}
    fifo_p99 = percentile(sorted(_jct_s(j) for j in fifo), 99)
    ours_p99 = percentile(sorted(_jct_s(j) for j in ours), 99)
    limit = P99_GOAL_FACTOR * fifo_p99
    # The p99 is the job at rank ceil(0.99 n): it is within the limit iff at most n - rank jobs
    # are over it.
    allowed = max(0, len(ours) - max(1, math.ceil(0.99 * len(ours))))
    over = [j for j in ours if _jct_s(j) > limit]
    groups: dict[int, list[SimJob]] = {}
    for job in over:
        groups.setdefault(job.gpus, []).append(job)
    rows = []
    for gpus in sorted(groups):
        jobs = groups[gpus]
        first_wait = [(j.first_start or j.submit) - j.submit for j in jobs]
        rows.append(
            {
                "gpus": gpus,
                "jobs": len(jobs),
                "jct_s": statistics.median(_jct_s(j) for j in jobs),
                "first_wait_s": statistics.median(first_wait),
                "wait_after_s": statistics.median(
                    j.queue_s - w for j, w in zip(jobs, first_wait, strict=True)
                ),
                "running_s": statistics.median(_jct_s(j) - j.queue_s for j in jobs),
                "preempted": sum(1 for j in jobs if j.preemptions),
                "preemptions": statistics.median(j.preemptions for j in jobs),
                "fifo_jct_s": statistics.median(_jct_s(fifo_by_id[j.id]) for j in jobs),
                "fifo_over": sum(1 for j in jobs if _jct_s(fifo_by_id[j.id]) > limit),
            }
        )
    total_s = sum(_jct_s(j) for j in over)
    wait_after_s = sum(j.queue_s - ((j.first_start or j.submit) - j.submit) for j in over)
    return {
        "p99_jct_s": ours_p99,
        "fifo_p99_jct_s": fifo_p99,
        "limit_s": limit,
        "over": len(over),
        "allowed": allowed,
        "wait_after_share": wait_after_s / total_s if total_s else 0.0,
        "rows": rows,
    }


def explain(trace, cluster, seed: int, against: str) -> dict:
    """Replay ``trace`` on ``cluster`` under `gpuplatform` (with a `ReasonClock`), under
    ``against`` and, for the p99 table, under `fifo-backfill`, in the suite's default conditions;
    the four tables' data."""
    ours = make_policy("gpuplatform")
    clock = ReasonClock()
    clock.attach(ours)
    config = suite.Conditions().sim_config(seed)
    ours_metrics, ours_sim = simulate(trace, cluster, ours, config)
    theirs_metrics, theirs_sim = simulate(trace, cluster, make_policy(against), config)
    fifo_sim = theirs_sim
    if against != "fifo-backfill":
        _, fifo_sim = simulate(trace, cluster, make_policy("fifo-backfill"), config)
    return {
        "seed": seed,
        "against": against,
        "avg_wait_s": ours_metrics["avg_queue_s"],
        "against_avg_wait_s": theirs_metrics["avg_queue_s"],
        "by_size": size_rows(ours_sim.jobs, theirs_sim.jobs),
        "waiting_s": clock.waiting_s,
        "preempted": dict(clock.preempted.most_common()),
        "preemptions": ours_sim.preemptions,
        "p99": p99_rows(ours_sim.jobs, fifo_sim.jobs),
    }


def render(name: str, result: dict, gpus: int | None, top: int) -> str:
    against = result["against"]
    out = [
        f"{name}, seed {result['seed']}: average wait `gpuplatform` {result['avg_wait_s']:,.0f} s, "
        f"`{against}` {result['against_avg_wait_s']:,.0f} s "
        f"({result['avg_wait_s'] - result['against_avg_wait_s']:+,.0f} s)",
        "",
        f"| GPUs per job | jobs | avg wait s: `gpuplatform` / `{against}` | adds s | "
        f"preemptions: `gpuplatform` / `{against}` |",
        "|---:|---:|---|---:|---|",
    ]
    for r in result["by_size"]:
        out.append(
            f"| {r['gpus']} | {r['jobs']:,} | {r['avg_wait_s']:,.0f} / "
            f"{r['against_avg_wait_s']:,.0f} | {r['adds_s']:+,.1f} | "
            f"{r['preemptions']:,} / {r['against_preemptions']:,} |"
        )
    chosen = "jobs" if gpus is None else f"jobs of {gpus} GPU{'s' if gpus != 1 else ''}"
    out += ["", f"| why `gpuplatform`'s {chosen} waited | job-seconds | share |", "|---|---:|---:|"]
    for r in reason_rows(result["waiting_s"], gpus, top):
        out.append(f"| {r['why']} | {r['job_s']:,.0f} | {100 * r['share']:.1f} % |")
    out += ["", "| `gpuplatform` preempted for | preemptions |", "|---|---:|"]
    out += [f"| {rule} | {count:,} |" for rule, count in result["preempted"].items()]
    return "\n".join(out + ["", render_p99(result["p99"])])


def render_p99(p99: dict) -> str:
    over, allowed = p99["over"], p99["allowed"]
    verdict = (
        "the goal holds"
        if over <= allowed
        else f"{over - allowed:,} of them must finish sooner for the goal to hold"
    )
    out = [
        f"p99 JCT: `gpuplatform` {p99['p99_jct_s']:,.0f} s, `fifo-backfill` "
        f"{p99['fifo_p99_jct_s']:,.0f} s, limit {p99['limit_s']:,.0f} s; {over:,} jobs finish "
        f"later than the limit, {allowed:,} may: {verdict}; waiting after a preemption is "
        f"{100 * p99['wait_after_share']:.0f} % of their JCT",
        "",
        "| GPUs per job | jobs over the limit | JCT s | waiting for the first start s | "
        "waiting after preemptions s | running s | preempted (median times) | "
        "`fifo-backfill`: JCT s, jobs over the limit |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in p99["rows"]:
        out.append(
            f"| {r['gpus']} | {r['jobs']:,} | {r['jct_s']:,.0f} | {r['first_wait_s']:,.0f} | "
            f"{r['wait_after_s']:,.0f} | {r['running_s']:,.0f} | {r['preempted']:,} "
            f"({r['preemptions']:g}) | {r['fifo_jct_s']:,.0f}, {r['fifo_over']:,} |"
        )
    out.append("(medians over each row's jobs)")
    return "\n".join(out)


def _case(name: str, cases: Iterable[suite.Case]) -> suite.Case | None:
    return next((c for c in cases if c.name == name), None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "cases", nargs="+", metavar="case", help="cases of any of the suite's sets (ALL_CASES)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--against", default="tiresias", help="the baseline policy (default tiresias)")
    ap.add_argument("--gpus", type=int, help="only the waiting of jobs of this many GPUs")
    ap.add_argument("--top", type=int, default=8, help="reasons listed (default 8)")
    ap.add_argument("--traces", type=Path, default=default_traces_dir())
    ap.add_argument("--out", type=Path, help="also write the data as JSON here (one case only)")
    ap.add_argument("--p99-only", action="store_true", help="print only the p99 table of each case")
    args = ap.parse_args(argv)
    cases = [_case(name, suite.ALL_CASES) for name in args.cases]
    unknown = [name for name, case in zip(args.cases, cases, strict=True) if case is None]
    if unknown:
        ap.error(
            f"unknown case {unknown[0]!r}; expected one of {[c.name for c in suite.ALL_CASES]}"
        )
    if args.out and len(cases) > 1:
        ap.error("--out takes one case")
    if args.seed < 0 or args.top < 1 or (args.gpus is not None and args.gpus < 1):
        ap.error("--seed must be >= 0, --top and --gpus >= 1")
    try:
        make_policy(args.against)
    except ValueError as e:
        ap.error(str(e))
    for case in cases:
        assert case is not None  # refused above
        cluster = suite.Conditions().cluster(case, args.traces, args.seed)
        result = explain(case.trace(args.traces, args.seed), cluster, args.seed, args.against)
        if args.p99_only:
            print(f"{case.name}, seed {args.seed}: {render_p99(result['p99'])}\n")
        else:
            print(render(case.name, result, args.gpus, args.top))
    if args.out:
        data = dict(result, waiting_s=[[g, why, s] for (g, why), s in result["waiting_s"].items()])
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(data, indent=1))
        except OSError as e:
            print(f"suite_explain.py: cannot write {args.out}: {e.strerror}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
