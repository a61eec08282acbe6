"""The preemption planner's view of the running jobs (rules 4, 4a and 4c of docs/policy.md).

:meth:`_Victims.ensure_runs` builds it once per cycle, and only when a rule needs it: per GPU
model, the preemptible victims outside their checkpoint protection window by rank, cheapest
first (lost work, or with ``las.bottom_fifo_queues`` age in the queues served in submission
order) and, for a job of their own class, the most recently started run first; elastic jobs and
jobs already releasing. A running job's placement view is carried over
from the previous call while the caller passes the same placement mapping, and its whole view
(model, checkpoint time, its ``_Run`` while its rank and protection are unchanged) while the
caller passes the same RunningJob object (``memo``); protection and rank are recomputed.
"""

from __future__ import annotations

from operator import itemgetter

from scheduler.policy.cycle_state import _CycleState
from scheduler.policy.memo import _LAST_PLACEMENTS, RunView
from scheduler.policy.ranking import _running_rank
from scheduler.policy.state import _Run

# Victims sort by (lost work, job id); never by the run (unorderable).
_COST_ID = itemgetter(0, 1)


class _Victims(_CycleState):
    """The planner's view of running jobs for one cycle (a part of ``_Cycle``)."""

    def ensure_runs(self) -> None:
        """Build the planner's view of running jobs (victim lists, timeline inputs) once."""
        if self._runs_built:
            return
        self._runs_built = True
        now = self.now
        protect = self.cfg.checkpoint_protect_s
        id_of = self.id_of
        node_model = self.node_model
        classes = self.classes
        models = self.models
        topo = self.topo
        memo: dict[str, RunView] = _LAST_PLACEMENTS[0]
        placements: dict[str, RunView] = {}
        node_by_name = self.node_by_name
        run_rank = self.run_rank
        runs = self.runs
        built = 0
        levels = self.levels
        fifo_queues = self.fifo_queues
        routed = self.routed
        th = self.th
        long_run = self.long_run
        horizon = now + protect
        # With attained-service queues a job preempts peers of its own class (rule 4a), never
        # those in a class's least-served queue (rank % levels == levels - 1): nobody ranks
        # above them in it.
        peer_ranked = levels > 1
        least_served = levels - 1
        seen: RunView | None
        model: str | None
        for r in self.snap.running:
            rid = r.id
            seen = memo.get(rid)
            fast = False
            if seen is not None:
                # unpacked once: cheaper than reading the fields by name in this loop
                (_, vtopo, vmodel, total, on, vjob, vrank, vprot, vrun, ckpt, quiet, model_node,
                 base, end) = seen  # fmt: skip
                model = vmodel
                fast = vjob is r and vtopo is topo and model_node is not None
                if fast and model_node:
                    # a model read from a node is read again
                    node = node_by_name.get(model_node)
                    fast = node is not None and node.gpu_model == model
            if fast:
                assert seen is not None and model is not None
                # The same job object as last call, same topology and model: its placement
                # view and checkpoint time stand; what depends on the time (protection, rank)
                # is recomputed.
                protected = ckpt is not None and now <= ckpt <= horizon
                if quiet and (not r.preemptible or protected):
                    placements[rid] = seen  # protected only for now: keep it for later calls
                    continue
                rank = run_rank.get(rid)
                if rank is None:
                    rank = _running_rank(r, classes, th, long_run, now)
                if vrank == rank and vprot == protected:
                    run = vrun
                    placements[rid] = seen
                else:
                    run = _Run(r, model, total, on, rank, end, protected)
                    placements[rid] = seen._replace(rank=rank, protected=protected, run=run)
            else:
                # Only jobs the planner may touch: already releasing, elastic, or preemptible and
                # outside their checkpoint protection window.
                base = r.last_checkpoint_at if r.last_checkpoint_at is not None else r.started_at
                interval = r.checkpoint_interval_s
                ckpt = None if interval is None else base + interval
                protected = ckpt is not None and now <= ckpt <= horizon
                quiet = r.releasing_at is None and r.elastic is None
                if quiet and (not r.preemptible or protected):
                    seen = memo.get(rid)
                    if seen is not None and seen.placement is r.placement:
                        placements[rid] = seen  # protected only for now: keep it for later calls
                    continue
                model = r.gpu_model
                name: str | None = (
                    ""  # the node the model was read from (None: read it afresh next time)
                )
                if routed:
                    # with clusters a model is a pool (rule 3b): the one its eligible nodes are in
                    model = None
                    for name in r.placement:
                        i = id_of.get(name)
                        if i is not None:
                            model = node_model[i]
                            break
                    if model is None:
                        continue
                    name = ""
                elif not model:
                    model = None
                    for k, name in enumerate(r.placement):  # model_of_placement, inlined
                        node = node_by_name.get(name)
                        if node is not None:
                            model = node.gpu_model
                            if k:
                                name = None
                            break
                    if model is None:
                        continue
                seen = memo.get(rid)
                if (
                    seen is not None
                    and seen.placement is r.placement
                    and seen.topology is topo
                    and seen.model == model
                ):
                    total, on = seen.total, seen.on
                else:
                    pl = r.placement
                    if len(pl) == 1:
                        for key, idxs in pl.items():
                            total = len(idxs)
                            i = id_of.get(key)
                            on = (
                                {i: total}
                                if i is not None and total and node_model[i] == model
                                else {}
                            )
                    else:
                        on = {}
                        total = 0
                        for key, idxs in pl.items():
                            total += len(idxs)
                            i = id_of.get(key)
                            if i is not None and idxs and node_model[i] == model:
                                on[i] = on.get(i, 0) + len(idxs)
                rank = run_rank.get(rid)
                if rank is None:
                    rank = _running_rank(r, classes, th, long_run, now)
                end = r.expected_end
                if r.releasing_at is not None and (end is None or r.releasing_at < end):
                    end = r.releasing_at
                run = _Run(r, model, total, on, rank, end, protected)
                placements[rid] = RunView(
                    r.placement,
                    topo,
                    model,
                    total,
                    on,
                    r,
                    rank,
                    protected,
                    run,
                    ckpt,
                    quiet,
                    name,
                    base,
                    end,
                )
            runs[rid] = run
            built += 1
            ms = models.get(model)
            if ms is None or not on:
                continue
            if r.releasing_at is not None:
                ms.releasing.append(run)
                continue
            if r.elastic is not None:
                ms.elastic.append(run)
            if r.preemptible and not protected:
                if rank % levels < fifo_queues:
                    # the reverse of the order the queue is served in
                    sub = r.submitted_at if r.submitted_at is not None else r.started_at
                    cost = now - sub if now > sub else 0.0
                else:
                    cost = total * (now - base) if now > base else 0.0
                if peer_ranked and rank % levels < least_served and rank % levels >= fifo_queues:
                    # A peer runs on to its next checkpoint (rule 4a): the youngest run gives
                    # way, so that older runs finish rather than take turns with it.
                    age = now - r.started_at if now > r.started_at else 0.0
                    peers = ms.peer_victims.get(rank)
                    if peers is None:
                        peers = ms.peer_victims[rank] = []
                    peers.append((age, rid, run))
                lst = ms.victims.get(rank)
                if lst is None:
                    lst = ms.victims[rank] = []
                lst.append((cost, rid, run))
        _LAST_PLACEMENTS[0] = placements
        unique = self.runs_unique = built == len(runs)
        for ms in self.models.values():
            for lst in (*ms.victims.values(), *ms.peer_victims.values()):
                if unique:
                    lst.sort()  # (cost, id) pairs differ, so runs are never compared: no key needed
                else:
                    lst.sort(key=_COST_ID)
            ms.elastic.sort(key=lambda run: (run.prio, run.job.id))
            ms.releasing.sort(key=lambda run: run.job.id)

    # ------------------------------------------------------------------ preemption
