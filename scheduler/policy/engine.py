"""The scheduling policy engine: :func:`decide` turns one :class:`Snapshot` into :class:`Decisions`.

Pure and deterministic: no clock (time is ``snapshot.now``), no I/O, no randomness, no
iteration over hash-ordered string sets; the same snapshot always yields the same decisions.

One cycle, in order (docs/policy.md explains each rule and default):

1. Rank the pending queue: priority class (and inside a class, with
   ``Config.las``, on by default, the least-attained-service queue: jobs that
   received less GPU service first), then hierarchical fair-share standing, then the
   ``Config.queue_order`` tie-break (default "fair": requeued jobs first, then smallest predicted
   remaining GPU-time, aged so that waiting halves a job's effective size every
   ``queue_aging_s``). With quotas, among jobs of one rank those that stay within their team's
   guarantee go before those that would borrow.
2. Walk the queue once. A job whose dataset is not ready, or whose team (or an ancestor) would
   exceed its quota, waits without holding anyone up. Otherwise the job is placed as a gang
   (all workers or none) with topology-aware best-fit placement on ``ready`` nodes with health at
   least ``min_health``; preemptible jobs try spot nodes first, others avoid spot nodes unless
   nothing else fits; nodes caching the job's dataset are preferred.
3. A job that does not fit may (if higher priority than preemptible jobs, including preemptible
   jobs of its class in a higher attained-service queue, or reclaiming GPUs borrowed from its
   guarantee by jobs of its class or a lower one) shrink elastic jobs and then preempt the victims
   that lose the least work (GPUs x time since their last checkpoint; among victims of its own
   class, who lose none, the most recently started run), skipping victims whose next checkpoint is
   due within ``checkpoint_protect_s`` (a one-node job takes the node whose victims cost the least
   in total: lost work, or for victims of its own class their runs' ages; with LAS queues it may
   also preempt jobs of its own queue submitted after it). Inside a class, a victim must have saved
   a checkpoint in its current run and runs on to just past its next one (the minimum quantum: no
   work lost, no storms). Nobody is preempted when running jobs' expected ends free the GPUs no
   later: the job holds those. Freed GPUs come back only after ``preemption_grace_s``, so the job
   is reported pending ("waiting for N preempted GPUs ...") with a reservation at the end of the
   grace period; those GPUs are never handed to another job in the same cycle.
4. Otherwise the highest-ranked blocked jobs of each GPU model (``reservations_per_model``,
   default 4) get an EASY-backfill reservation each at the earliest time the running jobs'
   expected ends free enough GPUs (a later reservation never counts on GPUs or releases an
   earlier one counts on); with LAS queues, not before a job has waited ``las.reserve_after_s``
   while preemptible work could make room. Lower-ranked jobs start only on GPUs no reservation
   needs, or if their estimated end comes before the earliest reservation.
5. Elastic running jobs grow into GPUs left idle on GPU models where no job waits for capacity.

Where each rule lives: ranking, the attained-service queues and deadlines (1) in ``ranking``;
guarantees before borrowing (1), the gates, placement, starts and capacity reasons (2, and the
``why`` texts) in ``placement``;
preemption planning (3) in ``preemption`` (its view of running jobs in ``victims``);
reservations (4) in ``backfill``; elastic shrink and growth (3, 5) in ``elastic``; what is
carried between calls in ``memo``; the per-cycle views in ``state``; the configuration's fields
in ``fields``.
This module holds the cycle itself: the state it builds from the snapshot, and the walk of the
queue that applies the rules in order (:meth:`_Cycle.consider`, :meth:`_Cycle.place_or_plan`).

Invariants (checked by the property tests): a started GPU was free now and is given once; a
started gang has all its workers, ``gpus_per_worker`` each on one node of the requested model,
every node ``ready`` and healthy; every pending job not started gets a non-empty ``why``;
non-preemptible jobs and jobs inside their checkpoint protection window are never preempted.

Cost: O(N + R) to index N nodes and R running jobs, O(P log P) to rank P pending jobs, O(1)-ish per
job that cannot fit (memoised slot counts per request shape, and a job shaped like one that just
waited reuses that outcome while nothing changed), O(nodes of the chosen group) per start;
reservations walk one sorted list of expected releases only as far as they need; preemption
planning is capped. Never jobs x nodes x GPUs. Static topology and fair-share standings are
memoised by value across calls (a hit equals a rebuild, so decisions never depend on the memo).
Also carried over from the previous call, likewise exact: each pool's capacity index (updated for
the nodes whose free count changed, O(N) compares plus O(changed nodes)), per running job its LAS
rank (until the time it can next change) and its planner view, while the caller passes the same
RunningJob object or placement mapping, and the summary of the running jobs the cycle starts from
(``running``: O(R) set and identity checks plus O(changed jobs) updates).
"""

