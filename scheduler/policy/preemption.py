"""Rules 4, 4a and 4c of docs/policy.md: checkpoint-aware preemption when a job does not fit.

:meth:`_Preemption.plan_preemption` picks, for one blocked job, what to take: GPUs already
being released (free), elastic jobs' spare workers, then victims of a lower rank (or borrowers
of GPUs the job's team reclaims, or with LAS later-submitted jobs of its own queue / class), the
least lost work first, and among victims of the job's own class (who lose no work) the most
recently started run first; a victim of the job's own class must have saved a checkpoint in its
current run and runs on to just past its next one (the minimum quantum). It emits the
preemptions, shrinks and a reservation at the end of the grace period. Its view of the running
jobs (victims by rank, cheapest first) comes from ``victims``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

from scheduler.policy.capacity import Index
from scheduler.policy.cycle_state import _CycleState
from scheduler.policy.model import PendingJob, Preempt, Quota, Reserve, Resize
from scheduler.policy.state import ReleaseWalk, _fmt_s, _fmt_t, _Model, _Run, other_team_job

# Preemption planning looks at no more than this many candidate victims per blocked job; it
# bounds the cycle's cost on huge clusters (the cheapest candidates come first anyway).
_MAX_VICTIM_CANDIDATES = 128
# ... and for a one-node job this many, grouped by node (see _Cycle.cheapest_node): the cheapest
# few victims are usually spread over many nodes, and none of those nodes would be complete.
_MAX_NODE_CANDIDATES = 1024
# A victim preempted by a job of its own class stops this long after its next checkpoint is due:
# time for the checkpoint to be written before the job is told to stop.
_AFTER_CHECKPOINT_S = 30.0
# Preemption candidates sort by (kind, cost, job id); never by the rest (unorderable).
_KIND_COST_ID = itemgetter(0, 1, 2)

# Who could give up GPUs for a blocked job (built by ``_Preemption._candidates``): ``(kind,
# cost, tiebreak, run, on, units, reason_team)``. Kind 0: already being preempted; 1: an elastic
# job's spare workers (``units``); 2: a victim. ``on`` is GPUs per eligible node; ``run`` the
# job's ``_Run``; ``reason_team`` the team a reclaim takes the GPUs back for.
_Candidate = tuple[Any, ...]
# A lower-ranked victim in a victim list: (cost, job id, run).
_Victim = tuple[float, str, _Run]


class _Attempt:
    """One blocked job's preemption attempt: the job, its GPU model and gang shape, its rank,
    and which rules apply to it (reclaim of its team's guarantee, FIFO within a queue,
    defragmenting); ``mine`` and ``fail_key`` file a failure for later jobs of the cycle."""

    __slots__ = (
        "job",
        "ms",
        "w",
        "g",
        "prio",
        "need",
        "reclaim_team",
        "fifo",
        "defrag",
        "mine",
        "fail_key",
        "lower",
    )

    def __init__(
        self,
        job: PendingJob,
        ms: _Model,
        w: int,
        g: int,
        prio: int,
        need: int,
        reclaim_team: tuple[str, Quota] | None,
        fifo: bool,
        defrag: bool,
        mine: tuple[Any, ...],
        fail_key: tuple[int, bool, bool, bool],
    ) -> None:
        self.job = job
        self.ms = ms
        self.w = w
        self.g = g
        self.prio = prio
        self.need = need
        self.reclaim_team = reclaim_team
        self.fifo = fifo
        self.defrag = defrag
        self.mine = mine
        self.fail_key = fail_key
        # where _candidates put the victims of lower ranks: cands[lower[0]:lower[1]]
        self.lower = (0, 0)


class _Preemption(_CycleState):
    """The preemption planner of one cycle (a part of ``_Cycle``)."""

    def plan_preemption(
        self, job: PendingJob, ms: _Model, w: int, g: int
    ) -> tuple[str, float | None] | None:
        """Shrink elastic jobs, then preempt the cheapest eligible victims, so ``job`` fits.

        Returns ``(why, estimated_start)`` after emitting the decisions, or ``None``. In steps:
        which rules may apply (here, with the cheap checks that rule a plan out before any
        running job is looked at), who could give up GPUs (:meth:`_candidates`), the fewest of
        them that make the gang fit (:meth:`_choose`), and the decisions (:meth:`_emit`).
        """
        now = self.now
        model = ms.gpu  # quotas and victims' models count GPU models (one ledger, rule 3b)
        prio = self.pending_rank(job)
        need = w * g
        # no team has a quota: no chain, and nothing to reclaim
        chain = self.quota_chain(job.team, model) if self.any_quota else ()
        # a team that stays within its guarantee reclaims (rule 1c's test, from the other side)
        reclaim_team = chain[0] if chain and not self.would_borrow(job.team, model, need) else None
        # FIFO within a queue (LAS): a one-node job that has waited las.fifo_one_node_after_s
        # may also preempt jobs of its own queue submitted after it. Gangs do not: on the ITP
        # trace that more than doubled lost work.
        las = self.las
        fifo_after = las.fifo_one_node_after_s if las is not None else None
        fifo = (
            fifo_after is not None
            and w == 1
            and reclaim_team is None
            and now - job.submitted_at - job.attained_service_s >= fifo_after
        )
        # Defragmenting (LAS): a gang blocked only by fragmentation (enough GPUs free in total)
        # may move jobs of its class submitted after it, in any queue, if they fit in the GPUs
        # left free elsewhere: they restart at once there and whole nodes drain for the gang.
        base_view = (ms.long or ms.now)["all"]
        defrag = (
            las is not None
            and las.defragment
            and w > 1
            and reclaim_team is None
            and base_view.group_free(0) >= w * g
        )
        fail_key = (prio, reclaim_team is not None, fifo, defrag)
        # A job of the same or a smaller shape failed, so this one fails too; with FIFO within
        # a queue or defragmenting, only if that job was submitted no later (fewer jobs came
        # after it).
        mine = (job.submitted_at, job.id) if fifo or defrag else ()
        failed = ms.pre_failed.get(fail_key)
        if failed and any(fg <= g and fw <= w and fm <= mine for fw, fg, fm in failed):
            return None
        lowest_of = self.lowest_victim
        if model in lowest_of:
            lowest = lowest_of[model]
        else:
            lowest = lowest_of[model] = min(
                (p for m, p in self.min_victim.items() if m is None or m == model), default=None
            )
        if (
            reclaim_team is None
            and not self.has_elastic
            and not self.has_releasing
            and (lowest is None or lowest > prio or (lowest == prio and not fifo))
            and not defrag
        ):
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        self.ensure_runs()
        if (
            reclaim_team is None
            and not ms.releasing
            and not ms.elastic
            and not any(p < prio or (fifo and p == prio) for p in ms.victims)
            and not defrag
        ):
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        attempt = _Attempt(job, ms, w, g, prio, need, reclaim_team, fifo, defrag, mine, fail_key)
        cands, later = self._candidates(attempt)
        if not cands:
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        self.preempt_attempts += 1
        chosen = self._choose(attempt, cands, later)
        if chosen is None:
            return None
        # Rule 4b: a job preempts (or shrinks, or waits for GPUs being released) only if that
        # frees its GPUs sooner than running jobs' expected ends would; otherwise it holds the
        # GPUs those ends free (jobs past their expected end are not counted on: they may run
        # on).
        freed_at, graces = self._freed_at(job, chosen[0])
        in_time, walked = self._released_in_time(job, ms, w, g, freed_at)
        if in_time:
            at = self.reserve(job, ms, w, g, walked=walked)
            if at is not None:
                return (
                    f"reserved to start at t={_fmt_t(at)} on GPUs running or preempted jobs are "
                    "expected to release (no preemption frees them sooner)",
                    at,
                )
        victims, take, base = chosen
        return self._emit(attempt, later, victims, take, base, freed_at, graces)

    def _candidates(self, a: _Attempt) -> tuple[list[_Candidate], set[str]]:
        """Who could give up GPUs for the attempt's job, and which of them were submitted after
        it (moved by the submission-order rules)."""
        job, ms, w, prio, mine = a.job, a.ms, a.w, a.prio, a.mine
        model, fifo, defrag, reclaim_team = ms.gpu, a.fifo, a.defrag, a.reclaim_team
        own = set(self.ancestry(job.team))
        gone = self.gone
        # Minimum quantum: a job of the same class that has not saved a checkpoint since it
        # (re)started is no victim (preempting it would throw away the whole run).
        classes = self.classes
        job_class = classes.get(job.priority_class, 0)

        def peer(run: _Run) -> bool:
            return classes.get(run.job.priority_class, 0) == job_class

        def unsaved_peer(run: _Run) -> bool:
            return not run.saved and peer(run)

        def borrower(run: _Run) -> str | None:
            """The borrowing team ``run``'s GPUs are reclaimed from, or None. A higher class is
            never reclaimed: it would take the GPUs back by priority, and so on (rule 4)."""
            if reclaim_team is None or classes.get(run.job.priority_class, 0) > job_class:
                return None
            for t, q in self.quota_chain(run.job.team, model):
                if t in own:
                    return None
                if self.used.get((t, model), 0) - self.reclaimed.get((t, model), 0) > q.guaranteed:
                    return t
            return None

        # Candidates: (kind, cost, tiebreak, run, on, units, reason_team). Kind 0: already
        # being preempted (free of further cost); 1: an elastic job's spare worker; 2: a victim.
        # ``on`` is read-only: for kinds 0 and 2 it is the run's own map, which later calls reuse.
        cands: list[_Candidate] = []
        for run in ms.releasing:
            if run.job.id not in gone:
                cands.append((0, 0.0, run.job.id, run, run.on, None, None))
        for run in ms.elastic:
            rid = run.job.id
            if rid in gone or rid in self.shrunk:
                continue
            bt = None if run.prio < prio else borrower(run)
            if run.prio >= prio and bt is None:
                continue
            for u in self.shrink_units(run):
                cands.append((1, 0.0, rid, run, {u[0]: len(u[1])}, [u], bt))
        reserved = ms.reserved_nodes
        levels = self.levels
        peers = ms.peer_victims if self.cfg.victims_lowest_rank_first else {}
        lower = [
            peers.get(p, lst) if p // levels == prio // levels else lst
            for p, lst in sorted(ms.victims.items())
            if p < prio
        ]
        found = 0
        limit = _MAX_NODE_CANDIDATES if w == 1 else _MAX_VICTIM_CANDIDATES
        if len(lower) <= 1 or self.cfg.victims_lowest_rank_first:
            # under the candidate cap, the lowest ranks (each cheapest first) as they are tried
            source: Iterable[_Victim] = itertools.chain.from_iterable(lower)
        elif self.runs_unique and sum(map(len, lower)) <= limit:
            # all of them are taken, and candidates are sorted by (kind, cost, id) below, which
            # orders them as the merge would (ids are unique): skip the merge
            source = itertools.chain.from_iterable(lower)
        else:
            source = heapq.merge(*lower)
        lower_from = len(cands)
        for cost, rid, run in source:
            if rid in gone or not reserved.isdisjoint(run.on):
                continue
            if not run.saved and classes.get(run.job.priority_class, 0) == job_class:
                continue  # unsaved_peer, inlined: this loop is the planner's longest
            cands.append((2, cost, rid, run, run.on, None, None))
            found += 1
            if found >= limit:
                break
        a.lower = (lower_from, len(cands))
        later: set[str] = set()  # victims submitted after the job (submission-order rules)

        def add_submitted_later(victims: Iterable[_Victim]) -> None:
            for cost, rid, run in victims:
                sub = run.job.submitted_at
                if sub is None or (sub, rid) <= mine or rid in gone or unsaved_peer(run):
                    continue
                if not reserved.isdisjoint(run.on):
                    continue
                cands.append((2, cost, rid, run, run.on, None, None))
                later.add(rid)

        if fifo and prio in ms.victims:
            add_submitted_later(ms.victims[prio])
        if defrag:
            levels = self.levels
            top = self.classes.get(job.priority_class, 0) * levels + levels - 1
            for p in sorted(ms.victims):
                if p < prio or p > top:
                    continue  # lower queues are ordinary victims; higher classes are not moved
                add_submitted_later(ms.victims[p])
        if reclaim_team is not None:
            for p in sorted(ms.victims):
                if p < prio:
                    continue
                for cost, rid, run in ms.victims[p]:
                    if rid in gone or not reserved.isdisjoint(run.on) or unsaved_peer(run):
                        continue
                    bt = borrower(run)
                    if bt is not None:
                        cands.append((2, cost, rid, run, run.on, None, bt))
        return cands, later

    def _choose(
        self, a: _Attempt, cands: list[_Candidate], later: set[str]
    ) -> tuple[list[_Candidate], dict[int, int], Index] | None:
        """The fewest candidates, in preference order, whose GPUs make the gang fit, and where
        it would go: ``(chosen, take, base)``, or None (recorded as failed for this shape)."""
        job, ms, w, g, prio = a.job, a.ms, a.w, a.g, a.prio
        defrag, fail_key, mine = a.defrag, a.fail_key, a.mine
        tier: Callable[[_Candidate], int] | None = None
        if self.cfg.victims_lowest_rank_first:
            # Moves (later-submitted jobs under submission order or defragmenting, borrowed GPUs
            # under reclaim) first; then victims of lower ranks, the lowest rank first: a lower
            # class, then the LAS queue with the most attained service.
            def lower_rank_first(c: _Candidate) -> int:
                rank: int = c[3].prio
                return -1 if rank >= prio or c[2] in later else rank

            tier = lower_rank_first

            lo, hi = a.lower
            if lo < hi and self.runs_unique and cands[lo][3].prio >= 0:
                # The victims of lower ranks came in that order already ((rank, cost, id), a
                # chain of sorted lists), and everything else sorts before them (kinds 0 and 1,
                # and moves of tier -1): only the rest is sorted.
                rest = cands[:lo] + cands[hi:]
                rest.sort(key=lambda c: (c[0], lower_rank_first(c), c[1], c[2]))
                rest.extend(cands[lo:hi])
                cands = rest
            else:
                cands.sort(key=lambda c: (c[0], lower_rank_first(c), c[1], c[2]))
        else:
            cands.sort(key=_KIND_COST_ID)
        picked = None
        if w == 1 and all(c[0] != 1 for c in cands):
            picked = self.cheapest_node(cands, (ms.long or ms.now)["all"], g, tier)
        cands = picked if picked is not None else cands[:_MAX_VICTIM_CANDIDATES]
        base = (ms.long or ms.now)["all"]
        bcnt = base.cnt
        cap = ms.pools["all"].cap
        # What-if counts of touched nodes and the resulting worker slots, updated in O(1) per
        # node: fitting is "slots >= w" (the tiered placement always succeeds then).
        cnt: dict[int, int] = {}
        slots = base.slots(g)

        def add(on: dict[int, int], sign: int) -> None:
            nonlocal slots
            for i, k in on.items():
                old = cnt.get(i)
                if old is None:
                    old = bcnt[i]
                new = old + sign * k
                cnt[i] = new
                slots += min(new, cap) // g - min(old, cap) // g

        chosen: list[_Candidate] = []
        units_on: dict[str, dict[int, int]] = {}
        fits = False
        for c in cands:
            if c[0] == 1:
                d = units_on.setdefault(c[2], {})
                for i, k in c[4].items():
                    d[i] = d.get(i, 0) + k
            elif c[0] == 2 and c[2] in units_on:
                # A fully preempted elastic job also frees the units already counted.
                d = units_on[c[2]]
                on = {i: k - d.get(i, 0) for i, k in c[4].items() if k > d.get(i, 0)}
                c = c[:4] + (on,) + c[5:]
            add(c[4], 1)
            chosen.append(c)
            if slots >= w:
                fits = True
                break
        if not fits:
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        # Drop what is not needed, most expensive first (victims before elastic shrinks).
        kept: list[_Candidate] = []
        for c in chosen[::-1]:  # not reversed(): mypyc fails to compile that here
            add(c[4], -1)
            if slots < w:
                add(c[4], 1)
                kept.append(c)
        chosen = kept[::-1]
        prefer = ms.ds_nodes.get(job.dataset) if job.dataset else None
        # a one-node job goes where placement on the what-if copy would put it (no copy)
        one = base.pick_node_after(cnt, g, prefer) if w == 1 else None
        if one is not None:
            take = {one: g}
        else:
            hyp = base.clone()
            for i, n in cnt.items():
                hyp.set(i, min(max(n, 0), cap))
            plan = hyp.place(w, g, prefer)
            assert plan is not None
            take = {i: workers * g for i, workers in plan}
        freed: dict[int, int] = {}
        for c in chosen:
            for i, k in c[4].items():
                freed[i] = freed.get(i, 0) + k
        for c in list(reversed(chosen)):
            if all(take.get(i, 0) <= base.cnt[i] + freed[i] - k for i, k in c[4].items()):
                chosen.remove(c)
                for i, k in c[4].items():
                    freed[i] -= k
        if defrag and not self.moves_fit(chosen, later, base, take, cap):
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        return chosen, take, base

    def _grace_of(self, job: PendingJob, c: _Candidate) -> float:
        """The grace a chosen candidate gets: a victim of the job's own class runs on to just
        past its next checkpoint, so it loses no work (the GPUs come a little later; the job
        keeps its reservation)."""
        grace = self.cfg.preemption_grace_s
        classes = self.classes
        if c[0] != 2 or classes.get(c[3].job.priority_class, 0) != classes.get(
            job.priority_class, 0
        ):
            return grace
        run: _Run = c[3]
        r = run.job
        interval = r.checkpoint_interval_s
        base = r.last_checkpoint_at
        if not interval or base is None:
            return grace
        now = self.now
        due = base + interval * max(1, math.ceil((now - base) / interval))
        return max(grace, due - now + _AFTER_CHECKPOINT_S)

    def _released_in_time(
        self, job: PendingJob, ms: _Model, w: int, g: int, at: float
    ) -> tuple[bool, ReleaseWalk | None]:
        """Whether running jobs' expected ends (not those already past) free GPUs for ``job``'s
        gang no later than ``at``, when the chosen candidates would; and if so, and no overdue
        release was passed over, that walk (the one ``reserve`` would make: it stops at the
        same time whatever its horizon)."""
        if any(fg <= g and fw <= w for fw, fg in ms.easy_failed):
            return False, None  # as reserve(hold=False) answers
        natural, cnt, passed_over = self.release_walk(ms, w, g, overdue=False, until=at)
        if natural is None or natural > at:
            return False, None
        return True, (None if passed_over else (natural, cnt))

    def _freed_at(
        self, job: PendingJob, chosen: list[_Candidate]
    ) -> tuple[float, dict[str, float]]:
        """When the chosen candidates' GPUs are all free for ``job``, and each victim's grace
        (:meth:`_grace_of`) by job id; shrinks get the ordinary grace."""
        grace = self.cfg.preemption_grace_s
        now = self.now
        at = now
        graces: dict[str, float] = {}
        for c in chosen:
            if c[0] == 0:
                at = max(at, c[3].job.releasing_at)
            elif c[0] == 2:
                g = graces[c[2]] = self._grace_of(job, c)
                at = max(at, now + g)
            else:
                at = max(at, now + grace)
        return at, graces

    def _emit(
        self,
        a: _Attempt,
        later: set[str],
        chosen: list[_Candidate],
        take: dict[int, int],
        base: Index,
        at: float,
        graces: dict[str, float],
    ) -> tuple[str, float | None]:
        """The preemptions (each victim with its grace from ``graces``), shrinks and the
        reservation at ``at`` (the end of the grace period; both from :meth:`_freed_at`) for the
        chosen candidates; returns the job's ``(why, estimated_start)``."""
        job, ms, w, g, prio, need = a.job, a.ms, a.w, a.g, a.prio, a.need
        model, defrag, reclaim_team = ms.gpu, a.defrag, a.reclaim_team
        grace = self.cfg.preemption_grace_s

        # Emit: preemptions, shrinks, and a reservation at the end of the grace period.
        n_gpus = 0
        for c in chosen:
            if c[0] == 0:
                self.gone.add(c[2])
                n_gpus += sum(c[4].values())
        victims = [c for c in chosen if c[0] == 2]
        victim_ids = {c[2] for c in victims}
        by_job: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
        for c in chosen:
            if c[0] == 1 and c[2] not in victim_ids:
                by_job.setdefault(c[2], []).extend(c[5])
        for c in victims:
            run = c[3]
            self.gone.add(c[2])
            n_gpus += sum(c[4].values())
            # the reason is the victim's team's to read: another team's job is not named
            preemptor_id = other_team_job(job.id, job.team, run.job.team)
            preemptor = (
                f"{job.id} ({job.priority_class})"
                if job.team == run.job.team
                else f"a {job.priority_class} job of another team"
            )
            if run.prio % self.levels < self.fifo_queues:
                basis = "was submitted last of the jobs in its queue (served oldest first)"
            else:
                basis = "loses the least work since its last checkpoint"
            if run.prio < prio and self.classes.get(run.job.priority_class, 0) == self.classes.get(
                job.priority_class, 0
            ):
                # Same class: only the attained-service queue separates them (LAS).
                if (
                    self.cfg.victims_lowest_rank_first
                    and c[2] not in later
                    and run.prio in ms.peer_victims
                ):
                    basis = "was started last of the jobs in its queue"
                reason = (
                    f"attained service: {preemptor} needs {need} {model} "
                    f"GPUs and has received less GPU service than {c[2]}, which {basis}"
                )
            elif c[2] in later and defrag:
                reason = (
                    f"defragment: {preemptor_id} needs {w}x{g} {model} GPUs, as many are free "
                    f"but spread across nodes; {c[2]}, submitted after it, can restart on the "
                    "GPUs left free on other nodes"
                )
            elif c[2] in later:
                reason = (
                    f"submission order: {preemptor_id} needs {g} {model} GPUs on one node and "
                    f"was submitted before {c[2]}, in the same attained-service queue; {c[2]} "
                    f"{basis}"
                )
            elif run.prio < prio:
                reason = (
                    f"priority: {preemptor} needs {need} {model} GPUs; "
                    f"{c[2]} ({run.job.priority_class}) {basis}"
                )
            else:
                assert reclaim_team is not None  # a victim of neither rule is a reclaim's
                t, q = reclaim_team
                reclaimer = f"team {t}" if t in self.ancestry(run.job.team) else "another team"
                reason = (
                    f"reclaim: {reclaimer} is within its guarantee of {q.guaranteed} {model} "
                    f"GPUs and reclaims GPUs borrowed by team {c[6]} for {preemptor}"
                )
                for bt in self.ancestry(run.job.team):
                    self.reclaimed[(bt, model)] = self.reclaimed.get((bt, model), 0) + run.gpus
            self.preempts.append(Preempt(c[2], reason, graces[c[2]]))
        shrink_gpus = 0
        for rid in sorted(by_job):
            run = self.runs[rid]
            units = by_job[rid]
            self.shrunk[rid] = units
            removed: dict[str, set[int]] = {}
            for i, idxs in units:
                removed.setdefault(self.names[i], set()).update(idxs)
                shrink_gpus += len(idxs)
            kept = {}
            for name in sorted(run.job.placement):
                left = tuple(x for x in run.job.placement[name] if x not in removed.get(name, ()))
                if left:
                    kept[name] = left
            self.resizes.append(Resize(rid, run.job.workers - len(units), kept))
        for i, k in take.items():
            self.protect(ms, i, min(k, base.cnt[i]))
            ms.reserved_nodes.add(i)
        self.epoch += 1
        ms.min_res_at = min(ms.min_res_at, at)
        ms.reservations.append((job.id, at, job.team))
        self.reserves.append(Reserve(job.id, at, tuple(sorted(self.names[i] for i in take))))
        parts = []
        if n_gpus:
            parts.append(f"waiting for {n_gpus} preempted GPUs to be released")
        if shrink_gpus:
            parts.append(f"waiting for {shrink_gpus} GPUs released by shrinking elastic jobs")
        if victims or by_job:
            when = f"grace {_fmt_s(max([grace, *graces.values()]))} s"
        else:
            when = f"expected at t={_fmt_t(at)}"
        return f"{'; '.join(parts)} ({when})", at

    @staticmethod
    def moves_fit(
        chosen: list[_Candidate], later: set[str], base: Index, take: dict[int, int], cap: int
    ) -> bool:
        """Defragmenting: every moved job's workers fit, node by node, in the GPUs that stay
        free outside the gang's nodes (largest workers first, into the largest holes)."""
        workers = []
        for c in chosen:
            if c[2] in later:
                job = c[3].job
                workers.extend([job.gpus_per_worker] * job.workers)
        if not workers:
            return True
        holes = sorted(
            (min(k, cap) for i, k in base.cnt.items() if k and i not in take), reverse=True
        )
        for need in sorted(workers, reverse=True):
            for h, room in enumerate(holes):
                if room >= need:
                    holes[h] = room - need
                    break
            else:
                return False
            holes.sort(reverse=True)
        return True

    @staticmethod
    def cheapest_node(
        cands: list[_Candidate],
        base: Index,
        g: int,
        tier: Callable[[_Candidate], int] | None = None,
    ) -> list[_Candidate] | None:
        """For a one-node job of ``g`` GPUs: the candidates that complete one node for the
        least lost work (each node's cheapest candidates first), or None if no node completes.
        With ``tier`` (the candidates are sorted by it first), a node's highest tier counts
        before its lost work.

        Adding candidates cheapest-first over the whole cluster would scatter them, and on a
        busy, fragmented cluster no node completes before the candidate cap."""
        bcnt = base.cnt
        have: dict[int, int] = {}
        top: dict[int, int] = {}
        cost: dict[int, float] = {}
        picks: dict[int, list[_Candidate]] = {}
        best = None
        for c in cands:  # sorted: by tier, then cheapest first
            t = tier(c) if tier is not None else 0
            if best is not None and (t, c[1]) > best[0][:2]:
                # candidates ascend by (tier, cost) and costs are >= 0: a node completed from
                # here on has at least this tier and costs at least c[1]; it cannot win
                break
            for i, k in c[4].items():
                h = have.get(i)
                if h is None:
                    h = bcnt[i]
                if h >= g:
                    continue  # this node is complete already
                have[i] = h + k
                top[i] = max(top.get(i, t), t)
                cost[i] = cost.get(i, 0.0) + c[1]
                picks.setdefault(i, []).append(c)
                if h + k >= g:
                    key = (top[i], cost[i], len(picks[i]), i)
                    if best is None or key < best[0]:
                        best = (key, picks[i])
        return None if best is None else list(best[1])
