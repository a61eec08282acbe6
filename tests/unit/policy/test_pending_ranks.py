"""Pending jobs' LAS ranks memoised across calls (``memo._PENDING_RANKS``) equal a rebuild.

Over random sequences of ``queue_order`` calls (jobs of various classes, sizes and attained
service; the classes, thresholds and long-run queue changing between calls), each call's ranks
and order with the memo carried over are compared with a cold call (memo cleared) and with
``_pending_rank`` computed directly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import Config, Las, PendingJob, Snapshot, memo
from scheduler.policy.memo import clear
from scheduler.policy.ranking import _long_run, _pending_rank, _thresholds, queue_order

CLASSES = [{"high": 1000, "normal": 500, "low": 100}, {"high": 10, "normal": 5, "low": 1}]
TH = [(100.0, 1000.0, 10000.0), (50.0,)]


@st.composite
def _calls(draw):
    calls = []
    for _ in range(draw(st.integers(1, 8))):
        th = draw(st.sampled_from(TH))
        long_run = draw(st.sampled_from([None, 300.0]))
        cfg = Config(las=Las(thresholds_gpu_s=th, long_run_s=long_run))
        classes = draw(st.sampled_from(CLASSES))
        pending = tuple(
            PendingJob(
                id=f"p{k}",
                team="a",
                priority_class=draw(st.sampled_from(sorted(classes))),
                workers=draw(st.integers(1, 3)),
                gpus_per_worker=draw(st.integers(1, 8)),
                submitted_at=float(k),
                attained_service_s=draw(st.sampled_from([0.0, 5.0, 50.0, 2000.0, 12345.0])),
            )
            for k in range(draw(st.integers(0, 10)))
        )
        calls.append(Snapshot(now=20000.0, config=cfg, priority_classes=classes, pending=pending))
    return calls


@settings(max_examples=200, deadline=None)
@given(_calls())
def test_carried_pending_ranks_equal_a_rebuild(calls):
    clear()
    for s in calls:
        warm: dict[int, int] = {}
        order = [p.id for p in queue_order(s, warm)]
        th = _thresholds(s.config)
        long_run = _long_run(s.config, th)
        for p in s.pending:
            assert warm[id(p)] == _pending_rank(p, s.priority_classes, th, long_run)
        saved = memo._PENDING_RANKS[0]
        clear()
        cold: dict[int, int] = {}
        assert [p.id for p in queue_order(s, cold)] == order
        assert cold == warm
        memo._PENDING_RANKS[0] = saved  # carry the warm memo on to the next call


def test_a_large_memo_is_emptied():
    clear()
    cfg = Config(las=Las(thresholds_gpu_s=TH[0]))
    for k in range(memo._PENDING_RANKS_MAX + 10):
        job = PendingJob(id="p", team="a", priority_class="low", attained_service_s=float(k))
        queue_order(Snapshot(now=0.0, config=cfg, priority_classes=CLASSES[0], pending=(job,)))
    assert len(memo._PENDING_RANKS[0][2]) <= memo._PENDING_RANKS_MAX + 1
