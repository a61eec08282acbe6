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
checkpoint after its preemption instead of at the end of its grace. At the
split all ten full suite cases (seed 0) were also compared, every metric but wall time: equal.
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
        "decide_calls": 1055,
        "preemptions": 287,
        "lost_gpu_hours": 13.517,
        "avg_queue_s": 10589.75,
        "p95_queue_s": 65795.612,
        "max_queue_s": 117107.435,
        "avg_jct_s": 22062.603,
        "p99_jct_s": 155012.73875422595,
        "makespan_s": 294909.6777582602,
        "busy_gpu_hours": 3071.492,
        "idle_while_pending_frac": 0.010704,
    },
    "itp06-300": {
        "jobs": 300,
        "decide_calls": 632,
        "preemptions": 104,
        "lost_gpu_hours": 18.667,
        "avg_queue_s": 3244.75,
        "p95_queue_s": 15218.0,
        "max_queue_s": 281188.0,
        "avg_jct_s": 40783.107,
        "p99_jct_s": 532583.0,
        "makespan_s": 1552632.0,
        "busy_gpu_hours": 25578.768,
        "idle_while_pending_frac": 0.006164,
    },
    "itp02-300": {
        "jobs": 300,
        "decide_calls": 777,
        "preemptions": 86,
        "lost_gpu_hours": 11.183,
        "avg_queue_s": 11710.403,
        "p95_queue_s": 56202.0,
        "max_queue_s": 685415.0,
        "avg_jct_s": 28702.62,
        "p99_jct_s": 577189.0,
        "makespan_s": 1112899.0,
        "busy_gpu_hours": 8000.222,
        "idle_while_pending_frac": 0.072595,
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
# that default changed (5 December); a change meant to change decisions re-records these too.
DEFAULTS = {
    "synthetic-3x-300": {
        "jobs": 300,
        "decide_calls": 994,
        "preemptions": 197,
        "lost_gpu_hours": 10.383,
        "avg_queue_s": 10093.345,
        "p95_queue_s": 73891.575,
        "max_queue_s": 117523.193,
        "avg_jct_s": 21550.198,
        "p99_jct_s": 153341.45603013257,
        "makespan_s": 286215.38550064916,
        "busy_gpu_hours": 3068.359,
        "idle_while_pending_frac": 0.023472,
    },
    "itp06-300": {
        "jobs": 300,
        "decide_calls": 611,
        "preemptions": 64,
        "lost_gpu_hours": 13.9,
        "avg_queue_s": 3060.95,
        "p95_queue_s": 11892.0,
        "max_queue_s": 275788.0,
        "avg_jct_s": 40592.707,
        "p99_jct_s": 530037.0,
        "makespan_s": 1547232.0,
        "busy_gpu_hours": 25574.001,
        "idle_while_pending_frac": 0.008184,
    },
    "itp02-300": {
        "jobs": 300,
        "decide_calls": 762,
        "preemptions": 73,
        "lost_gpu_hours": 11.233,
        "avg_queue_s": 10485.25,
        "p95_queue_s": 41928.0,
        "max_queue_s": 627205.0,
        "avg_jct_s": 27474.867,
        "p99_jct_s": 551832.0,
        "makespan_s": 1092489.0,
        "busy_gpu_hours": 8000.273,
        "idle_while_pending_frac": 0.058361,
    },
}


@pytest.mark.parametrize("case", list(DEFAULTS))
def test_the_default_configuration_replays_as_recorded(case, traces_dir):
    trace, cluster = CASES[case]
    m, _ = simulate(trace(traces_dir, 0), cluster(traces_dir), "gpuplatform", SimConfig(seed=0))
    assert {k: m[k] for k in PINNED} == DEFAULTS[case]
