"""Rule 1 and 1a of docs/policy.md: the order of the pending queue and the effective rank of
every job (priority class, then the least-attained-service queue inside the class).

A job's rank is ``class x levels + (levels - 1 - queue)``: every class stays strictly above the
next lower one, so an attained-service queue only reorders (and lets preempt) jobs of its own
class. :func:`queue_order` then sorts by rank, fair-share standing and the ``queue_order``
tie-break. Pure functions of the snapshot.

Rule 1b, deadlines: a pending job whose slack (its deadline minus now minus its estimated
remaining run time) is between 0 and ``Config.deadline_slack_s`` goes before every other job of
its rank, least slack first. A job that can no longer make its deadline (negative slack) gets no
boost: it would take capacity from jobs that can still make theirs.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

from scheduler.policy.memo import _PENDING_RANKS, _PENDING_RANKS_MAX, _standings
from scheduler.policy.model import Config, Las, PendingJob, RunningJob, Snapshot

_INF = math.inf


def _las(cfg: Config) -> Las | None:
    """The attained-service section when the queues are on (it has thresholds), else None."""
    las = cfg.las
    return las if las is not None and las.thresholds_gpu_s else None


def _thresholds(cfg: Config) -> tuple[float, ...]:
    las = _las(cfg)
    return tuple(sorted(las.thresholds_gpu_s)) if las is not None else ()


def _long_run(cfg: Config, th: tuple[float, ...]) -> float:
    """``las.long_run_s`` where it applies (LAS on), else 0."""
    if not th:
        return 0.0
    las = cfg.las
    assert las is not None  # th is non-empty only with LAS on
    long_run = las.long_run_s
    return long_run if long_run is not None and long_run > 0 else 0.0


def _levels(th: tuple[float, ...], long_run: float) -> int:
    """Ranks per class: the LAS queues, plus the long-run queue below them when it is on."""
    return len(th) + 1 + (1 if long_run else 0)


def _fifo_queues(cfg: Config, th: tuple[float, ...]) -> int:
    """How many of a class's most-served LAS queues are served in submission order
    (``las.bottom_fifo_queues`` of them, at least the last one and at most all, and the
    long-run queue below them); 0 when LAS or the rule is off. A rank ``r`` is in one of them
    when ``r % levels < _fifo_queues(...)``."""
    if not th:
        return 0
    las = cfg.las
    assert las is not None  # th is non-empty only with LAS on
    n = las.bottom_fifo_queues
    if n is None:
        return 0
    return min(max(n, 1), len(th) + 1) + (1 if _long_run(cfg, th) else 0)


def _queue(gpu_s: float, served_s: float, th: tuple[float, ...], long_run: float) -> int:
    """The LAS queue of a job that attained ``gpu_s`` GPU-seconds in ``served_s`` seconds."""
    q = bisect_right(th, gpu_s)
    if long_run and q == len(th) and served_s >= long_run:
        q += 1
    return q


def _rank(prio: int, gpu_s: float, th: tuple[float, ...], served_s: float, long_run: float) -> int:
    """The effective priority: the class, then (with LAS thresholds) the attained-service queue.

    ``prio x levels + (levels - 1 - queue)`` keeps every class strictly above the next lower
    one, so a queue only reorders (and lets preempt) jobs of the same class.
    """
    if not th:
        return prio
    n = _levels(th, long_run)
    return prio * n + (n - 1 - _queue(gpu_s, served_s, th, long_run))


def _pending_rank(
    p: PendingJob, classes: Mapping[str, int], th: tuple[float, ...], long_run: float
) -> int:
    prio = classes.get(p.priority_class, 0)
    if not th:
        return prio
    served = p.attained_service_s
    return _rank(prio, served * p.workers * p.gpus_per_worker, th, served, long_run)


def _running_rank(
    r: RunningJob, classes: Mapping[str, int], th: tuple[float, ...], long_run: float, now: float
) -> int:
    prio = classes.get(r.priority_class, 0)
    if not th:
        return prio
    ran = now - r.started_at
    served = r.attained_service_s + (ran if ran > 0 else 0.0)
    return _rank(prio, served * r.workers * r.gpus_per_worker, th, served, long_run)


def queue_order(snapshot: Snapshot, ranks: dict[int, int] | None = None) -> list[PendingJob]:
    """The pending queue in the order the engine considers it (highest rank first).

    With ``ranks``, each job's effective rank is also recorded there by ``id(job)``, so that
    the cycle does not compute it again."""
    cfg = snapshot.config
    classes = snapshot.priority_classes
    th = _thresholds(cfg)
    long_run = _long_run(cfg, th)
    if ranks is None:
        ranks = {}
    if th:
        # Most pending jobs share a class, a size and no attained service (never ran), and the
        # queue changes little between calls: compute each distinct rank once, across calls
        # (memo._PENDING_RANKS). The key holds every field _pending_rank reads.
        memo_classes, memo_th, rank_of = _PENDING_RANKS[0]
        if (
            memo_th != (th, long_run)
            or memo_classes != classes
            or len(rank_of) > _PENDING_RANKS_MAX
        ):
            rank_of = {}
            _PENDING_RANKS[0] = (dict(classes), (th, long_run), rank_of)
        for p in snapshot.pending:
            fields = (p.priority_class, p.attained_service_s, p.workers, p.gpus_per_worker)
            r = rank_of.get(fields)
            if r is None:
                r = rank_of[fields] = _pending_rank(p, classes, th, long_run)
            ranks[id(p)] = r
    else:
        for p in snapshot.pending:
            ranks[id(p)] = classes.get(p.priority_class, 0)
    rank_by_id = ranks.__getitem__

    fs_rank, neutral = _standings(snapshot.teams, cfg.fair_share_band)
    now = snapshot.now
    order = cfg.queue_order
    if order == "fifo":

        def key(p: PendingJob) -> tuple[Any, ...]:
            return (
                -rank_by_id(id(p)),
                fs_rank.get(p.team, neutral),
                p.submitted_at,
                p.id,
            )

    elif order == "las":

        def key(p: PendingJob) -> tuple[Any, ...]:
            return (
                -rank_by_id(id(p)),
                fs_rank.get(p.team, neutral),
                p.attained_service_s * p.workers * p.gpus_per_worker,
                p.submitted_at,
                p.id,
            )

    else:
        dflt = cfg.default_runtime_s
        aging = cfg.queue_aging_s
        sjf = order == "sjf"
        log2 = math.log2
        levels = _levels(th, long_run)
        fifo_queues = 0 if sjf else _fifo_queues(cfg, th)

        # (-rank, fair-share rank, not requeued) folded into one int that orders the same
        # (fair-share ranks are 0 .. fs_span - 1): sorting 10,000 jobs compares these keys
        # ~130,000 times, and a shorter tuple halves the element comparisons.
        fs_span = max([neutral, *fs_rank.values()]) + 1

        def key(p: PendingJob) -> tuple[Any, ...]:
            r = rank_by_id(id(p))
            head = (fs_rank.get(p.team, neutral) - r * fs_span) * 2
            if r % levels < fifo_queues:
                # the most-served LAS queues of a class: submission order (bottom_fifo_queues)
                return (head, p.submitted_at, p.id)
            est = p.runtime_estimate_s if p.runtime_estimate_s is not None else dflt
            rem = est - p.attained_service_s
            if rem < 1.0:
                rem = 1.0
            size = rem * p.workers * p.gpus_per_worker
            if sjf:
                return (head, size, p.submitted_at, p.id)
            wait = now - p.submitted_at
            return (
                head + (0 if p.requeued else 1),
                log2(size) - (wait / aging if wait > 0 else 0.0),
                p.submitted_at,
                p.id,
            )

    if any(p.deadline is not None for p in snapshot.pending):
        # Rule 1b: (-rank, urgent first, least slack) ahead of the order's own key. The order's
        # key already sorts by rank first, so jobs without urgency keep their relative order.
        window = cfg.deadline_slack_s
        dflt_s = cfg.default_runtime_s
        base = key

        def key(p: PendingJob) -> tuple[Any, ...]:
            slack = deadline_slack_s(p, now, dflt_s)
            urgent = slack is not None and 0.0 <= slack <= window
            return (-rank_by_id(id(p)), 0 if urgent else 1, slack if urgent else 0.0, base(p))

    return sorted(snapshot.pending, key=key)


def deadline_slack_s(p: PendingJob, now: float, default_runtime_s: float) -> float | None:
    """Seconds to spare if ``p`` started now: its deadline minus now minus its estimated remaining
    run time (``default_runtime_s`` without an estimate); None without a deadline."""
    if p.deadline is None:
        return None
    est = p.runtime_estimate_s if p.runtime_estimate_s is not None else default_runtime_s
    remaining = est - p.attained_service_s
    return p.deadline - now - (remaining if remaining > 0 else 0.0)


# How a waiting job's why starts when it will miss its deadline (the loop records an event then).
DEADLINE_MISS = "will miss its deadline"


def deadline_warning(
    p: PendingJob, estimated_start: float | None, now: float, default_runtime_s: float
) -> str | None:
    """What to tell the user of a waiting job that will miss its deadline: it will when it
    starts at ``estimated_start`` (or, without an estimate, even if it started now) and runs its
    estimated remaining time past the deadline. None when it may still make it."""
    slack = deadline_slack_s(p, now, default_runtime_s)
    if slack is None:
        return None
    late_s = -slack + (estimated_start - now if estimated_start is not None else 0.0)
    if late_s <= 0:
        return None
    return f"{DEADLINE_MISS}: expected to finish {_duration(late_s)} after it"


def _duration(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes / 60
    return f"{hours:.0f} h" if hours < 72 else f"{hours / 24:.1f} days"


def _rank_span(
    r: RunningJob, cls_rank: int, th: tuple[float, ...], long_run: float, now: float
) -> tuple[RunningJob, float, float, int]:
    """``(r, now, until, rank)``: the running job's LAS rank now, and a time up to which it is
    still the same. The rank is computed exactly as the setup loop computes it; attained service
    only grows with time (every float step of it is monotone), so a rank found both at ``now``
    and at ``until`` holds at every time between them."""
    gpus = r.workers * r.gpus_per_worker
    started = r.started_at
    attained = r.attained_service_s
    # The queue at ``now`` and, below, at the guessed end of the span: the arithmetic of
    # _running_rank, written out twice rather than as a closure (this runs for every running
    # job a cold cycle sees: a closure and its two calls were a quarter of its cost).
    ran = now - started
    served = attained + (ran if ran > 0 else 0.0)
    nxt = _queue(served * gpus, served, th, long_run)
    until = now
    levels = _levels(th, long_run)
    if nxt >= levels - 1:
        until = _INF
    elif gpus > 0:
        # just before the crossing; verified, so rounding can only shorten the span
        if nxt < len(th):
            cross = started + th[nxt] / gpus - attained
        else:  # in the last queue, before the long-run one
            cross = started + long_run - attained
        guess = cross - max(1e-3, abs(cross) * 1e-9)
        if guess > now:
            ran = guess - started
            served = attained + (ran if ran > 0 else 0.0)
            if _queue(served * gpus, served, th, long_run) == nxt:
                until = guess
    return (r, now, until, cls_rank * levels + levels - 1 - nxt)
