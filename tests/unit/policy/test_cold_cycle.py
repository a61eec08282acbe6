"""Speed work on the engine keeps its decisions: on the cold-cycle snapshots of
``benchmarks/cold_cycle.py`` (1,000 nodes, 5,000 running, 10,000 pending, ~900 starts) and the
``large`` snapshot of ``benchmarks/policy_cycle.py``, ``decide`` gives exactly the decisions
(why texts included) the engine gave before the speed work (main at 122e409), for every queue
order and with the attained-service queues off; with or without the engine's cross-call memos.

A rule change that is meant to change decisions re-records the digests below (print them with
``benchmarks/cold_cycle.py --runs 1 --cli-runs 0`` or this module's ``_digest``) and says so in
its commit message. ``cold-1``, ``cold-3`` and ``large-1`` were re-recorded for rule 4b (preempt
only if that frees GPUs sooner than running jobs' expected ends): the same starts, fewer
preemptions. Every digest was re-recorded when jobs within their team's guarantee came to go
before borrowing ones of their rank (rule 3; these snapshots have quotas): as many GPUs start,
given to other teams' jobs (cold-1 855 starts instead of 857, cold-3 940 instead of 955,
large-1 688 instead of 687; cold-3 also preempts two jobs for a production gang). And again
when a job that would borrow came to say so in its why: the same decisions, the why of about
2,100 pending jobs per snapshot changed. And again when a job the preemption planner had no
plan left for came to say so in its why (rule 4's budget per cycle): the same decisions, the why
of about 8,600 pending jobs per snapshot changed. And ``cold-2-no-las`` and ``large-1`` again
when a job whose GPU model's reservations this cycle had all gone to jobs ahead of it came to say
so (rule 5's cap): the same decisions, the why of 8,598 and 8,788 pending jobs changed (with the
attained-service queues on, the other snapshots hold few reservations and reach no cap). And
``cold-1``, ``cold-3`` and ``large-1`` again when a preemption reason came to name a preemptor of
another team by its class only ("a production job of another team"): the same decisions, the
reasons of 6, 2 and 1 preemptions changed."""

from __future__ import annotations

import functools
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.policy import decide

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import cold_cycle  # noqa: E402
import policy_cycle  # noqa: E402

DIGESTS = {
    "cold-1": "41c76234232270901672aeb5e35a7a931afe84d7665e8d53846475b67a7ccfad",  # 855 starts
    "cold-2": "cffd4830b7ac6643e19313a1c779b033e4290b7b47049a1d15947eac1c3db135",  # 918 starts
    "cold-3": "b41c43f718cfa03472d5954b4fc05484f02d77ab437db18e32e2fbae911f6558",  # 940 starts
    "large-1": "ab10bd1f50f61dd797d72e5b9043bba4aeb2f836d9f9a7dbae3a1cbe74c3a000",  # 688 starts
    "cold-2-no-las": "66ce05d812e85eb860ecdaa9a2cf738d1c600e6df08ae18d90301e994d0ce29d",
    "cold-2-fifo": "d568f8ffee16cdaecfeba94c5d3127e11b620edf08d03f79e7048e219482d471",
    "cold-2-las": "d568f8ffee16cdaecfeba94c5d3127e11b620edf08d03f79e7048e219482d471",
    "cold-2-sjf": "b72b407a3f3ad11eaa6bbf43bb6a17826007c0ea81f392c3af8c461bebb0647e",
}


@functools.cache
def _snapshot(case: str):
    if case == "large-1":
        return policy_cycle.build(**policy_cycle.SIZES["large"])
    name, seed, *variant = case.split("-", 2)
    snap = cold_cycle.build_cold(int(seed))
    if not variant:
        return snap
    if variant[0] == "no-las":
        return replace(snap, config=replace(snap.config, las=None))
    return replace(snap, config=replace(snap.config, queue_order=variant[0]))


def _digest(case: str, cold: bool = True) -> str:
    if cold:
        cold_cycle.clear_memos()
    return cold_cycle.fingerprint(decide(_snapshot(case)))


@pytest.mark.parametrize("case", sorted(DIGESTS))
def test_decisions_are_the_engines_before_the_speed_work(case):
    assert _digest(case) == DIGESTS[case]


def test_a_second_call_with_the_memos_of_the_first_decides_the_same():
    assert _digest("cold-1") == DIGESTS["cold-1"]
    assert _digest("cold-1", cold=False) == DIGESTS["cold-1"]
