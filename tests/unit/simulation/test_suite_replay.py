"""Refactoring the engine keeps its decisions over whole replays, not only on one snapshot.

Short versions of three cases of the benchmark suite (``benchmarks/suite.py``: the first 300 jobs
of its synthetic 3x overload, ITP cluster06 and cluster02 cases, on the same clusters, seed 0)
replayed under ``gpuplatform`` give exactly the metrics the engine gave before it was split into
modules by rule (main at 706190f, when ``scheduler/policy/engine.py`` was one file). The
synthetic case preempts on most of its cycles, the ITP ones use every rule of the default
configuration (LAS queues, node-wise victims, defragmenting, the reservation gate, backfill).

A change meant to change decisions re-records these values (``{k: _replay(case, traces)[k] for
k in PINNED}``) and says so in its commit message; rule 4b (preempt only if that frees GPUs
sooner than running jobs' expected ends) did. At the
split all ten full suite cases (seed 0) were also compared, every metric but wall time: equal.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scheduler.simulation import SimConfig, simulate

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
        "decide_calls": 1019,
        "preemptions": 237,
        "lost_gpu_hours": 18.1,
        "avg_queue_s": 11069.827,
        "p95_queue_s": 69823.681,
        "max_queue_s": 121420.135,
        "avg_jct_s": 22555.58,
        "p99_jct_s": 155320.79506624496,
        "makespan_s": 287194.6777582602,
        "busy_gpu_hours": 3076.075,
        "idle_while_pending_frac": 0.016642,
    },
    "itp06-300": {
        "jobs": 300,
        "decide_calls": 669,
        "preemptions": 119,
        "lost_gpu_hours": 31.45,
        "avg_queue_s": 4680.417,
        "p95_queue_s": 18629.0,
        "max_queue_s": 279088.0,
        "avg_jct_s": 42231.773,
        "p99_jct_s": 532583.0,
        "makespan_s": 1550832.0,
        "busy_gpu_hours": 25591.551,
        "idle_while_pending_frac": 0.016485,
    },
    "itp02-300": {
        "jobs": 300,
        "decide_calls": 768,
        "preemptions": 72,
        "lost_gpu_hours": 16.4,
        "avg_queue_s": 10243.507,
        "p95_queue_s": 29357.0,
        "max_queue_s": 676069.0,
        "avg_jct_s": 27239.423,
        "p99_jct_s": 600273.0,
        "makespan_s": 1117983.0,
        "busy_gpu_hours": 8005.439,
        "idle_while_pending_frac": 0.066961,
    },
}


def _replay(case: str, traces: Path) -> dict:
    trace, cluster = CASES[case]
    metrics, _ = simulate(trace(traces, 0), cluster(traces), "gpuplatform", SimConfig(seed=0))
    return metrics


def test_synthetic_overload_replays_as_before_the_split():
    # the synthetic trace is generated: no files needed
    m = _replay("synthetic-3x-300", Path("/nonexistent"))
    assert {k: m[k] for k in PINNED} == BEFORE_THE_SPLIT["synthetic-3x-300"]


@pytest.mark.parametrize("case", ["itp06-300", "itp02-300"])
def test_itp_cases_replay_as_before_the_split(case, traces_dir):
    m = _replay(case, traces_dir)
    assert {k: m[k] for k in PINNED} == BEFORE_THE_SPLIT[case]
