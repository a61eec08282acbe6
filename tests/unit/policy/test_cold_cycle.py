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
    "cold-1": "951859d6ba15362b1a29cb8c280d89381f55a9291f85593e0a8998c127c039b6",  # 855 starts
    "cold-2": "887c9acdb27e8a68254cfdb9cb27d7200ad57498e9950f5fe509d89bbfe78635",  # 918 starts
    "cold-3": "b5a361e7ab8068a453960dd1f2acef08ccf7bfb40db0b5da696f4adad0d84b40",  # 940 starts
    "large-1": "060c084714a7b31ab35c65dbffce599912bf38dbc3eebf4cda02ef1a48637109",  # 688 starts
    "cold-2-no-las": "7baf34e671f34db0a98894e5911492174380cb2594c6dc1616e6a411a1c3f7e4",
    "cold-2-fifo": "98a0221691034fafc4cd501566e6c7e32b372882768b8b28040e53fe61dd8276",
    "cold-2-las": "98a0221691034fafc4cd501566e6c7e32b372882768b8b28040e53fe61dd8276",
    "cold-2-sjf": "b7437d1a6a85f827cf21f1d930455a384bb94b54f3ef75cdc5cd12ab4f99613e",
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
