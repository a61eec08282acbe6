"""Baseline policies the simulator compares our engine against. They live here, not in the engine.

- `fifo`: strict submission order, no backfill: stops at the first job that does not fit.
- `fifo-backfill`: EASY backfill (Slurm-like): the first job that does not fit gets a reservation
  at the earliest time enough GPUs free up (from running jobs' ends), on the nodes it would take
  then; later jobs start now if they end before that time or use none of those nodes. Runtime
  estimates are exact (the trace durations): the best case for EASY, since the trace has no
  user limits.
- `sjf`: strict, the queue sorted by true remaining duration (an oracle; a reference point).
- `tiresias`: 2D-LAS with discretized queues (Tiresias, NSDI'19): a job's priority is the queue
  of its attained service (GPUs x seconds run); FIFO within a queue; preemptive; no duration
  knowledge. Without Tiresias' starvation promotion.

All place with the simulator's best-fit (`Simulator.find_placement`): a job that fits one node goes
to the fullest node that fits; a multi-node job takes whole free nodes.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from .simulator import Policy, SimJob, Simulator


def _remaining(job: SimJob) -> float:
    """True seconds a job still needs once started (oracle)."""
    return job.duration - job.progress + job.overhead


class Fifo:
    """Strict FIFO (or any strict order given by `_key`): start jobs in order, stop at the first
    that does not fit."""

    name = "fifo"

    def _key(self, job: SimJob) -> tuple[float, ...]:
        return (job.submit, job.idx)

    def schedule(self, sim: Simulator, now: float) -> None:
        """Start queue-head jobs while they fit."""
        for job in sorted(sim.pending.values(), key=self._key):
            placement = sim.find_placement(job)
            if placement is None:
                return
            sim.start(job, placement)


class Sjf(Fifo):
    """Strict shortest-job-first with oracle durations (true remaining time)."""

    name = "sjf"

    def _key(self, job: SimJob) -> tuple[float, ...]:
        return (_remaining(job), job.submit, job.idx)


class FifoBackfill:
    """EASY backfill over FIFO order with exact runtime estimates (see the module docstring)."""

    name = "fifo-backfill"

    def schedule(self, sim: Simulator, now: float) -> None:
        """Start in order; reserve for the first blocked job; backfill behind it."""
        queue = sorted(sim.pending.values(), key=lambda j: (j.submit, j.idx))
        shadow: float | None = None
        reserved: set[int] = set()
        failed: set[tuple[int, int, tuple[str, ...] | None, bool]] = set()
        for job in queue:
            if shadow is None:
                placement = sim.find_placement(job)
                if placement is not None:
                    sim.start(job, placement)
                    continue
                shadow, reserved = self._reservation(sim, job)
                continue
            if job.gpus > sim.free_gpus(job.models):
                continue
            fits_before = now + _remaining(job) <= shadow
            shape = (job.workers, job.gpus_per_worker, job.models, fits_before)
            if shape in failed:
                continue
            placement = sim.find_placement(job, set() if fits_before else reserved)
            if placement is None:
                failed.add(shape)
                continue
            sim.start(job, placement)

    @staticmethod
    def _reservation(sim: Simulator, head: SimJob) -> tuple[float, set[int]]:
        """The earliest time `head` fits, replaying running jobs' ends, and the nodes it would
        take then (best fit)."""
        gpw = head.gpus_per_worker
        models = set(head.models or sim.models)
        slots = 0
        for m in models:
            for f, bucket in enumerate(sim.buckets[m]):
                if f >= gpw:
                    slots += len(bucket) * (f // gpw)
        free_then: dict[int, int] = {}
        shadow = sim.now
        if slots < head.workers:
            ends = sorted((j.expected_end(), j.idx) for j in sim.running.values())
            for end, idx in ends:
                for n, gpus in sim.jobs[idx].placement.items():
                    if sim.node_model[n] not in models or sim.node_state[n] != "ready":
                        continue
                    old = free_then.get(n, len(sim.node_free[n]))
                    new = old + len(gpus)
                    free_then[n] = new
                    slots += new // gpw - old // gpw
                if slots >= head.workers:
                    shadow = end
                    break
            else:
                return float("inf"), set()
        # nodes the head would take at the shadow time: fullest first
        candidates = dict(free_then)
        for m in models:
            for f, bucket in enumerate(sim.buckets[m]):
                if f >= gpw:
                    for n in bucket:
                        candidates.setdefault(n, f)
        need = head.workers
        reserved: set[int] = set()
        for n, f in sorted(candidates.items(), key=lambda kv: (kv[1], kv[0])):
            if f < gpw:
                continue
            reserved.add(n)
            need -= f // gpw
            if need <= 0:
                break
        return shadow, reserved


class Tiresias:
    """2D-LAS with discretized priority queues over attained GPU-seconds; preemptive."""

    name = "tiresias"

    def __init__(self, thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0, 360000.0)):
        self.thresholds = tuple(sorted(thresholds_gpu_s))

    def schedule(self, sim: Simulator, now: float) -> None:
        """Choose the highest-priority set that fits by GPU count, preempt running jobs outside
        it, start the rest of it, then fill leftover GPUs; wake at the next queue demotion."""
        q = self.thresholds

        def key(job: SimJob) -> tuple[float, ...]:
            return (bisect_right(q, job.attained_gpu_s(now)), job.submit, job.idx)

        running = [j for j in sim.running.values() if not j.stopping]
        candidates = sorted(running + list(sim.pending.values()), key=key)
        budget = sum(sim.ready_gpus_by_model.values()) - sum(
            j.gpus for j in sim.running.values() if j.stopping
        )
        keep: set[int] = set()
        for job in candidates:
            if job.gpus <= budget:
                keep.add(job.idx)
                budget -= job.gpus
        for job in running:
            if job.idx not in keep:
                sim.preempt(job, 0.0, "tiresias: lower-priority queue")
        failed: set[tuple[int, int, tuple[str, ...] | None]] = set()
        for job in candidates:
            if job.state != "pending":
                continue
            shape = (job.workers, job.gpus_per_worker, job.models)
            if shape in failed or job.gpus > sim.free_gpus(job.models):
                continue
            placement = sim.find_placement(job)
            if placement is None:
                failed.add(shape)
                continue
            sim.start(job, placement)
        wake = None
        for job in sim.running.values():
            a = job.attained_gpu_s(now)
            k = bisect_right(q, a)
            if k < len(q):
                t = now + (q[k] - a) / job.gpus + 1e-6  # just past the boundary
                if wake is None or t < wake:
                    wake = t
        if wake is not None and sim.pending:
            sim.wake_at(wake)


BASELINES: dict[str, Callable[[], Policy]] = {
    "fifo": Fifo,
    "fifo-backfill": FifoBackfill,
    "sjf": Sjf,
    "tiresias": Tiresias,
}
