"""Rule 5 of docs/policy.md: EASY backfill with GPU-granular reservations.

The highest-ranked blocked jobs of each GPU model (``reservations_per_model``) get a reservation
at the earliest time the running jobs' expected ends (and the ends of jobs started this cycle)
free enough GPUs for their gang; the GPUs it counts on are held (``protect``) so lower-ranked
jobs start only on other GPUs or if they end before it. Releases come from one list per GPU model,
built in O(running log running) once per cycle and walked only as far as needed (on a one-model
cluster each release's nodes are resolved only when a walk first reaches it). With LAS
queues, a job that has waited less than ``las.reserve_after_s`` while preemptible work could make
room gets no reservation yet (with clusters, unless it may use one pool only, rule 3b).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.policy.cycle_state import _CycleState
from scheduler.policy.memo import _LAST_RELEASE_NODES
from scheduler.policy.model import PendingJob, Reserve
from scheduler.policy.state import _INF, Release, ReleaseWalk, _Model

# A GPU model gets at most ``Config.reservations_per_model`` EASY reservations; blocked jobs that
# cannot get one (their GPUs are held by jobs without an expected end) may cost this many extra
# tries in all.
_EXTRA_RESERVATION_TRIES = 3


def _release_nodes(
    placement: Mapping[str, Sequence[int]], id_of: Mapping[str, int], node_model: Sequence[str]
) -> dict[str, tuple[tuple[int, int], ...]]:
    """The eligible nodes a placement frees GPUs on, with how many, by the nodes' GPU model."""
    per: dict[str, list[tuple[int, int]]] = {}
    for name, idxs in placement.items():
        i = id_of.get(name)
        if i is not None and idxs:
            pairs = per.get(node_model[i])
            if pairs is None:
                pairs = per[node_model[i]] = []
            pairs.append((i, len(idxs)))
    return {m: tuple(pairs) for m, pairs in per.items()}


