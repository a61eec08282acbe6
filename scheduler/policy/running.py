"""The cycle's summary of the running jobs, updated from the previous call's instead of rebuilt.

Every call needs, over all running jobs: whether any is elastic or releasing, each preemptible
job's LAS rank (``run_rank``), per GPU model the lowest rank of a preemptible job
(``min_victim``) and, for the LAS reservation gate, the GPUs of preemptible jobs per rank
(``victim_gpus``). Consecutive calls pass nearly the same RunningJob objects (the simulator and
the live loop rebuild a job's object only when one of its fields changes), so
:func:`running_summary` keeps each job's contribution from the last call, by object identity,
and only subtracts the jobs gone, adds the new ones and recomputes the ones whose LAS rank may
have changed since (their rank span, ``ranking._rank_span``, ended; a heap finds them).

Exact: a contribution is a function of the job object and of its rank, which its span proves
for every time in it; sums are of integers; so the summary equals a rebuild, and decisions never
depend on the memo. It returns None (the caller rebuilds) where a rebuild's result depends on
the order of the jobs: two running jobs sharing an id, or the same object listed twice. Time
going backwards starts from nothing. Threads: a call takes the state (an atomic ``list.pop``)
and updates it in place; its cycle hands it back (:func:`keep`) only when it has finished
reading it, so no two calls ever hold it at once: a concurrent call finds none and starts from
nothing (a rebuild's cost, never a wrong answer).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from scheduler.policy.memo import _LAST_SUMMARY, _same_service
from scheduler.policy.model import RunningJob
from scheduler.policy.ranking import _rank_span

_INF = float("inf")

# (has_elastic, has_releasing, run_rank, min_victim, victim_gpus, the state to ``keep``)
Summary = tuple[
    bool,
    bool,
    dict[str, int],
    dict[str | None, int],
    dict[str | None, dict[int, int]],
    tuple[Any, ...],
]


def running_summary(
    running: tuple[RunningJob, ...],
    classes: Mapping[str, int],
    th: tuple[float, ...],
    long_run: float,
    now: float,
) -> Summary | None:
    """``(has_elastic, has_releasing, run_rank, min_victim, victim_gpus)`` for ``running`` at
    ``now``, as ``_Cycle`` defines them (``victim_gpus`` with LAS only, before the gate), or
    None where the caller must rebuild (see the module docstring); last, the state to hand to
    :func:`keep` once the caller no longer reads those dicts (it is then the next call's to
    change). The returned dicts are the caller's to read, not to change."""
    here = {r.id for r in running}
    if len(here) != len(running):
        return None  # two running jobs share an id: a rebuild's ranks depend on their order
    try:
        last = _LAST_SUMMARY.pop()  # this call's own until ``keep`` hands it back
    except IndexError:
        last = None  # none yet, or a concurrent call has it
    if (
        last is None
        or last[1] > now
        or last[0][1] != th
        or last[0][2] != long_run
        or last[0][0] != classes
    ):
        key = (dict(classes), th, long_run)
        seen: set[str] | frozenset[str] = frozenset()
        objs: dict[str, RunningJob] = {}
        info: dict[str, tuple[Any, ...]] = {}
        run_rank: dict[str, int] = {}
        count: dict[tuple[str | None, int], int] = {}
        vg: dict[str | None, dict[int, int]] = {}
        heap: list[tuple[float, str]] = []
        n_elastic = n_releasing = 0
    else:
        key, _, seen, objs, info, run_rank, count, vg, heap, n_elastic, n_releasing = last
    # the jobs not passed as the same object as last time (new, or rebuilt)
    changed = [r for r in running if objs.get(r.id) is not r]
    # rank spans of the objects replaced, by job id (see add)
    old_spans: dict[str, tuple[Any, ...]] = {}

    def drop(rid: str) -> None:
        nonlocal n_elastic, n_releasing
        r = objs.pop(rid)
        span, model, p, gpus = info.pop(rid)
        if r.elastic is not None:
            n_elastic -= 1
        if r.releasing_at is not None:
            n_releasing -= 1
        elif p is not None:
            k = (model, p)
            if count[k] == 1:
                del count[k]
            else:
                count[k] -= 1
            if span is not None:
                old_spans[rid] = span
                del run_rank[rid]
                per = vg[model]
                left = per[p] - gpus
                if left:
                    per[p] = left
                else:
                    del per[p]
                    if not per:
                        del vg[model]

    def add(r: RunningJob) -> None:
        nonlocal n_elastic, n_releasing
        rid = r.id
        objs[rid] = r
        if r.elastic is not None:
            n_elastic += 1
        model = r.gpu_model
        p = None
        span = None
        gpus = r.workers * r.gpus_per_worker
        if r.releasing_at is not None:
            n_releasing += 1
        elif r.preemptible:
            if th:
                # a job rebuilt for another field keeps its rank span (as the rebuild's memo)
                span = old_spans.get(rid)
                if span is None or not span[1] <= now <= span[2]:
                    span = _rank_span(r, classes.get(r.priority_class, 0), th, long_run, now)
                elif span[0] is not r:
                    if _same_service(span[0], r):
                        span = (r, span[1], span[2], span[3])
                    else:
                        span = _rank_span(r, classes.get(r.priority_class, 0), th, long_run, now)
                p = run_rank[rid] = span[3]
                if span[2] != _INF:
                    heapq.heappush(heap, (span[2], rid))
                per = vg.setdefault(model, {})
                per[p] = per.get(p, 0) + gpus
            else:
                p = classes.get(r.priority_class, 0)
            count[(model, p)] = count.get((model, p), 0) + 1
        info[rid] = (span, model, p, gpus)

    for rid in seen - here:
        drop(rid)
    for r in changed:
        if r.id in objs:
            drop(r.id)
    # ranks whose span ended: recompute them at ``now``
    while heap and heap[0][0] < now:
        until, rid = heapq.heappop(heap)
        entry = info.get(rid)
        if entry is not None and entry[0] is not None and entry[0][2] == until:
            r = objs[rid]
            drop(rid)
            del old_spans[rid]
            add(r)
    for r in changed:
        add(r)
    if len(heap) > 2 * len(info) + 64:
        # entries of jobs gone or recomputed pile up: keep only the live ones
        heap = [(e[0][2], k) for k, e in info.items() if e[0] is not None and e[0][2] != _INF]
        heapq.heapify(heap)
    state = (
        key,
        now,
        here,
        objs,
        info,
        run_rank,
        count,
        vg,
        heap,
        n_elastic,
        n_releasing,
    )
    min_victim: dict[str | None, int] = {}
    for model, p in count:
        m = min_victim.get(model)
        if m is None or p < m:
            min_victim[model] = p
    return n_elastic > 0, n_releasing > 0, run_rank, min_victim, vg, state


def keep(state: tuple[Any, ...]) -> None:
    """Hand the summary back for the next call, once the cycle that got it no longer reads it."""
    _LAST_SUMMARY[:] = [state]
