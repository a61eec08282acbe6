"""Rules 1c, 2, 3 and 7 of docs/policy.md on the cycle's capacity: guarantees before borrowing
(the order of jobs of one rank), the quota gate (a job that would take its team or an ancestor
past ``guaranteed + borrow_limit`` waits without holding anyone up), gang placement on the
capacity views (all workers or none, topology-aware best fit, spot pools first for preemptible
jobs), the bookkeeping of a start, and the capacity reasons of ``why``.

The views: ``ms.now`` counts the GPUs free now; ``ms.long`` (once anything is held) the GPUs
free and not held for a reservation or a preemptor. A job whose estimated end comes before the
model's earliest reservation backfills on ``now``; every other job places on ``long``.
"""

from __future__ import annotations

from scheduler.policy.capacity import Index
from scheduler.policy.cycle_state import _CycleState
from scheduler.policy.model import PendingJob, Quota, Start
from scheduler.policy.state import _fmt_t, _Model, other_team_job


class _Placement(_CycleState):
    """Quotas, capacity views, starts and capacity reasons of one cycle (a part of ``_Cycle``,
    whose ``__init__`` in ``engine`` sets the state these methods read)."""

    # ------------------------------------------------------------------ teams / quota

    def ancestry(self, team: str) -> tuple[str, ...]:
        """``team`` and its known ancestors, nearest first (cycle-safe)."""
        a = self._ancestry.get(team)
        if a is None:
            out = []
            seen = set()
            t: str | None = team
            while t is not None and t in self.teams and t not in seen:
                seen.add(t)
                out.append(t)
                t = self.teams[t].parent
            if not out:
                out = [team]
            a = self._ancestry[team] = tuple(out)
        return a

    def quota_chain(self, team: str, model: str) -> tuple[tuple[str, Quota], ...]:
        """Quota entries for ``model`` on ``team`` and its ancestors, nearest first."""
        key = (team, model)
        c = self._chains.get(key)
        if c is None:
            c = tuple(
                (t, self.teams[t].quota[model])
                for t in self.ancestry(team)
                if t in self.teams and model in self.teams[t].quota
            )
            self._chains[key] = c
        return c

    def quota_block(self, job: PendingJob, model: str, need: int) -> str | None:
        """Why ``need`` more GPUs of ``model`` would break a quota of the job's team tree."""
        if not self.any_quota:
            return None
        ms = self.models[model]
        model = ms.gpu  # quotas count GPU models over all clusters (one ledger, rule 3b)
        chain = ms.chains.get(job.team)
        if chain is None:
            chain = ms.chains[job.team] = self.quota_chain(job.team, model)
        for t, q in chain:
            used = self.used.get((t, model), 0)
            limit = q.guaranteed + q.borrow_limit
            if used + need > limit:
                who = f"team {t}" if t == job.team else f"team {t} (ancestor of {job.team})"
                return (
                    f"quota: {who} would use {used + need} {model} GPUs, above its limit of "
                    f"{limit} ({q.guaranteed} guaranteed + {q.borrow_limit} borrowable); "
                    f"{used} in use"
                )
        return None

    def within_guarantee_first(self, order: list[PendingJob]) -> list[PendingJob]:
        """Rule 1c: among jobs of one rank, those whose start keeps their team within
        its guarantee (on some GPU model they may use) come before those that would borrow,
        as Kueue admits requests under nominal quota first. Usage is the cycle's start.

        ``order`` is the queue order, whose jobs of one rank are adjacent: one pass. The jobs
        that would borrow are kept in ``borrowing`` for their ``why``."""
        gpu_models = sorted({ms.gpu for ms in self.models.values()})
        ranks = self.pending_ranks
        borrows: dict[tuple[str, str | None, int], bool] = {}
        out: list[PendingJob] = []
        later: list[PendingJob] = []  # the current rank's jobs that would borrow
        current = None
        for job in order:
            r = ranks.get(id(job))
            if r is None:
                r = self.pending_rank(job)
            if r != current:
                out += later
                later = []
                current = r
            need = job.workers * job.gpus_per_worker
            shape = (job.team, job.gpu_model, need)
            b = borrows.get(shape)
            if b is None:
                models = [job.gpu_model] if job.gpu_model is not None else gpu_models
                b = borrows[shape] = all(self.would_borrow(job.team, m, need) for m in models)
            if b:
                later.append(job)
                self.borrowing.add(id(job))
            else:
                out.append(job)
        out += later
        return out

    def would_borrow(self, team: str, model: str, need: int) -> bool:
        """Whether ``need`` more GPUs of ``model`` take the team's nearest quota for it above
        its guarantee (a team without one is outside the quota system: never)."""
        chain = self.quota_chain(team, model)
        if not chain:
            return False
        t, q = chain[0]
        return self.used.get((t, model), 0) + need > q.guaranteed

    # ------------------------------------------------------------------ capacity

    def views(self, ms: _Model, short: bool) -> dict[str, Index]:
        return ms.now if short or ms.long is None else ms.long

    def refresh(self, i: int) -> None:
        """Re-sync node ``i``'s counts in every view after a take or a protection."""
        free = len(self.free[i])
        prot = self.protected[i]
        pools_of = self._pools_of
        if pools_of is None:
            # built on the first change only: most cycles change nothing
            pools_of = self._pools_of = [[] for _ in self.names]
            for ms in self.models.values():
                for key, pool in ms.pools.items():
                    for n in pool.nodes:
                        pools_of[n].append((ms, key))
        for ms, key in pools_of[i]:
            ms.now[key].set(i, free)
            if ms.long is not None:
                ms.long[key].set(i, free - prot if free > prot else 0)

    def protect(self, ms: _Model, i: int, k: int) -> None:
        if k <= 0:
            return
        if ms.long is None:
            ms.long = {key: idx.clone() for key, idx in ms.now.items()}
        self.protected[i] += k
        self.epoch += 1
        self.refresh(i)

    def pool_order(self, ms: _Model, preemptible: bool) -> tuple[str, ...]:
        if "spot" not in ms.pools:
            return ("all",)
        return ("spot", "all") if preemptible else ("ondemand", "all")

    def take(self, ms: _Model, plan: list[tuple[int, int]], g: int) -> dict[str, tuple[int, ...]]:
        """Allocate the lowest free GPU indices per node of ``plan``; returns the placement."""
        placement = {}
        self.epoch += 1
        for i, workers in plan:
            k = workers * g
            f = self.free[i]
            placement[self.names[i]] = tuple(f[:k])
            del f[:k]
            self.refresh(i)
        return {name: placement[name] for name in sorted(placement)}

    def initial_slots(self, ms: _Model, g: int) -> int:
        """Worker slots of ``g`` GPUs the model had free at the start of the cycle."""
        s = ms.initial.get(g)
        if s is None:
            free0 = self.free0
            s = ms.initial[g] = sum(free0[i] // g for i in ms.pools["all"].nodes)
        return s

    def static_slots(self, ms: _Model, g: int) -> int:
        s = ms.static_slots.get(g)
        if s is None:
            s = sum(n * (size // g) for size, n in ms.sizes.items())
            ms.static_slots[g] = s
        return s

    def start(
        self, job: PendingJob, ms: _Model, plan: list[tuple[int, int]], g: int, k: int
    ) -> None:
        # GPUs held for a reservation that this (short, backfilled) job borrows go back to that
        # reservation when it ends: its release must not be promised to a later reservation.
        protected = self.protected
        unheld = [max(len(self.free[i]) - protected[i], 0) for i, _ in plan]
        placement = self.take(ms, plan, g)
        self.starts.append(Start(job.id, placement, k))
        need = k * g
        for t in self.ancestry(job.team):
            self.used[(t, ms.gpu)] = self.used.get((t, ms.gpu), 0) + need
        if job.runtime_estimate_s is not None:
            end = self.now + job.runtime_estimate_s
            for (i, workers), own in zip(plan, unheld, strict=True):
                n = min(workers * g, own)
                if n:
                    ms.started_ends.append((end, i, n))
        else:
            ms.unknown_started += need

    # ------------------------------------------------------------------ why

    def never_fits(self, ms: _Model, w: int, g: int) -> str:
        cap = ms.pools["all"].cap
        if g > cap:
            return f"needs {g} {ms.name} GPUs per worker; the largest ready, healthy node has {cap}"
        return (
            f"gang of {w}x{g} {ms.name} GPUs can never fit: the ready, healthy {ms.name} nodes "
            f"have room for only {self.static_slots(ms, g)} workers of {g} GPUs"
        )

    def capacity_why(
        self,
        ms: _Model,
        view: Index,
        short: bool,
        w: int,
        g: int,
        team: str,
        borrower: str | None = None,
    ) -> str:
        """Why ``w`` workers of ``g`` GPUs do not fit ``view``, told to a job of ``team``;
        ``borrower`` is the team of a job that rule 1c put behind the jobs of its rank within
        their guarantees."""
        now_view = ms.now["all"]
        reservations = ms.reservations
        key = (
            ms.name,
            w,
            g,
            id(view),
            view.version,
            now_view.version,
            len(reservations),
            borrower,
            bool(reservations) and reservations[0][2] == team,
        )
        cached = self.why_cache.get(key)
        if cached is not None:
            return cached
        m = ms.name
        if w == 1:
            base = (
                f"needs {g} free {m} GPUs on one node; the largest free block is {view.max_block()}"
            )
        else:
            free = view.group_free(0)
            base = (
                f"gang of {w}x{g} {m} GPUs does not fit: free GPUs per node leave room for "
                f"{view.slots(g)} of {w} workers"
            )
            if free >= w * g:
                base += f" ({free} GPUs free in total, spread too thinly across nodes)"
        if view is not now_view and now_view.slots(g) >= w and reservations:
            rj, rat, rteam = reservations[0]
            base += (
                f"; the free GPUs are held for {other_team_job(rj, rteam, team)} "
                f"(reserved at t={_fmt_t(rat)}); "
                "an estimated end before then would let it backfill"
            )
        elif self.initial_slots(ms, g) >= w:
            if borrower is None:
                base += (
                    "; the free GPUs went to higher-ranked jobs this cycle (priority, fair share)"
                )
            else:
                chain = self.quota_chain(borrower, ms.gpu)
                team = chain[0][0] if chain else borrower
                who = (
                    f"team {team}" if team == borrower else f"team {team} (ancestor of {borrower})"
                )
                base += (
                    "; the free GPUs went to jobs ahead of it this cycle (priority, fair share, "
                    f"then guarantees: it would take {who} above its guarantee, so jobs of its "
                    "rank within their teams' guarantees go first)"
                )
        self.why_cache[key] = base
        return base