class _Backfill(_CycleState):
    """Reservations of one cycle (a part of ``_Cycle``)."""

    # ------------------------------------------------------------------ reservations

    def release_order(self, model: str) -> list[Release]:
        """The GPU model's releases in time order: ``(expected release time, index into
        snapshot.running, job id, ((node, GPUs), ...) on the model's eligible nodes)``.

        The time is ``expected_end`` (or ``releasing_at`` if sooner), never before ``now``.
        Built for every model in one pass over the running jobs and sorted once per cycle, so a
        reservation's walk visits only the releases of its own model, each with its nodes
        already resolved (a cluster of several models otherwise walked the others' releases
        too). On a cluster of one model (one pool) every release is that model's, so a job's
        nodes are resolved only when a walk first reaches it (:meth:`release_pairs`; the entry
        holds None until then): walks stop at the first time the gang fits, a few hundred of
        5,000 releases on a cold cycle, and resolving all of them was about 6 % of its
        instructions. Their nodes, once resolved, are carried to the next call either way.
        """
        by_model = self._release_order
        if by_model is None:
            now = self.now
            topo = self.topo
            memo = _LAST_RELEASE_NODES[0]
            nodes_of = {}
            by_model = {}
            unknown = []
            lazy = None
            if len(self.models) == 1:
                lazy = by_model[self.model_names[0]] = []
            for k, r in enumerate(self.snap.running):
                end = r.expected_end
                rel = r.releasing_at
                if rel is not None and (end is None or rel < end):
                    end = rel
                if end is None:
                    unknown.append(k)
                    continue
                t = end if end > now else now
                seen = memo.get(r.id)
                if seen is not None and seen[0] is r.placement and seen[1] is topo:
                    nodes_of[r.id] = seen
                    per = seen[2]
                elif lazy is not None:
                    lazy.append((t, k, r.id, None))
                    continue
                else:
                    per = _release_nodes(r.placement, topo.id_of, topo.node_model)
                    nodes_of[r.id] = (r.placement, topo, per)
                for m, pairs in per.items():
                    lst = by_model.get(m)
                    if lst is None:
                        lst = by_model[m] = []
                    lst.append((t, k, r.id, pairs))
            _LAST_RELEASE_NODES[0] = self._release_memo = nodes_of
            for lst in by_model.values():
                lst.sort()  # (time, index) pairs differ: the rest is never compared
            self._release_order = by_model
            self._unknown_runs = unknown
        return by_model.get(model, [])

    def release_pairs(self, k: int) -> tuple[tuple[int, int], ...]:
        """The nodes (with GPUs) ``snapshot.running[k]``'s end releases on the one GPU model of
        a one-model cluster, resolved once per cycle (an entry of :meth:`release_order` that
        holds None); () if none of its nodes is eligible, where the eager build leaves the job
        out of the list. Carried to the next call like the eagerly resolved ones."""
        pairs = self._release_pairs.get(k)
        if pairs is None:
            r = self.snap.running[k]
            topo = self.topo
            per = _release_nodes(r.placement, topo.id_of, topo.node_model)
            self._release_memo[r.id] = (r.placement, topo, per)  # for the next call
            pairs = self._release_pairs[k] = per.get(self.model_names[0], ())
        return pairs

    def unknown_gpus(self, ms: _Model) -> int:
        """GPUs of the model's eligible nodes held by jobs without an expected end."""
        self.release_order(ms.name)  # sorts out the jobs without one
        running = self.snap.running
        id_of = self.id_of
        node_model = self.node_model
        n = ms.unknown_started
        for k in self._unknown_runs:
            r = running[k]
            if r.id in self.gone or r.id in self.shrunk:
                continue
            for name, idxs in r.placement.items():
                i = id_of.get(name)
                if i is not None and node_model[i] == ms.name:
                    n += len(idxs)
        return n

    def reserve_later(self, job: PendingJob, ms: _Model, need: int) -> bool:
        """LAS: no reservation (which would hold GPUs idle) yet for ``job``: it has waited less
        than ``las.reserve_after_s`` and preemptible jobs of its class or lower hold enough GPUs
        of the model for it. Those GPUs change hands by attained service anyway (the job may
        preempt them once they have run longer than it), so holding GPUs idle for it mostly
        delays others; a cluster of non-preemptible work keeps its reservations."""
        las = self.las
        if las is None or not self.cfg.preemption:
            return False
        after = las.reserve_after_s
        if after is None or after <= 0:
            return False
        if self.router is not None and len(self.route_of(job)[0]) == 1:
            # With clusters, a job that may use one pool only (an EU-only gang on the on-prem
            # cluster) is held GPUs at once: the small jobs that fill that pool for its price
            # have barely run, so attained-service preemption would not make room for it.
            return False
        if self.now - job.submitted_at - job.attained_service_s >= after:
            return False
        levels = self.levels
        top = self.classes.get(job.priority_class, 0) * levels + levels - 1
        held = self.victim_gpus_upto.get((ms.gpu, top))
        if held is None:
            held = 0
            for key in (ms.gpu, None):
                for p, n in self.victim_gpus.get(key, {}).items():
                    if p <= top:
                        held += n
            self.victim_gpus_upto[(ms.gpu, top)] = held
        return held >= need

    def release_walk(
        self, ms: _Model, w: int, g: int, overdue: bool = True, until: float = _INF
    ) -> tuple[float | None, dict[int, int], bool]:
        """The release timeline walked until the gang fits: ``(time it fits or None, GPUs per
        node counted by then, whether releases already overdue were passed over)``. Pure."""
        long_view = (ms.long or ms.now)["all"]
        base = long_view.cnt
        cap = ms.pools["all"].cap
        model = ms.name
        gone = self.gone
        shrunk = self.shrunk
        # Walk the releases in time order (running jobs from the cycle's sorted list of
        # releases, jobs started this cycle from a sorted list), keeping the worker-slot count up
        # to date in O(1) per release; the gang fits at the first time slots >= w. Jobs preempted
        # or shrunk this cycle are skipped: their GPUs are promised to a preemptor.
        rel = self.release_order(model)
        ri = 0
        n_rel = len(rel)
        passed_over = False
        if not overdue:
            # releases are never before now: those at now (overdue jobs) are a prefix
            now = self.now
            while ri < n_rel and rel[ri][0] <= now:
                _, run_k, _, pairs = rel[ri]
                ri += 1
                if not passed_over:
                    # an entry not resolved yet counts only if its job holds GPUs of the model
                    # (the eager build leaves the others out)
                    passed_over = bool(pairs if pairs is not None else self.release_pairs(run_k))
        started = sorted(ms.started_ends)
        si = 0
        n_started = len(started)
        cnt: dict[int, int] = {}
        slots = long_view.slots(g)
        found = None
        # Releases an earlier reservation of this cycle already counts on are not available
        # again (conservative: they stay claimed whatever the time), so reservations never
        # promise the same GPUs twice.
        debt = dict(ms.claimed)

        def release(i: int, k: int) -> None:
            nonlocal slots
            d = debt.get(i)
            if d:
                used = d if d < k else k
                debt[i] = d - used
                k -= used
                if not k:
                    return
            old = cnt.get(i)
            if old is None:
                old = base[i]
            new = old + k
            cnt[i] = new
            slots += min(new, cap) // g - min(old, cap) // g

        while slots < w and (ri < n_rel or si < n_started):
            t_run = rel[ri][0] if ri < n_rel else _INF
            t_new = started[si][0] if si < n_started else _INF
            t = t_run if t_run < t_new else t_new
            if t > until:
                break
            while ri < n_rel and rel[ri][0] == t:
                _, run_k, rid, pairs = rel[ri]
                ri += 1
                if rid in gone or rid in shrunk:
                    continue
                if pairs is None:
                    pairs = self.release_pairs(run_k)
                for i, n in pairs:
                    release(i, n)
            while si < n_started and started[si][0] == t:
                release(started[si][1], started[si][2])
                si += 1
            if slots >= w:
                found = t
        return found, cnt, passed_over

    def reserve(
        self,
        job: PendingJob,
        ms: _Model,
        w: int,
        g: int,
        hold: bool = True,
        overdue: bool = True,
        until: float = _INF,
        walked: ReleaseWalk | None = None,
    ) -> float | None:
        """Give ``job`` the model's EASY reservation if its gang fits on the release timeline.

        With ``hold=False`` only the start time is computed: nothing is held or emitted. With
        ``overdue=False`` jobs already past their expected end are not counted on (they may run
        on indefinitely). With ``until`` (only with ``hold=False``) a start later than ``until``
        is not looked for: None then means "not by ``until``". ``walked`` is the result of
        :meth:`release_walk` this call would make, when the caller has it already."""
        if hold and ms.easy_tries >= self.cfg.reservations_per_model + _EXTRA_RESERVATION_TRIES:
            return None
        if any(fg <= g and fw <= w for fw, fg in ms.easy_failed):
            return None
        if hold:
            ms.easy_tries += 1
        if walked is not None:
            found, cnt = walked
        else:
            found, cnt, _ = self.release_walk(ms, w, g, overdue, until)
        if not hold:
            return found
        if found is None:
            ms.easy_failed.append((w, g))
            return None
        long_view = (ms.long or ms.now)["all"]
        cap = ms.pools["all"].cap
        prefer = ms.ds_nodes.get(job.dataset) if job.dataset else None
        # a one-node job goes where placement on the what-if copy would put it (no copy)
        one = long_view.pick_node_after(cnt, g, prefer) if w == 1 else None
        if one is not None:
            plan = [(one, 1)]
            after = {one: min(cnt[one], cap)}
        else:
            hyp = long_view.clone()
            for node, c in cnt.items():
                hyp.set(node, min(c, cap))
            placed = hyp.place(w, g, prefer)
            assert placed is not None
            plan = placed
            after = hyp.cnt
        claimed = ms.claimed
        for node, workers in plan:
            k = workers * g
            released = after[node] - long_view.cnt[node]
            self.protect(ms, node, k - released)
            if released > 0:
                claimed[node] = claimed.get(node, 0) + (k if k < released else released)
            ms.reserved_nodes.add(node)
        ms.res_count += 1
        self.epoch += 1
        ms.min_res_at = min(ms.min_res_at, found)
        ms.reservations.append((job.id, found, job.team))
        self.reserves.append(Reserve(job.id, found, tuple(sorted(self.names[n] for n, _ in plan))))
        return found
