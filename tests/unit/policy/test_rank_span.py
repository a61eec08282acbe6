"""``ranking._rank_span``: a running job's LAS rank now and a time up to which it holds. Pinned to
the straightforward form it was written in (a closure for "the queue at time t"), and to
``_running_rank`` at both ends of the span."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import RunningJob
from scheduler.policy.ranking import _levels, _queue, _rank_span, _running_rank

CLASSES = {"high": 1000, "low": 100}


def _reference(r, cls_rank, th, long_run, now):
    gpus = r.workers * r.gpus_per_worker

    def crossed(t):
        ran = t - r.started_at
        served = r.attained_service_s + (ran if ran > 0 else 0.0)
        return _queue(served * gpus, served, th, long_run)

    nxt = crossed(now)
    until = now
    levels = _levels(th, long_run)
    if nxt >= levels - 1:
        until = math.inf
    elif gpus > 0:
        if nxt < len(th):
            cross = r.started_at + th[nxt] / gpus - r.attained_service_s
        else:
            cross = r.started_at + long_run - r.attained_service_s
        guess = cross - max(1e-3, abs(cross) * 1e-9)
        if guess > now and crossed(guess) == nxt:
            until = guess
    return (r, now, until, cls_rank * levels + levels - 1 - nxt)


times = st.floats(-1e7, 1e9, allow_nan=False, allow_infinity=False)


@settings(max_examples=500, deadline=None)
@given(
    pc=st.sampled_from(sorted(CLASSES)),
    workers=st.integers(0, 4),
    gpw=st.integers(0, 8),
    started=times,
    attained=st.floats(0, 1e8, allow_nan=False) | st.sampled_from([0.0, 99.9, 100.0]),
    now=times,
    th=st.sampled_from([(100.0,), (100.0, 1000.0, 10000.0), (3600.0, 36000.0)]),
    long_run=st.sampled_from([0.0, 300.0, 86400.0]),
)
def test_rank_span_is_its_reference_and_holds_at_both_ends(
    pc, workers, gpw, started, attained, now, th, long_run
):
    r = RunningJob(
        id="j",
        team="t",
        priority_class=pc,
        gpu_model="h100",
        workers=workers,
        gpus_per_worker=gpw,
        started_at=started,
        attained_service_s=attained,
    )
    span = _rank_span(r, CLASSES[pc], th, long_run, now)
    assert span == _reference(r, CLASSES[pc], th, long_run, now)
    _, _, until, rank = span
    assert rank == _running_rank(r, CLASSES, th, long_run, now)
    if math.isfinite(until):
        assert rank == _running_rank(r, CLASSES, th, long_run, until)