from __future__ import annotations

from typing import Any

from scheduler.policy.backfill import _Backfill
from scheduler.policy.elastic import _Elastic
from scheduler.policy.memo import (
    _LAST_PENDING,
    _LAST_RANKS,
    _free_lists,
    _fresh_index,
    _same_service,
    _topology,
    keep_index,
)
from scheduler.policy.model import (
    Decisions,
    Pending,
    PendingJob,
    Preempt,
    Quota,
    Reserve,
    Resize,
    RunningJob,
    Snapshot,
    Start,
)
from scheduler.policy.placement import _Placement
from scheduler.policy.preemption import _Preemption
from scheduler.policy.ranking import (
    _fifo_queues,
    _las,
    _levels,
    _long_run,
    _pending_rank,
    _rank_span,
    _thresholds,
    deadline_warning,
    queue_order,
)
from scheduler.policy.routing import Router
from scheduler.policy.running import keep, running_summary
from scheduler.policy.state import _fmt_s, _fmt_t, _Model, _Run, new_pending, other_team_job
from scheduler.policy.victims import _Victims

__all__ = ["decide", "queue_order"]


class _Cycle(_Placement, _Backfill, _Victims, _Preemption, _Elastic):
    """State of one ``decide`` call. Built from the snapshot, consumed by :meth:`run`."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        cfg = self.cfg = snap.config
        self.now = snap.now
        self.classes = snap.priority_classes
        self.las = _las(cfg)  # the attained-service section; None = off
        self.th = _thresholds(cfg)  # LAS queue thresholds (GPU-s); () = off
        self.long_run = _long_run(cfg, self.th)  # s of run time for the long-run queue; 0 = off
        # rank % levels == 0 is a class's most-served queue; with las.bottom_fifo_queues those with
        # rank % levels < fifo_queues are served in submission order and give up their most
        # recently submitted job first
        self.levels = _levels(self.th, self.long_run)
        self.fifo_queues = _fifo_queues(cfg, self.th)
        self.starts: list[Start] = []
        self.preempts: list[Preempt] = []
        self.reserves: list[Reserve] = []
        self.resizes: list[Resize] = []
        self.pendings: list[Pending] = []
        self.preempt_attempts = 0
        self.gone: set[str] = set()  # running jobs preempted this cycle
        self.shrunk: dict[str, list[tuple[int, tuple[int, ...]]]] = {}  # job -> removed units
        self.why_cache: dict[tuple[Any, ...], str] = {}
        self.borrowing: set[int] = set()  # ids of the jobs rule 1c put after their rank's others

        # ---- nodes: eligible ones get global ids in topology order
        min_health = cfg.min_health
        self.node_by_name = {n.name: n for n in snap.nodes}
        eligible = [
            n for n in snap.nodes if n.state == "ready" and n.health >= min_health and n.gpus > 0
        ]
        # Routing (rule 3b): with clusters, nodes of an unknown or unreachable cluster get no
        # new work, and every (GPU model, cluster, capacity type) is a pool of its own.
        self.routed = bool(snap.clusters)
        if self.routed:
            reachable = {c.name for c in snap.clusters if c.reachable}
            eligible = [n for n in eligible if n.cluster in reachable]
        topo = self.topo = _topology(eligible, self.routed)
        elig = [eligible[p] for p in topo.order]
        self.names = topo.names
        self.id_of = topo.id_of
        self.rack = topo.rack
        self.node_model = topo.node_model
        self.free: list[list[int]] = _free_lists(elig)  # distinct, in range
        self.protected = [0] * len(elig)
        self.free0 = [len(f) for f in self.free]
        self.models: dict[str, _Model] = {}
        self._pools_of = None  # see refresh
        free = self.free
        for model, pools, ds_nodes, sizes in topo.models:
            ms = _Model(model, topo.gpu_of[model])
            ms.pools = pools
            ms.ds_nodes = ds_nodes
            ms.sizes = sizes
            for key, pool in pools.items():
                ms.now[key] = _fresh_index(pool, free)
            self.models[model] = ms
        self.model_names = sorted(self.models)
        # consider()'s per-model "ends before the earliest reservation" key, in self.models'
        # order; without an estimate it is all False
        self.model_states = tuple(self.models.values())
        self.short_without_estimate = (False,) * len(self.model_states)
        self.router: Router | None = None
        self.keys_of: dict[str, list[str]] = {}  # GPU model -> its pools (routed)
        self.routes: dict[int, tuple[list[str], list[str]]] = {}  # id(job) -> route (routed)
        self.exclusive: set[str] = set()  # pools some pending job can use alone (routed)
        if self.routed:
            for key in self.model_names:
                self.keys_of.setdefault(topo.gpu_of[key], []).append(key)
            pool_facts = {}
            for key, ms in self.models.items():
                first = elig[ms.pools["all"].nodes[0]]
                pool_facts[key] = (first.cluster, first.gpu_model, first.spot, ms.pools["all"].cap)
            self.router = Router(snap, pool_facts)

        # ---- teams and quotas
        self.teams = {t.name: t for t in snap.teams}
        self._chains: dict[tuple[str, str], tuple[tuple[str, Quota], ...]] = {}
        self._ancestry: dict[str, tuple[str, ...]] = {}
        self.used: dict[tuple[str, str], int] = {}
        self.reclaimed: dict[tuple[str, str], int] = {}

        # ---- running jobs: quota usage now (only if any team has a quota), the cheapest
        # facts the preemption planner needs to know whether to look at all; the full planner
        # view is built lazily (ensure_runs) because most cycles never need it.
        self.any_quota = any(t.quota for t in snap.teams)
        per: dict[tuple[str, str], int] = {}
        self.has_elastic = False
        self.has_releasing = False
        classes = self.classes
        th = self.th
        now = self.now
        min_victim: dict[str | None, int] = {}  # model -> lowest priority of a preemptible job
        # LAS: model -> rank -> GPUs of preemptible jobs (only what the reservation gate reads)
        victim_gpus: dict[str | None, dict[int, int]] = {}
        las = self.las
        gate = (
            las is not None
            and las.reserve_after_s is not None
            and las.reserve_after_s > 0
            and cfg.preemption
        )
        run_rank: dict[str, int] = {}
        self.run_rank = run_rank  # LAS: effective rank of preemptible running jobs
        any_quota = self.any_quota
        long_run = self.long_run
        # Without quotas the summary is kept from the previous call and updated for the jobs
        # that changed (``running``); with quotas, or where that cannot be exact, it is rebuilt.
        summary = None if any_quota else running_summary(snap.running, classes, th, long_run, now)
        self._summary: tuple[Any, ...] | None = None
        if summary is not None:
            self.has_elastic, self.has_releasing, self.run_rank, min_victim, kept, state = summary
            self._summary = state  # handed back when the cycle is done (run)
            if gate:
                victim_gpus = kept
        else:
            memo_classes, memo_th, memo_ranks = _LAST_RANKS[0]
            if memo_th != (th, long_run) or memo_classes != classes:
                memo_classes, memo_ranks = dict(classes), {}
            ranks: dict[str, tuple[Any, ...]] = {}
            for r in snap.running:
                run_model = r.gpu_model
                if r.elastic is not None:
                    self.has_elastic = True
                if r.releasing_at is not None:
                    self.has_releasing = True
                elif r.preemptible:
                    if th:
                        # this loop runs over every running job every call: reuse the last call's
                        # rank while it provably still holds
                        span = memo_ranks.get(r.id)
                        if span is None or not span[1] <= now <= span[2]:
                            span = _rank_span(
                                r, classes.get(r.priority_class, 0), th, long_run, now
                            )
                        elif span[0] is not r:
                            if _same_service(span[0], r):  # rebuilt for another field
                                span = (r, span[1], span[2], span[3])
                            else:
                                span = _rank_span(
                                    r, classes.get(r.priority_class, 0), th, long_run, now
                                )
                        ranks[r.id] = span
                        p = run_rank[r.id] = span[3]
                        if gate:
                            vg = victim_gpus.setdefault(run_model, {})
                            vg[p] = vg.get(p, 0) + r.workers * r.gpus_per_worker
                    else:
                        p = classes.get(r.priority_class, 0)
                    m = min_victim.get(run_model)
                    if m is None or p < m:
                        min_victim[run_model] = p
                if any_quota:
                    if run_model is None:
                        run_model = self.model_of_placement(r)
                        if run_model is None:
                            continue
                    team_model = (r.team, run_model)
                    per[team_model] = per.get(team_model, 0) + r.workers * r.gpus_per_worker
            if th:
                _LAST_RANKS[0] = (memo_classes, (th, long_run), ranks)
        self.min_victim = min_victim
        # GPU model -> the lowest rank of a preemptible job on it, or None (plan_preemption)
        self.lowest_victim: dict[str | None, int | None] = {}
        self.victim_gpus = victim_gpus
        self.victim_gpus_upto: dict[tuple[str, int], int] = {}  # (model, rank) -> GPUs, memo
        for (team, model), n in per.items():
            for t in self.ancestry(team):
                self.used[(t, model)] = self.used.get((t, model), 0) + n
        self.runs: dict[str, _Run] = {}
        self._runs_built = False
        self.runs_unique = True  # no two running jobs share an id (set by ensure_runs)
        self.epoch = 0  # bumped by every change of capacity or reservations in this cycle
        self.fail_cache: dict[tuple[Any, ...], tuple[int, str, tuple[Any, ...]]] = {}
        self.soft_plain: str | None = None  # see place_or_plan (start estimate, nothing held)
        self.hold_out = False  # see place_or_plan (held out for a cheaper pool, rule 3b)
        # GPU model -> its releases in time order (see release_order)
        self._release_order = None
        self._unknown_runs = []
        self._release_pairs = {}  # index into snapshot.running -> its resolved release nodes
        self._release_memo = {}  # what release_order carries to the next call
        self.pending_ranks: dict[int, int] = {}  # id(pending job) -> its LAS rank
        self.last_pending = _LAST_PENDING[0]  # see waits

    def pending_rank(self, job: PendingJob) -> int:
        r = self.pending_ranks.get(id(job))  # filled by queue_order
        return r if r is not None else _pending_rank(job, self.classes, self.th, self.long_run)

    def route_of(self, job: PendingJob) -> tuple[list[str], list[str]]:
        """Routing (rule 3b): the pools ``job`` may use in the order to try them, and why the
        others are excluded; computed once per job and cycle."""
        r = self.routes.get(id(job))
        if r is None:
            if job.gpu_model is not None:
                keys = self.keys_of.get(job.gpu_model, [])
            else:
                keys = self.model_names
            router = self.router
            assert router is not None
            r = self.routes[id(job)] = router.route(job, keys)
        return r

    def model_of_placement(self, r: RunningJob) -> str | None:
        for name in r.placement:
            node = self.node_by_name.get(name)
            if node is not None:
                return node.gpu_model
        return None

    # ------------------------------------------------------------------ main loop

    def run(self) -> Decisions:
        consider = self.consider
        if self.router is not None:
            # pools that some waiting job can use alone (see place_or_plan)
            for job in self.snap.pending:
                if job.dataset_ready:
                    keys = self.route_of(job)[0]
                    if len(keys) == 1:
                        self.exclusive.add(keys[0])
        order = queue_order(self.snap, self.pending_ranks)
        if self.any_quota:
            order = self.within_guarantee_first(order)
        for job in order:
            consider(job)
        self.grow_elastic()
        # nothing reads these any more: the next call may update them
        if self._summary is not None:
            keep(self._summary)
        for ms in self.models.values():
            for key, pool in ms.pools.items():
                keep_index(pool, ms.now[key])
        pending = self.warn_deadlines(tuple(self.pendings))
        _LAST_PENDING[0] = {p.job: p for p in pending}
        return Decisions(
            start=tuple(self.starts),
            preempt=tuple(self.preempts),
            reserve=tuple(self.reserves),
            resize=tuple(self.resizes),
            pending=pending,
        )

    def waits(self, job_id: str, why: str) -> None:
        """Record that the job waits for ``why``, without a start estimate. Most waiting jobs
        are told the same as in the last call: that call's object is reused (it is immutable,
        and equal to a new one)."""
        last = self.last_pending.get(job_id)
        if last is None or last.estimated_start is not None or last.why != why:
            last = new_pending(job_id, why)
        self.pendings.append(last)

    def warn_deadlines(self, pendings: tuple[Pending, ...]) -> tuple[Pending, ...]:
        """Each waiting job that will miss its deadline says so, ahead of why it waits."""
        late = {p.id: p for p in self.snap.pending if p.deadline is not None}
        if not late:
            return pendings
        out = []
        for pd in pendings:
            job = late.get(pd.job)
            note = job and deadline_warning(
                job, pd.estimated_start, self.now, self.cfg.default_runtime_s
            )
            out.append(Pending(pd.job, f"{note}; {pd.why}", pd.estimated_start) if note else pd)
        return tuple(out)

    def consider(self, job: PendingJob) -> None:
        """Start ``job`` or record why it waits (plus any preemption / reservation for it)."""
        if not job.dataset_ready:
            self.pendings.append(
                Pending(
                    job.id,
                    f"dataset {job.dataset or '(unnamed)'} is not ready yet; "
                    "the job waits without holding up others",
                )
            )
            return
        # A job shaped like one that just waited, of the same team, class and backfill window,
        # with nothing changed since (same epoch), waits for the same reason: skip the search
        # and the planning. This keeps a long blocked queue near O(1) per job.
        key = None
        if job.elastic is None:
            rank: int | None = 0
            if self.th:
                rank = self.pending_ranks.get(id(job))  # filled by queue_order
                if rank is None:
                    rank = self.pending_rank(job)
            est = job.runtime_estimate_s
            short: object
            if self.routed:
                # the job's own pools, in its order; its constraints and costs are in the key
                keys = self.route_of(job)[0]
                short = (
                    tuple(keys),
                    job.routing,
                    job.dataset,
                    job.dataset_size_gb,
                    tuple(
                        [
                            est is not None and self.now + est <= self.models[k].min_res_at
                            for k in keys
                        ]
                    ),
                )
            elif job.gpu_model is not None:
                ms = self.models.get(job.gpu_model)
                short = ms is not None and est is not None and self.now + est <= ms.min_res_at
            else:
                states = self.model_states
                if est is None:
                    short = self.short_without_estimate
                elif len(states) == 1:
                    # the common single-model cluster: the same 1-tuple, without the list
                    short = (self.now + est <= states[0].min_res_at,)
                else:
                    end = self.now + est
                    short = tuple([end <= ms.min_res_at for ms in states])
            key = (
                job.gpu_model,
                short,
                job.workers,
                job.gpus_per_worker,
                job.preemptible,
                job.priority_class,
                job.team,
                rank,
            )
            hit = self.fail_cache.get(key)
            if hit is not None and hit[0] == self.epoch:
                after = hit[2]
                if not after or after <= (job.submitted_at, job.id):
                    self.waits(job.id, hit[1])
                    return
        epoch = self.epoch
        out = self.place_or_plan(job)
        if out is None:
            return
        why, at = out
        soft_plain, self.soft_plain = self.soft_plain, None
        # a job that held out for a cheaper pool (rule 3b) did so for its own wait and costs
        hold_out, self.hold_out = self.hold_out, False
        if (
            key is not None
            and not hold_out
            and self.epoch == epoch
            and (at is None or soft_plain is not None)
        ):
            # a start estimate without held GPUs is the first job's only: the next
            # same-shaped job is told the rest
            cached = why if at is None else soft_plain
            assert cached is not None  # the condition above
            # With FIFO within a queue, a job submitted later than one that failed fails too
            # (fewer jobs were submitted after it); one submitted earlier may not.
            las = self.las
            by_submit = las is not None and (
                las.fifo_one_node_after_s is not None or las.defragment
            )
            mine = (job.submitted_at, job.id) if by_submit else ()
            self.fail_cache[key] = (epoch, cached, mine)
        if at is None:
            self.waits(job.id, why)
        else:
            self.pendings.append(new_pending(job.id, why, at))

    def place_or_plan(self, job: PendingJob) -> tuple[str, float | None] | None:
        """Start ``job`` (returns None) or return ``(why, estimated_start)``."""
        g = job.gpus_per_worker
        w = job.workers
        wmin = w
        if job.elastic is not None:
            wmin = max(1, min(w, job.elastic.min_workers))
        router = self.router
        excluded: list[str] = []
        if router is not None:
            # Routing (rule 3b): only the pools the job may use, preferred then cheapest first.
            models, excluded = self.route_of(job)
            if not models:
                if not excluded:
                    return f"no ready, healthy nodes with {job.gpu_model} GPUs", None
                return "no allowed cluster can ever hold it: " + "; ".join(excluded), None
            # Pools where a higher-ranked job already waits for capacity come last: a job that
            # can start elsewhere does not take the GPUs that job waits for (the cheap pool's
            # queue is not starved to save cents).
            waited = [m for m in models if self.models[m].capacity_wait or m in self.exclusive]
            if waited and len(waited) < len(models):
                models = [m for m in models if m not in waited] + waited
        else:
            models = [job.gpu_model] if job.gpu_model is not None else self.model_names
        if not models:
            return "no ready, healthy GPU nodes in the cluster", None
        reasons: list[str] = []
        # capacity-blocked: model, short, workers, GPUs per worker (a gang that must go on one
        # node of a slow interconnect, rule 3b, is one worker of all its GPUs)
        blocked: list[tuple[_Model, bool, int, int]] = []
        ever = False  # a pool that could hold the job some day (quota and capacity allowing)
        est = job.runtime_estimate_s
        for model in models:
            ms = self.models.get(model)
            if ms is None:
                reasons.append(f"no ready, healthy nodes with {model} GPUs")
                continue
            one = router is not None and router.one_block(job, model)
            gs, ws = (wmin * g, 1) if one else (g, wmin)
            if self.static_slots(ms, gs) < ws:
                reasons.append(self.never_fits(ms, ws, gs))
                continue
            ever = True
            q = self.quota_block(job, model, wmin * g)
            if q is not None:
                # one ledger: every pool of a GPU model gives the same quota reason; say it once
                if q not in reasons:
                    reasons.append(q)
                continue
            if not self.cfg.backfill and ms.blocked_by is not None:
                ahead = other_team_job(ms.blocked_by, ms.blocked_by_team, job.team)
                reasons.append(
                    f"queued behind {ahead}, which waits for {model} GPUs (backfill is off)"
                )
                ms.capacity_wait = True
                continue
            short = est is not None and self.now + est <= ms.min_res_at
            views = self.views(ms, short)
            order = self.pool_order(ms, job.preemptible)
            prefer = ms.ds_nodes.get(job.dataset) if job.dataset else None
            k = w
            if w > wmin:
                # No view places more workers than its slots hold (``Index.place`` answers None
                # at once), so an elastic job starts its walk at the most any view could place:
                # walked down one count at a time from 4,096 workers, 10,000 such jobs took 40 s
                # of every cycle, for every team. The decisions are the same.
                if one:
                    k = min(w, max(views[key].max_block() for key in order) // g)
                else:
                    k = min(w, max(views[key].slots(g) for key in order))
            held_out = None
            while k >= wmin:
                if k > wmin and self.quota_block(job, model, k * g) is not None:
                    k -= 1
                    continue
                for key in order:
                    plan = (
                        views[key].place(1, k * g, prefer)
                        if one
                        else views[key].place(k, g, prefer)
                    )
                    if plan is not None:
                        if router is not None and blocked:
                            held_out = router.holds_out(
                                job, model, [b[0].name for b in blocked], self.now
                            )
                            if held_out is not None:
                                break
                        self.start(job, ms, [(plan[0][0], k)] if one else plan, g, k)
                        return None
                if held_out is not None:
                    break
                k -= 1
            if held_out is not None:
                # a cheaper pool is busy and worth waiting for: wait for it (below)
                self.hold_out = True
                reasons.insert(0, held_out)
                break
            blocked.append((ms, short, ws, gs))
            borrower = job.team if id(job) in self.borrowing else None
            reasons.append(self.capacity_why(ms, views["all"], short, ws, gs, job.team, borrower))
        if not blocked:
            if router is not None and not ever:
                return "no allowed cluster can ever hold it: " + "; ".join(reasons + excluded), None
            return "; ".join(reasons), None
        for ms, _, _, _ in blocked:
            ms.capacity_wait = True
            if not self.cfg.backfill and ms.blocked_by is None:
                ms.blocked_by = job.id
                ms.blocked_by_team = job.team
                self.epoch += 1  # later jobs now wait behind this one, not for capacity
        # Capacity-blocked: preempt (priority or reclaim), else an EASY reservation.
        # A job holding out for a cheaper pool (rule 3b) could start now elsewhere: money saved
        # does not justify lost work, so it preempts nobody (it may still get a reservation).
        if (
            self.cfg.preemption
            and not self.hold_out
            and self.preempt_attempts < self.cfg.max_preemption_attempts
        ):
            for ms, _, wneed, g in blocked:
                planned = self.plan_preemption(job, ms, wneed, g)
                if planned is not None:
                    return planned
        elif self.cfg.preemption and not self.hold_out and self.cfg.max_preemption_attempts > 0:
            # Otherwise "the largest free block is 0" reads as if no running job could give way,
            # where the planner only had no plan left for it (rule 4's budget per cycle).
            reasons.append(
                "no preemption plan left for it this cycle "
                f"({self.cfg.max_preemption_attempts} per cycle went to jobs ahead of it)"
            )
        suffix = ""
        at = None
        if self.cfg.backfill:
            capped = 0
            for ms, _, wneed, g in blocked:
                if ms.res_count >= self.cfg.reservations_per_model:
                    capped += 1
                    continue
                if self.reserve_later(job, ms, wneed * g):
                    # No GPUs held yet; the model's first such job still gets a start estimate
                    # from the release timeline (an estimate, not a promise).
                    soft = None
                    if not ms.soft_estimated:
                        ms.soft_estimated = True
                        soft = self.reserve(job, ms, wneed, g, hold=False)
                    las = self.las  # reserve_later: only with a positive las.reserve_after_s
                    assert las is not None and las.reserve_after_s is not None
                    plain = (
                        "; no GPUs held for it before it has waited "
                        f"{_fmt_s(las.reserve_after_s)} s (preemptible jobs hold enough "
                        "GPUs and change hands by attained service)"
                    )
                    suffix = plain
                    if soft is not None:
                        at = soft
                        suffix = f"; estimated start t={_fmt_t(soft)}" + plain
                        # what a same-shaped job after it is told (consider() caches it)
                        self.soft_plain = "; ".join(reasons) + plain
                    continue
                got = self.reserve(job, ms, wneed, g)
                if got is not None:
                    at = got
                    suffix = f"; reserved to start at t={_fmt_t(at)}"
                    break
                unknown = self.unknown_gpus(ms)
                if unknown:
                    suffix = (
                        f"; no start estimate: {unknown} {ms.name} GPUs are held by "
                        "jobs without an expected end"
                    )
            if capped == len(blocked):
                # Slurm's "Priority" beside "Resources": every pool it may use had given its
                # reservations this cycle to jobs ahead of it (rule 5's cap), so it waits its
                # turn for one, not only for GPUs.
                suffix = (
                    "; no reservation left for it this cycle "
                    f"({self.cfg.reservations_per_model} per GPU model went to jobs ahead of it)"
                )
        return "; ".join(reasons) + suffix, at


def decide(snapshot: Snapshot) -> Decisions:
    """Decide one scheduling cycle for ``snapshot`` (see the module docstring for the rules).

    Deterministic and side-effect free. Every pending job appears exactly once, either in
    ``start`` or in ``pending`` (in queue order, with a non-empty ``why``).
    """
    return _Cycle(snapshot).run()
