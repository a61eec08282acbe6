"""Elastic jobs (rules 4 and 6 of docs/policy.md): the spare workers an elastic job gives up
before anyone is preempted, and growth into GPUs no waiting job can use this cycle."""

from __future__ import annotations

from scheduler.policy.cycle_state import _CycleState
from scheduler.policy.model import Resize
from scheduler.policy.state import _Run


class _Elastic(_CycleState):
    """Elastic shrink units and growth of one cycle (a part of ``_Cycle``)."""

    def shrink_units(self, run: _Run) -> list[tuple[int, tuple[int, ...]]]:
        """Workers an elastic job can give up (down to its minimum), last nodes first."""
        job = run.job
        elastic = job.elastic
        assert elastic is not None
        spare = job.workers - max(1, elastic.min_workers)
        if spare <= 0:
            return []
        g = job.gpus_per_worker
        units: list[tuple[int, tuple[int, ...]]] = []
        for name in sorted(job.placement, reverse=True):
            i = self.id_of.get(name)
            idxs = sorted(job.placement[name], reverse=True)
            for s in range(0, len(idxs) - g + 1, g):
                if len(units) == spare:
                    return units
                if i is not None and self.node_model[i] == run.model:
                    units.append((i, tuple(sorted(idxs[s : s + g]))))
        return units

    # ------------------------------------------------------------------ elastic growth

    def grow_elastic(self) -> None:
        """Grow elastic running jobs into idle GPUs that no waiting job can use this cycle."""
        if not self.has_elastic:
            return
        self.ensure_runs()
        growers = []
        for run in self.runs.values():
            e = run.job.elastic
            if e is None or run.job.workers >= e.max_workers:
                continue
            rid = run.job.id
            if rid in self.gone or rid in self.shrunk or run.job.releasing_at is not None:
                continue
            ms = self.models.get(run.model)
            if ms is None or ms.capacity_wait:
                continue
            growers.append(run)
        growers.sort(key=lambda r: (-r.prio, r.job.id))
        for run in growers:
            job = run.job
            ms = self.models[run.model]
            g = job.gpus_per_worker
            e = job.elastic
            assert e is not None  # growers are elastic
            extra = e.max_workers - job.workers
            for t, q in self.quota_chain(job.team, ms.gpu):
                room = q.guaranteed + q.borrow_limit - self.used.get((t, ms.gpu), 0)
                extra = min(extra, room // g)
            if extra <= 0:
                continue
            view = (ms.long or ms.now)["all"]
            mine = {self.id_of[n] for n in job.placement if n in self.id_of}
            racks = {self.rack[i] for i in mine}
            cands = [i for i in view.pool.nodes if view.cnt[i] >= g]
            if not cands:
                continue
            cands.sort(key=lambda i: (i not in mine, self.rack[i] not in racks, view.cnt[i], i))
            plan = []
            left = extra
            for i in cands:
                k = min(view.cnt[i] // g, left)
                plan.append((i, k))
                left -= k
                if not left:
                    break
            added = self.take(ms, plan, g)
            merged = {name: tuple(idx) for name, idx in job.placement.items()}
            for name, idx in added.items():
                merged[name] = tuple(sorted(merged.get(name, ()) + idx))
            grown = extra - left
            for t in self.ancestry(job.team):
                self.used[(t, ms.gpu)] = self.used.get((t, ms.gpu), 0) + grown * g
            self.resizes.append(
                Resize(job.id, job.workers + grown, {n: merged[n] for n in sorted(merged)})
            )
