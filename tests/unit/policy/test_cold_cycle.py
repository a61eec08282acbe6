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
2,100 pending jobs per snapshot changed."""

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
    "cold-1": "847c6d202dea5dbe855697a927dcf3faf9a9f7ac3de8b5c9e75bd36b2b919076",  # 855 starts
    "cold-2": "d7f573f8cffb8f38fd4153fbecd6a52efceced85c259a6fbbd0c51dc71ba2207",  # 918 starts
    "cold-3": "6b20f7314f0addc5e84362dbd345d118a1fe96e8cbf3b939fdd28e4a78276336",  # 940 starts
    "large-1": "70b9531e79db799290050a4306bfc66bf0b6156e18d5eb78494c39cec852f889",  # 688 starts
    "cold-2-no-las": "3ed6521e35fe9ee0d39a419bc03a9daa596fbdfd08db6a412bf0e79a39cb9056",
    "cold-2-fifo": "304469374fa0733b115902a31e8e8267485768022b0cfa28d01ef42fb83b1e3b",
    "cold-2-las": "304469374fa0733b115902a31e8e8267485768022b0cfa28d01ef42fb83b1e3b",
    "cold-2-sjf": "24bbcd903cb6333af862d776c9e1a67f9e172d7740b2ef11baa7f24eeb6aabac",
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
