"""``benchmarks/incremental_bound.py``: the instrumented replay decides as the plain one, records a
walk step for every pending job of every call, and its bounds are ordered as their definitions
say (each keeps more than the one before)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from scheduler.simulation import SimConfig, simulate, uniform_cluster
from scheduler.simulation.runner import make_policy

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import incremental_bound  # noqa: E402
import suite  # noqa: E402


@pytest.fixture(scope="module")
def overloaded():
    """Twice the capacity of two nodes, so that jobs wait, are preempted and get reservations."""
    trace = suite._synthetic(160, 2, 2.0)(Path("."), 0)
    return trace, uniform_cluster(2, 8)


def test_every_pending_job_of_every_call_is_one_recorded_step(overloaded):
    trace, cluster = overloaded
    row = incremental_bound.bound(trace, cluster, 0, rounds=1)  # raises if it decided otherwise
    walked = []
    policy = make_policy("gpuplatform")
    apply = policy.apply

    def counting_apply(sim, now, decisions):
        # each job waiting at the call is walked once: it starts or is told why it waits
        walked.append(len(decisions.start) + len(decisions.pending))
        apply(sim, now, decisions)

    policy.apply = counting_apply
    _, sim = simulate(trace, cluster, policy, SimConfig(seed=0))
    assert row["calls"] == sim.decide_calls == len(walked)
    assert row["steps"] == sum(walked) > row["calls"]


def test_the_bounds_keep_more_in_the_order_they_are_defined(overloaded):
    trace, cluster = overloaded
    row = incremental_bound.bound(trace, cluster, 0, rounds=1)
    assert 0 < row["calls_same_as_last"] < row["calls"]
    assert 0 < row["walk_kept_share"] < 1
    assert (
        0
        < row["no_engine_x"]
        <= row["changed_only_x"]
        <= row["keep_all_x"]
        <= row["keep_prefix_x"]
        <= row["now_x"]
    )
    # the simulator's share is what is left of the replay: the recording's own time, taken out of
    # every phase, must not have been taken out twice
    assert row["simulator_share"] > 0
    shares = row["walk_share"] + row["fixed_share"] + row["simulator_share"]
    assert 0.9 < shares < 1.0  # the rest is applying the decisions


def test_a_recorder_that_changed_a_decision_stops_the_run(overloaded, monkeypatch):
    trace, cluster = overloaded
    timed_cycle = incremental_bound._timed_cycle
    dropped = []

    def dropping_a_start(rec):
        class Dropping(timed_cycle(rec)):
            def run(self):
                decisions = super().run()
                if dropped or not decisions.start:
                    return decisions
                dropped.append(decisions.start[0])  # once: the next call starts it
                return dataclasses.replace(decisions, start=decisions.start[1:])

        return Dropping

    monkeypatch.setattr(incremental_bound, "_timed_cycle", dropping_a_start)
    with pytest.raises(AssertionError, match="decided differently"):
        incremental_bound.bound(trace, cluster, 0, rounds=1)
