"""Speed work on the engine keeps its decisions: on the cold-cycle snapshots of
``benchmarks/cold_cycle.py`` (1,000 nodes, 5,000 running, 10,000 pending, ~900 starts) and the
``large`` snapshot of ``benchmarks/policy_cycle.py``, ``decide`` gives exactly the decisions
(why texts included) the engine gave before the speed work (main at 122e409), for every queue
order and with the attained-service queues off; with or without the engine's cross-call memos.

A rule change that is meant to change decisions re-records the digests below (print them with
``benchmarks/cold_cycle.py --runs 1 --cli-runs 0`` or this module's ``_digest``) and says so in
its commit message. ``cold-1``, ``cold-3`` and ``large-1`` were re-recorded for rule 4b (preempt
only if that frees GPUs sooner than running jobs' expected ends): the same starts, fewer
preemptions."""

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
    "cold-1": "09d56288f28b137e495142a15bc8f14b2893979d1f346b662bd48a1fd79c14c1",  # 857 starts
    "cold-2": "77effd2557f3c30b579bfe7891486ad2ca2b3146dbca7fd6868b955424f66724",  # 918 starts
    "cold-3": "9342fbcdf4c2b7ebc6b9c38027487598b006db6cdbef795f0471074b3b32f9ce",  # 955 starts
    "large-1": "4d3c3969859c1393ab3f4de8fa13895feb34675723125d29ddd2311b57395a9e",  # 687 starts
    "cold-2-no-las": "d13dbafc7cd6b237ed7efeb168ece66a60d1a5fb96d7ba1b9268da55894673d5",
    "cold-2-fifo": "9917b45bec49e8a7d99ba5d8fb8f73ddc57e60aa577eb2ec5cbd8a6f8801651b",
    "cold-2-las": "9917b45bec49e8a7d99ba5d8fb8f73ddc57e60aa577eb2ec5cbd8a6f8801651b",
    "cold-2-sjf": "8e0b3d1dda64e306275d09548bc3c19a33b7090e8eef3953094767b26896b29e",
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
