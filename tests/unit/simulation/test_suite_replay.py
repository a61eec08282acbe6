"""Refactoring the engine keeps its decisions over whole replays, not only on one snapshot.

Short versions of three cases of the benchmark suite (``benchmarks/suite.py``: the first 300 jobs
of its synthetic 3x overload, ITP cluster06 and cluster02 cases, on the same clusters, seed 0)
replayed under ``gpuplatform`` with every rule on give exactly the metrics the engine gave before
it was split into modules by rule (main at 706190f, when ``scheduler/policy/engine.py`` was one
file). The synthetic case preempts on most of its cycles, the ITP ones use every rule (LAS
queues, the one-node submission order, off by default since 5 December, node-wise victims,
defragmenting, the reservation gate, backfill).

A change meant to change decisions re-records these values (``{k: _replay(case, traces)[k] for
k in PINNED}``) and says so in its commit message; rule 4b (preempt only if that frees GPUs
sooner than running jobs' expected ends) did, and so did stopping a victim once it has saved a
checkpoint after its preemption instead of at the end of its grace, and so did the replay's
wake-ups when a demoted job saves its first checkpoint and when a running job outruns its
expected end (5 December: the engine did not change, the times it is called did), and so did
taking a victim of the preempting job's own class youngest run first (6 December). At the split
all ten full suite cases (seed 0) were also compared, every metric but wall time: equal.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scheduler.simulation import SimConfig, simulate
from scheduler.simulation.runner import engine_variant

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import suite  # noqa: E402

PINNED = (
    "jobs",
    "decide_calls",
    "preemptions",
    "lost_gpu_hours",
    "avg_queue_s",
    "p95_queue_s",
    "max_queue_s",
    "avg_jct_s",
    "p99_jct_s",
    "makespan_s",
    "busy_gpu_hours",
    "idle_while_pending_frac",
)

# (trace builder, cluster builder) of the suite, cut to 300 jobs.
CASES = {
    "synthetic-3x-300": (suite._synthetic(300, 8, 3.0), suite._nodes(8)),
    "itp06-300": (suite._itp("06", 300), suite._nodes(12)),
    "itp02-300": (suite._itp("02", 300), suite._nodes(8)),
}

BEFORE_THE_SPLIT = {
    "synthetic-3x-300": {
        "jobs": 300,
        "decide_calls": 1722,
        "preemptions": 296,
        "lost_gpu_hours": 13.683,
        "avg_queue_s": 10345.415,
        "p95_queue_s": 63856.595,
        "max_queue_s": 117629.354,
        "avg_jct_s": 21819.669,
        "p99_jct_s": 157049.58188821241,
        "makespan_s": 284961.2459456522,
        "busy_gpu_hours": 3071.659,
        "idle_while_pending_frac": 0.021074,
    },
    "itp06-300": {
        "jobs": 300,
        "decide_calls": 850,
        "preemptions": 118,
        "lost_gpu_hours": 20.1,
        "avg_queue_s": 5806.347,
        "p95_queue_s": 37642.0,
        "max_queue_s": 286588.0,
        "avg_jct_s": 43347.103,
        "p99_jct_s": 532583.0,
        "makespan_s": 1558032.0,
        "busy_gpu_hours": 25580.201,
        "idle_while_pending_frac": 0.019886,
    },
    "itp02-300": {
        "jobs": 300,
        "decide_calls": 1086,
        "preemptions": 96,
        "lost_gpu_hours": 31.817,
        "avg_queue_s": 8649.213,
        "p95_queue_s": 26832.0,
        "max_queue_s": 541419.0,
        "avg_jct_s": 25643.03,
        "p99_jct_s": 499868.000001,
        "makespan_s": 1345190.000001,
        "busy_gpu_hours": 8020.856,
        "idle_while_pending_frac": 0.210472,
    },
}


def _replay(case: str, traces: Path) -> dict:
    trace, cluster = CASES[case]
    # Every rule on: the one-node submission-order rule, off by default since 5 December, too.
    policy = engine_variant("gpuplatform", {"las": {"fifo_one_node_after_s": 600}})
    metrics, _ = simulate(trace(traces, 0), cluster(traces), policy, SimConfig(seed=0))
    return metrics


def test_synthetic_overload_replays_as_before_the_split():
    # the synthetic trace is generated: no files needed
    m = _replay("synthetic-3x-300", Path("/nonexistent"))
    assert {k: m[k] for k in PINNED} == BEFORE_THE_SPLIT["synthetic-3x-300"]


@pytest.mark.parametrize("case", ["itp06-300", "itp02-300"])
def test_itp_cases_replay_as_before_the_split(case, traces_dir):
    m = _replay(case, traces_dir)
    assert {k: m[k] for k in PINNED} == BEFORE_THE_SPLIT[case]


# The same replays with the default configuration (the one-node FIFO rule off), recorded when
# that default changed, again with the replay's new wake-ups (5 December) and with peers' youngest
# runs preempted first (6 December); a change meant to change decisions re-records these too.
DEFAULTS = {
    "synthetic-3x-300": {
        "jobs": 300,
        "decide_calls": 1615,
        "preemptions": 215,
        "lost_gpu_hours": 11.033,
        "avg_queue_s": 10988.413,
        "p95_queue_s": 76605.072,
        "max_queue_s": 120308.843,
        "avg_jct_s": 22447.266,
        "p99_jct_s": 156895.41392865163,
        "makespan_s": 286858.5010104707,
        "busy_gpu_hours": 3069.009,
        "idle_while_pending_frac": 0.024047,
    },
    "itp06-300": {
        "jobs": 300,
        "decide_calls": 811,
        "preemptions": 78,
        "lost_gpu_hours": 13.967,
        "avg_queue_s": 3720.383,
        "p95_queue_s": 14156.0,
        "max_queue_s": 284848.0,
        "avg_jct_s": 41254.74,
        "p99_jct_s": 530037.0,
        "makespan_s": 1556232.0,
        "busy_gpu_hours": 25574.068,
        "idle_while_pending_frac": 0.012615,
    },
    "itp02-300": {
        "jobs": 300,
        "decide_calls": 1029,
        "preemptions": 78,
        "lost_gpu_hours": 11.083,
        "avg_queue_s": 7925.023,
        "p95_queue_s": 57769.0,
        "max_queue_s": 298859.0,
        "avg_jct_s": 24915.44,
        "p99_jct_s": 396092.0,
        "makespan_s": 1071568.0,
        "busy_gpu_hours": 8000.123,
        "idle_while_pending_frac": 0.056933,
    },
}


@pytest.mark.parametrize("case", list(DEFAULTS))
def test_the_default_configuration_replays_as_recorded(case, traces_dir):
    trace, cluster = CASES[case]
    m, _ = simulate(trace(traces_dir, 0), cluster(traces_dir), "gpuplatform", SimConfig(seed=0))
    assert {k: m[k] for k in PINNED} == DEFAULTS[case]
