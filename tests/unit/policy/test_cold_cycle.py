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
large-1 688 instead of 687; cold-3 also preempts two jobs for a production gang)."""

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
    "cold-1": "21f36710bb10372d2e6ac79f584a3d0c44800c3e44030408e5af02aaed973814",  # 855 starts
    "cold-2": "a47edd3ff6af221c6f82214ddb2518d0c14639ddaaa6043ab9e9460e249c8377",  # 918 starts
    "cold-3": "5c4202f1c8174db4b791fc274d58e954f62170342e0ebf6129afc91d25eff35a",  # 940 starts
    "large-1": "905d701deef07b0e8c33a600c31b1a1a67726eada949865352c283fe70407d46",  # 688 starts
    "cold-2-no-las": "fd4d0b7376c694989512c808b46a7ea2c8ae3243934b6b735ef9d651286ea4f5",
    "cold-2-fifo": "28f375f365ebd0e6cd7529955bba9471da53058fb3f99a792e44927e6eeb440d",
    "cold-2-las": "28f375f365ebd0e6cd7529955bba9471da53058fb3f99a792e44927e6eeb440d",
    "cold-2-sjf": "9ace765a289dba9a5977edf81f7072f946af6cd2e58f1409d2ad8a12429c2df7",
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
