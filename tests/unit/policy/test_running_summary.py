"""The running-job summary carried between calls (``scheduler.policy.running``) equals a rebuild.

Over random sequences of calls (jobs starting, ending, rebuilt as a new object with the same or
another attained service, being released, time moving on across LAS thresholds and sometimes
back), each call's summary is compared with the straightforward loop over every running job it
replaces; duplicate job ids are refused (None) and leave the carried state usable."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import Elastic, RunningJob
from scheduler.policy.memo import clear
from scheduler.policy.ranking import _rank_span
from scheduler.policy.running import keep, running_summary

CLASSES = {"high": 1000, "normal": 500, "low": 100}
TH = (100.0, 1000.0, 10000.0)


def _rebuild(running, classes, th, long_run, now):
    has_elastic = any(r.elastic is not None for r in running)
    has_releasing = any(r.releasing_at is not None for r in running)
    run_rank: dict[str, int] = {}
    min_victim: dict[str | None, int] = {}
    victim_gpus: dict[str | None, dict[int, int]] = {}
    for r in running:
        if r.releasing_at is not None or not r.preemptible:
            continue
        p = classes.get(r.priority_class, 0)
        if th:  # as the loop it replaces computes it
            p = _rank_span(r, p, th, long_run, now)[3]
            run_rank[r.id] = p
            per = victim_gpus.setdefault(r.gpu_model, {})
            per[p] = per.get(p, 0) + r.workers * r.gpus_per_worker
        if r.gpu_model not in min_victim or p < min_victim[r.gpu_model]:
            min_victim[r.gpu_model] = p
    return has_elastic, has_releasing, run_rank, min_victim, victim_gpus


def _job(k: int, draw) -> RunningJob:
    return RunningJob(
        id=f"j{k}",
        team="a",
        priority_class=draw(st.sampled_from(sorted(CLASSES))),
        gpu_model=draw(st.sampled_from([None, "h100", "a100"])),
        workers=draw(st.integers(1, 3)),
        gpus_per_worker=draw(st.integers(1, 8)),
        started_at=draw(st.floats(0, 500)),
        preemptible=draw(st.booleans()),
        elastic=Elastic(1, 4) if draw(st.integers(0, 9)) == 0 else None,
        attained_service_s=draw(st.sampled_from([0.0, 5.0, 50.0, 2000.0])),
    )


@st.composite
def _calls(draw):
    th = draw(st.sampled_from([TH, ()]))
    long_run = draw(st.sampled_from([0.0, 300.0])) if th else 0.0
    jobs: dict[int, RunningJob] = {}
    now = draw(st.floats(0, 100))
    calls = []
    next_id = 0
    for _ in range(draw(st.integers(1, 12))):
        for _ in range(draw(st.integers(0, 4))):
            step = draw(st.sampled_from(["start", "end", "rebuild", "service", "release"]))
            if step == "start" or not jobs:
                jobs[next_id] = _job(next_id, draw)
                next_id += 1
                continue
            k = draw(st.sampled_from(sorted(jobs)))
            if step == "end":
                del jobs[k]
            elif step == "rebuild":  # same fields, a new object (the rank span carries over)
                jobs[k] = replace(jobs[k], expected_end=now + 60)
            elif step == "service":  # requeued and restarted: another attained service
                jobs[k] = replace(jobs[k], started_at=now, attained_service_s=now)
            else:
                jobs[k] = replace(jobs[k], releasing_at=now + 120)
        now = draw(st.sampled_from([now, now + 1, now + 37.5, now + 400, now + 5000, now - 10]))
        running = tuple(jobs.values())
        if draw(st.integers(0, 14)) == 0 and running:  # a duplicate id now and then
            running = running + (replace(running[0], workers=running[0].workers + 1),)
        calls.append((running, now))
    return th, long_run, calls


@settings(max_examples=300, deadline=None)
@given(_calls())
def test_the_carried_summary_equals_a_rebuild(case):
    th, long_run, calls = case
    clear()
    for running, now in calls:
        got = running_summary(running, CLASSES, th, long_run, now)
        if len({r.id for r in running}) != len(running):
            assert got is None
            continue
        assert got is not None
        assert got[:5] == _rebuild(running, CLASSES, th, long_run, now)
        keep(got[5])


def test_a_summary_not_handed_back_is_rebuilt():
    # a concurrent call finds no state (its cycle still holds it) and starts from nothing
    clear()
    jobs = tuple(
        RunningJob(id=f"j{k}", team="a", priority_class="low", preemptible=True, gpu_model="h100")
        for k in range(3)
    )
    first = running_summary(jobs, CLASSES, TH, 0.0, 10.0)
    second = running_summary(jobs[:2], CLASSES, TH, 0.0, 20.0)
    assert first is not None and second is not None
    assert second[:5] == _rebuild(jobs[:2], CLASSES, TH, 0.0, 20.0)
    keep(first[5])
    keep(second[5])
    third = running_summary(jobs, CLASSES, TH, 0.0, 30.0)
    assert third is not None and third[:5] == _rebuild(jobs, CLASSES, TH, 0.0, 30.0)
