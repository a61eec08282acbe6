"""The discrete-event cluster simulator.

Guarantees:
- Deterministic: the same trace, cluster, config (seed) and policy give the same result. Failure
  and spot streams come from per-node RNGs seeded from `(seed, node index)`, so they do not depend
  on the order events happen to be processed in.
- Conservation: every job finishes exactly once; the GPU-seconds of work in the trace equal the
  busy GPU-seconds minus the GPU-seconds lost to preemptions and failures (checked in tests).
- The policy is asked to schedule only when something changed (arrival, finish, failure, repair,
  a preempted job's stop, or a wake-up the policy asked for), once per timestamp
  after every event at that timestamp has been applied.
- No clock reads: wall-clock measurement is injected by the caller (`timer`).
- A caller can stop a replay that makes no progress: `tick` is called every `TICK_EVERY` units
  of work (rounds of events and policy calls) whether or not a job finished, and whatever it
  raises stops the run (`progress` is only called as jobs finish, which can take the whole run).

Job model: a job of `gpus` GPUs runs as `workers` x `gpus_per_worker` (each worker on one node);
its service time is the trace duration. When interrupted (preempted or its node fails) it keeps
the progress of its last checkpoint (every `checkpoint_interval_s` of progress; none means it
restarts from zero) and pays `restart_overhead_s` when it runs again. A preemption with a grace
period keeps the job running (and its GPUs busy) until it has saved a checkpoint after the
preemption, as the live loop stops it then, or until the grace ends.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from .cluster import ClusterSpec
from .traces import SIM_DEFAULT_CHECKPOINTS, TraceJob

# event kinds, in processing order within one timestamp: releases before failures before arrivals
_FINISH, _STOP, _FAIL, _SPOT, _REPAIR, _RELEASE, _WAKE = range(7)

READY, DOWN, QUARANTINED = "ready", "down", "quarantined"

# Rounds of events plus policy calls between two calls of `tick`. A round of the main loop costs
# at most a few policy calls (up to ~0.1 s each on a cluster of thousands of GPUs), so a caller
# hears from a replay within seconds however long no job finishes; the call is a few hundred
# nanoseconds when nobody listens.
TICK_EVERY = 32


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Knobs of the job and failure model. Defaults: checkpoints every 30 min, 60 s restart
    overhead, no failures, no spot interruptions."""

    seed: int = 0
    checkpoint_interval_s: float | None = 1800.0
    restart_overhead_s: float = 60.0
    preemptible: bool = True
    mtbf_s: float | None = None  # per node; None = nodes never fail
    repair_s: float = 4 * 3600.0
    spot_mtbi_s: float | None = None  # mean time between interruptions of one spot node
    spot_outage_s: float = 1800.0
    quarantine_failures: int = 3  # failures within quarantine_window_s -> quarantine
    quarantine_window_s: float = 7 * 86400.0
    quarantine_probation_s: float = 2 * 86400.0
    # decay of per-tenant usage handed to policies that have no half-life of their own
    fair_share_half_life_s: float = 604800.0
    record_series: bool = True
    # Seconds every job takes to save a checkpoint when a preemption asks it to (as the live
    # loop asks each victim when its grace starts); None: jobs save only their periodic ones.
    checkpoint_on_request_s: float | None = None


class SimulationError(RuntimeError):
    """The simulation cannot continue (a job that can never fit, a stuck policy)."""


@dataclass(slots=True, eq=False)
class SimJob:
    """The simulator's mutable view of one job. Policies read it; only the simulator writes it."""

    idx: int
    id: str
    tenant: str
    priority_class: str
    submit: float
    duration: float
    gpus: int
    workers: int
    gpus_per_worker: int
    models: tuple[str, ...] | None
    preemptible: bool
    checkpoint_interval_s: float | None
    state: str = "future"  # future -> pending <-> running -> done
    progress: float = 0.0  # checkpointed useful seconds at the start of the current segment
    overhead: float = 0.0  # restart overhead to pay at the start of the next/current segment
    run_start: float = 0.0
    run_id: int = 0
    placement: dict[int, tuple[int, ...]] = field(default_factory=dict)
    stopping: bool = False  # preempted, inside its grace period
    stop_at: float | None = None  # end of that grace period (it may stop sooner: preempt())
    checkpoint_on_request_s: float | None = None  # see SimConfig
    # The checkpoint a preempted job stops at: the progress it saves and when it is written.
    stop_checkpoint_progress: float | None = None
    stop_checkpoint_at: float | None = None
    pending_since: float = 0.0
    queue_s: float = 0.0
    first_start: float | None = None
    finish: float | None = None
    executed_s: float = 0.0  # wall seconds run in finished segments (including lost work)
    preemptions: int = 0
    interruptions: int = 0  # by node failure or spot reclaim
    requeued: bool = False
    runtime_limit_s: float | None = None  # the user's limit, from the trace (None: unknown)
    deadline: float | None = None  # from the trace (None: none)
    user: str = ""  # from the trace: what the run-time model learns from
    name: str = ""
    image: str = ""

    def finish_s(self) -> float:
        """When the job finished: for a finished replay's jobs (a replay runs until every job
        has finished)."""
        assert self.finish is not None  # asked of an unfinished job
        return self.finish

    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds of service received so far (all segments, lost work included)."""
        run = now - self.run_start if self.state == "running" else 0.0
        return self.gpus * (self.executed_s + run)

    def expected_end(self) -> float:
        """The true end of the current segment (an oracle: baselines that are allowed to know it
        use it; gpuplatform never sees it)."""
        return self.run_start + self.overhead + (self.duration - self.progress)


class Policy(Protocol):
    """A scheduling policy driven by the simulator. `schedule` is called after every batch of
    events; it acts through `sim.start(job, placement)` and `sim.preempt(job, grace_s, reason)`
    and may ask for a later call with `sim.wake_at(t)`."""

    name: str

    def schedule(self, sim: Simulator, now: float) -> None: ...


def split_workers(gpus: int, max_per_node: int) -> tuple[int, int]:
    """`(workers, gpus_per_worker)` for a job of `gpus` GPUs on nodes of at most `max_per_node`:
    one worker when it fits one node, else the largest divisor of `gpus` that fits a node."""
    if gpus <= max_per_node:
        return 1, gpus
    for gpw in range(max_per_node, 0, -1):
        if gpus % gpw == 0:
            return gpus // gpw, gpw
    return gpus, 1


class Simulator:
    """One replay of a trace on a cluster under a policy. Call `run()` once."""

    def __init__(
        self,
        trace: Iterable[TraceJob],
        cluster: ClusterSpec,
        policy: Policy,
        config: SimConfig | None = None,
        *,
        timer: Callable[[], float] | None = None,
        progress: Callable[[int, int, float], None] | None = None,
        tick: Callable[[int, int, float], None] | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.cluster = cluster
        self.policy = policy
        self._timer = timer
        self._progress = progress
        self._tick = tick
        nodes = cluster.nodes
        self.n_nodes = len(nodes)
        self.node_model = [n.gpu_model for n in nodes]
        self.node_gpus = [n.gpus for n in nodes]
        self.node_free: list[list[int]] = [list(range(n.gpus)) for n in nodes]
        self.node_state = [READY] * self.n_nodes
        self.node_jobs: list[dict[int, SimJob]] = [{} for _ in nodes]
        self.node_version = [0] * self.n_nodes  # bumped on every change (snapshot caches)
        self.models = sorted({n.gpu_model for n in nodes})
        self.model_max = {m: max(n.gpus for n in nodes if n.gpu_model == m) for m in self.models}
        # buckets[model][f]: ready nodes of that model with exactly f free GPUs (insertion-ordered)
        self.buckets: dict[str, list[dict[int, None]]] = {
            m: [{} for _ in range(self.model_max[m] + 1)] for m in self.models
        }
        self.free_by_model = dict.fromkeys(self.models, 0)
        self.ready_gpus_by_model = dict.fromkeys(self.models, 0)
        for i, n in enumerate(nodes):
            self.buckets[n.gpu_model][n.gpus][i] = None
            self.free_by_model[n.gpu_model] += n.gpus
            self.ready_gpus_by_model[n.gpu_model] += n.gpus
        self.total_gpus = cluster.total_gpus
        self.changed_nodes: set[int] = set(range(self.n_nodes))  # drained by snapshot caches

        self.jobs: list[SimJob] = []
        capacity_cache: dict[tuple[tuple[str, ...] | None, int], int] = {}
        for i, tj in enumerate(sorted(trace, key=lambda j: (j.submit, j.id))):
            allowed = tj.models or tuple(self.models)
            biggest = max((self.model_max[m] for m in allowed if m in self.model_max), default=0)
            if tj.gpus_per_worker:  # the shape the job was submitted with
                workers, gpw = tj.gpus // tj.gpus_per_worker, tj.gpus_per_worker
                if gpw > biggest or workers * gpw != tj.gpus:
                    raise SimulationError(
                        f"job {tj.id} has {tj.gpus} GPUs in workers of {gpw}; the largest node "
                        f"of {allowed} has {biggest}"
                    )
            else:
                workers, gpw = split_workers(tj.gpus, biggest) if biggest else (1, tj.gpus)
            key = (tj.models, gpw)
            if key not in capacity_cache:
                capacity_cache[key] = sum(
                    (n.gpus // gpw) * gpw for n in nodes if n.gpu_model in allowed
                )
            if biggest == 0 or tj.gpus > capacity_cache[key]:
                raise SimulationError(
                    f"job {tj.id} needs {tj.gpus} GPUs of {allowed}; the cluster can never fit it"
                )
            self.jobs.append(
                SimJob(
                    idx=i,
                    id=tj.id,
                    tenant=tj.tenant,
                    priority_class=tj.priority_class,
                    submit=tj.submit,
                    duration=tj.duration,
                    gpus=tj.gpus,
                    workers=workers,
                    gpus_per_worker=gpw,
                    models=tj.models,
                    preemptible=(
                        self.config.preemptible if tj.preemptible is None else tj.preemptible
                    ),
                    checkpoint_interval_s=(
                        self.config.checkpoint_interval_s
                        if tj.checkpoint_interval_s == SIM_DEFAULT_CHECKPOINTS
                        else tj.checkpoint_interval_s
                    ),
                    checkpoint_on_request_s=self.config.checkpoint_on_request_s,
                    runtime_limit_s=tj.runtime_limit_s,
                    deadline=tj.deadline,
                    user=tj.user,
                    name=tj.name,
                    image=tj.image,
                )
            )
        self.by_id = {j.id: j for j in self.jobs}
        self.tenants = sorted({j.tenant for j in self.jobs})
        self.tenant_used = dict.fromkeys(self.tenants, 0)  # GPUs held now
        self.tenant_usage = dict.fromkeys(self.tenants, 0.0)  # decayed GPU-seconds
        # A policy with its own half-life (the engine's Config.fair_share_half_life_s) is handed
        # usage decayed with it, as the live loop decays it; otherwise the simulation's own.
        half_life = getattr(policy, "fair_share_half_life_s", None)
        self.fair_share_half_life_s = half_life or self.config.fair_share_half_life_s
        self._decay = math.log(2) / self.fair_share_half_life_s
        if len(self.by_id) != len(self.jobs):
            raise SimulationError("duplicate job ids in the trace")

        self.pending: dict[int, SimJob] = {}  # insertion order = (re)queue order
        self.running: dict[int, SimJob] = {}
        self.now = 0.0
        self.done = 0
        self.finished: list[int] = []  # job indices in finish order
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._next_arrival = 0
        self._wake: float | None = None
        # pending demand per allowed-model key, for idle_while_pending
        self._pending_demand: dict[tuple[str, ...] | None, Counter[int]] = {}
        # accumulators
        self.used_gpus = 0
        self.busy_gpu_s = 0.0
        self.lost_gpu_s = 0.0
        self.idle_pending_gpu_s = 0.0
        self.capacity_gpu_s = 0.0
        self.preemptions = 0
        self.interruptions = 0
        self.node_failures = 0
        self.spot_interruptions = 0
        self.quarantines = 0
        self.start_conflicts = 0
        self._stopped_now = 0  # immediate preemptions during the current policy call
        self.decide_calls = 0
        self.decide_times: list[float] = []
        self.wall_s = 0.0
        self.series_t: list[float] = []
        self.series_pending: list[int] = []
        self.series_used: list[int] = []
        self._fail_history: list[list[float]] = [[] for _ in nodes]
        self._fail_rng = [
            random.Random(f"{self.config.seed}:fail:{i}") for i in range(self.n_nodes)
        ]
        self._spot_rng = [
            random.Random(f"{self.config.seed}:spot:{i}") for i in range(self.n_nodes)
        ]
        self._quarantine_after_repair = [False] * self.n_nodes
        self._node_ev = [0] * self.n_nodes  # version of the node's live FAIL/SPOT events
        self._first_submit = self.jobs[0].submit if self.jobs else 0.0
        self._last_time = self._first_submit
        self.window_end = self.jobs[-1].submit if self.jobs else 0.0  # last submission
        self.busy_window_gpu_s = 0.0  # busy GPU-seconds up to the last submission

    # ---- event queue -------------------------------------------------------------------------

    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, a, b))

    def wake_at(self, t: float) -> None:
        """Ask for another `schedule` call at time `t` (the earliest request wins)."""
        if t > self.now and (self._wake is None or t < self._wake):
            self._wake = t
            self._push(t, _WAKE, 0, 0)

    # ---- capacity index ----------------------------------------------------------------------

    def _unindex(self, n: int) -> None:
        if self.node_state[n] == READY:
            model = self.node_model[n]
            del self.buckets[model][len(self.node_free[n])][n]
            self.free_by_model[model] -= len(self.node_free[n])

    def _index(self, n: int) -> None:
        if self.node_state[n] == READY:
            model = self.node_model[n]
            self.buckets[model][len(self.node_free[n])][n] = None
            self.free_by_model[model] += len(self.node_free[n])
        self.node_version[n] += 1
        self.changed_nodes.add(n)

    def free_gpus(self, models: tuple[str, ...] | None = None) -> int:
        """Free GPUs on ready nodes of the given models (all models when None)."""
        if models is None:
            return sum(self.free_by_model.values())
        return sum(self.free_by_model.get(m, 0) for m in models)

    def find_placement(
        self, job: SimJob, exclude: set[int] | frozenset[int] = frozenset()
    ) -> dict[int, tuple[int, ...]] | None:
        """A best-fit placement for `job` on ready nodes now, or None: every worker goes to the
        fullest node that still fits it (so large holes survive); a job of k whole nodes takes k
        whole free nodes. Ties go to the node that reached that free count first. Does not
        allocate."""
        gpw = job.gpus_per_worker
        models = job.models or self.models
        if self.free_gpus(job.models) < job.gpus:
            return None
        need = job.workers
        chosen: list[tuple[int, int]] = []  # (node, workers on it)
        top = max(self.model_max.get(m, 0) for m in models)
        for f in range(gpw, top + 1):
            for m in models:
                buckets = self.buckets.get(m)
                if buckets is None or f >= len(buckets):
                    continue
                for n in buckets[f]:
                    if n in exclude:
                        continue
                    k = min(f // gpw, need)
                    chosen.append((n, k))
                    need -= k
                    if need == 0:
                        break
                if need == 0:
                    break
            if need == 0:
                break
        if need:
            return None
        return {n: tuple(self.node_free[n][: k * gpw]) for n, k in chosen}

    # ---- actions (called by policies) --------------------------------------------------------

    def start(self, job: SimJob, placement: dict[int, tuple[int, ...]]) -> bool:
        """Start a pending job on `placement` (node index -> GPU indices). Returns False, and
        changes nothing, when the placement is not valid now (a GPU not free, a node not ready,
        the wrong GPU count or model): a conflicting decision is dropped, as the live loop's
        transaction would drop it."""
        if job.state != "pending":
            self.start_conflicts += 1
            return False
        total = 0
        for n, gpus in placement.items():
            if self.node_state[n] != READY or (
                job.models is not None and self.node_model[n] not in job.models
            ):
                self.start_conflicts += 1
                return False
            free = self.node_free[n]
            if len(set(gpus)) != len(gpus) or any(g not in free for g in gpus):
                self.start_conflicts += 1
                return False
            if len(gpus) % job.gpus_per_worker:
                self.start_conflicts += 1
                return False
            total += len(gpus)
        if total != job.gpus:
            self.start_conflicts += 1
            return False
        now = self.now
        for n, gpus in placement.items():
            self._unindex(n)
            taken = set(gpus)
            self.node_free[n] = [g for g in self.node_free[n] if g not in taken]
            self.node_jobs[n][job.idx] = job
            self._index(n)
        self.used_gpus += job.gpus
        self.tenant_used[job.tenant] += job.gpus
        del self.pending[job.idx]
        self.running[job.idx] = job
        self._demand_remove(job)
        job.state = "running"
        job.placement = dict(placement)
        job.run_start = now
        job.run_id += 1
        job.queue_s += now - job.pending_since
        if job.first_start is None:
            job.first_start = now
        self._push(job.expected_end(), _FINISH, job.idx, job.run_id)
        return True

    def preempt(self, job: SimJob, grace_s: float = 0.0, reason: str = "") -> bool:
        """Preempt a running job: it stops after `grace_s` (keeping its GPUs until then), loses
        the work since its last checkpoint and is requeued. Non-preemptible jobs and jobs already
        stopping are refused (returns False)."""
        if job.state != "running" or job.stopping or not job.preemptible:
            return False
        job.preemptions += 1
        self.preemptions += 1
        if grace_s > 0:
            job.stopping = True
            # As the live loop does, the job is stopped as soon as it has saved a checkpoint
            # after the preemption (its next periodic one, or the one the preemption asks for
            # when it checkpoints on request), else when the grace ends.
            now = self.now
            useful = max(0.0, now - job.run_start - job.overhead)
            reached = min(job.duration, job.progress + useful)
            saved_at, saved = now + grace_s, None
            ci = job.checkpoint_interval_s
            if ci:
                periodic = (math.floor(reached / ci) + 1) * ci
                at = job.run_start + job.overhead + (periodic - job.progress)
                if at <= saved_at and periodic <= job.duration:
                    saved_at, saved = at, periodic
            c = job.checkpoint_on_request_s
            if c is not None and now + c <= saved_at:
                saved_at, saved = now + c, reached  # what it had reached when asked
            # what policies see, as the loop's preemption deadline: the grace's end
            job.stop_at = now + grace_s
            job.stop_checkpoint_progress, job.stop_checkpoint_at = saved, saved_at
            self._push(saved_at, _STOP, job.idx, job.run_id)
        else:
            self._interrupt(job)
            self._stopped_now += 1
        return True

    # ---- internals ---------------------------------------------------------------------------

    def _demand_key(self, job: SimJob) -> tuple[str, ...] | None:
        return job.models

    def _demand_add(self, job: SimJob) -> None:
        self._pending_demand.setdefault(job.models, Counter())[job.gpus] += 1

    def _demand_remove(self, job: SimJob) -> None:
        c = self._pending_demand[job.models]
        c[job.gpus] -= 1
        if not c[job.gpus]:
            del c[job.gpus]

    def _enqueue(self, job: SimJob) -> None:
        job.state = "pending"
        job.pending_since = self.now
        self.pending[job.idx] = job
        self._demand_add(job)

    def _release(self, job: SimJob) -> None:
        for n, gpus in job.placement.items():
            self._unindex(n)
            self.node_free[n] = sorted(self.node_free[n] + list(gpus))
            del self.node_jobs[n][job.idx]
            self._index(n)
        self.used_gpus -= job.gpus
        self.tenant_used[job.tenant] -= job.gpus
        del self.running[job.idx]
        job.placement = {}
        job.stopping = False
        job.stop_at = None

    def _interrupt(self, job: SimJob) -> None:
        """Stop a running job now: keep its last checkpoint, count the lost work, requeue it."""
        elapsed = self.now - job.run_start
        useful = max(0.0, elapsed - job.overhead)
        reached = min(job.duration, job.progress + useful)
        ci = job.checkpoint_interval_s
        saved = max(job.progress, math.floor(reached / ci) * ci) if ci else 0.0
        written_at, progress = job.stop_checkpoint_at, job.stop_checkpoint_progress
        if written_at is not None and written_at <= self.now and progress is not None:
            saved = max(saved, progress)
        job.stop_checkpoint_progress = job.stop_checkpoint_at = None
        # lost: everything run in this segment beyond the checkpointed progress, including the
        # part of its restart overhead already spent
        self.lost_gpu_s += job.gpus * (elapsed - (saved - job.progress))
        job.executed_s += elapsed
        job.progress = saved
        job.overhead = self.config.restart_overhead_s
        job.run_id += 1  # invalidates the pending finish event
        job.requeued = True
        self._release(job)
        self._enqueue(job)

    def last_checkpoint_at(self, job: SimJob) -> float:
        """When the running job last saved a checkpoint (its segment start if none yet)."""
        ci = job.checkpoint_interval_s
        if not ci:
            return job.run_start
        useful = max(0.0, self.now - job.run_start - job.overhead)
        reached = job.progress + useful
        k = math.floor(reached / ci) * ci
        if k <= job.progress:
            return job.run_start
        return job.run_start + job.overhead + (k - job.progress)

    def next_checkpoint_at(self, job: SimJob, after: float | None = None) -> float:
        """When the running job will next save a checkpoint after ``after`` (default now; inf
        without checkpointing)."""
        ci = job.checkpoint_interval_s
        if not ci:
            return math.inf
        at = self.now if after is None else after
        useful = max(0.0, at - job.run_start - job.overhead)
        nxt = (math.floor((job.progress + useful) / ci) + 1) * ci
        return job.run_start + job.overhead + (nxt - job.progress)

    def _schedule_failure(self, n: int) -> None:
        if self.config.mtbf_s:
            t = self.now + self._fail_rng[n].expovariate(1.0 / self.config.mtbf_s)
            self._push(t, _FAIL, n, self._node_ev[n])

    def _schedule_spot(self, n: int) -> None:
        if self.config.spot_mtbi_s and self.cluster.nodes[n].spot:
            t = self.now + self._spot_rng[n].expovariate(1.0 / self.config.spot_mtbi_s)
            self._push(t, _SPOT, n, self._node_ev[n])

    def _node_down(self, n: int, *, until: float, failure: bool) -> None:
        for job in list(self.node_jobs[n].values()):
            self.interruptions += 1
            job.interruptions += 1
            self._interrupt(job)
        self._node_ev[n] += 1  # the other stream's next event is void; re-drawn on repair
        self._unindex(n)
        self.node_state[n] = DOWN
        self.ready_gpus_by_model[self.node_model[n]] -= self.node_gpus[n]
        self._index(n)
        if failure:
            hist = self._fail_history[n]
            hist.append(self.now)
            window = self.now - self.config.quarantine_window_s
            while hist and hist[0] < window:
                hist.pop(0)
            if len(hist) >= self.config.quarantine_failures:
                self._quarantine_after_repair[n] = True
        self._push(until, _REPAIR, n, 0)

    def _node_up(self, n: int) -> None:
        if self._quarantine_after_repair[n]:
            self._quarantine_after_repair[n] = False
            self._fail_history[n].clear()
            self.quarantines += 1
            self.node_state[n] = QUARANTINED
            self.node_version[n] += 1
            self.changed_nodes.add(n)
            self._push(self.now + self.config.quarantine_probation_s, _RELEASE, n, 0)
            return
        self.node_state[n] = READY
        self.ready_gpus_by_model[self.node_model[n]] += self.node_gpus[n]
        self._index(n)
        self._schedule_failure(n)
        self._schedule_spot(n)

    def _finish(self, job: SimJob) -> None:
        job.executed_s += self.now - job.run_start
        self.lost_gpu_s += job.gpus * job.overhead  # the restart overhead of this last segment
        job.progress = job.duration
        job.finish = self.now
        self._release(job)
        job.state = "done"
        self.done += 1
        self.finished.append(job.idx)

    def _accumulate(self, t: float) -> None:
        dt = t - self._last_time
        if dt <= 0:
            return
        self.busy_gpu_s += self.used_gpus * dt
        if self._last_time < self.window_end:
            self.busy_window_gpu_s += self.used_gpus * (min(t, self.window_end) - self._last_time)
        # exponentially decayed usage, exact for GPUs held constant over dt. The gain is written
        # with expm1, as the live loop's snapshot writes it: 1 - keep rounds to 0 once the
        # half-life dwarfs dt (a valid "never decay" half-life of 1e20 s), and every team then
        # counted as having used nothing.
        keep = math.exp(-self._decay * dt)
        gain = -math.expm1(-self._decay * dt) / self._decay
        usage = self.tenant_usage
        for tenant, used in self.tenant_used.items():
            usage[tenant] = usage[tenant] * keep + used * gain
        self.capacity_gpu_s += self.total_gpus * dt
        if self.pending:
            self.idle_pending_gpu_s += self._idle_while_pending() * dt
        self._last_time = t

    def _idle_while_pending(self) -> int:
        """Idle GPUs (on ready nodes) while some pending job would fit in that many GPUs of its
        allowed models: the fragmentation (or holding back) the policy leaves."""
        best = 0
        for key, demands in self._pending_demand.items():
            if not demands:
                continue
            idle = self.free_gpus(key)
            if idle > best and min(demands) <= idle:
                best = idle
        return best

    # ---- main loop ---------------------------------------------------------------------------

    def run(self) -> Simulator:
        """Replay the whole trace until every job has finished. Raises SimulationError when jobs
        are left pending with nothing else that could ever happen. ``progress(done, total, now)``
        is called every 0.5 % of the jobs finished and at the end; ``tick(done, total, now)``
        every `TICK_EVERY` rounds and policy calls; an exception either raises stops the run."""
        timer = self._timer
        t0 = timer() if timer else 0.0
        for n in range(self.n_nodes):
            self._schedule_failure(n)
            self._schedule_spot(n)
        jobs = self.jobs
        n_jobs = len(jobs)
        heap = self._heap
        report_every = max(1, n_jobs // 200)
        next_report = report_every
        tick = self._tick
        rounds = 0
        next_tick = TICK_EVERY
        while self.done < n_jobs:
            t_arr = jobs[self._next_arrival].submit if self._next_arrival < n_jobs else math.inf
            # drop stale events (finish of an interrupted run, superseded wake-ups) lazily
            while heap and self._stale(heap[0]):
                heapq.heappop(heap)
            t_ev = heap[0][0] if heap else math.inf
            t = min(t_arr, t_ev)
            if t == math.inf:
                raise SimulationError(
                    f"stuck at t={self.now}: {len(self.pending)} jobs pending, none running, "
                    f"no event left (policy {self.policy.name!r} starts nothing)"
                )
            self._accumulate(t)
            self.now = t
            changed = False
            while heap and heap[0][0] == t:
                _, kind, _, a, b = heapq.heappop(heap)
                changed |= self._handle(kind, a, b)
            while self._next_arrival < n_jobs and jobs[self._next_arrival].submit == t:
                self._enqueue(jobs[self._next_arrival])
                self._next_arrival += 1
                changed = True
            if changed and (self.pending or self._wants_running_view()):
                self._call_policy()
                # A job stopped by an immediate preemption is a job-stop event: in the live loop
                # it triggers another cycle right away, so GPUs it freed do not idle until the
                # next unrelated event. Only for policies that hand freed GPUs out in a later
                # cycle (`cycle_on_stop`); bounded, so a policy cannot loop forever.
                rounds = 0
                follow = getattr(self.policy, "cycle_on_stop", False)
                while follow and self._stopped_now and self.pending and rounds < 4:
                    rounds += 1
                    self._call_policy()
            if self.config.record_series:
                self.series_t.append(t)
                self.series_pending.append(len(self.pending))
                self.series_used.append(self.used_gpus)
            if self._progress and self.done >= next_report:
                next_report = self.done + report_every
                self._progress(self.done, n_jobs, t)
            rounds += 1
            # Work done, not jobs finished: a replay where nothing finishes for a long stretch
            # (everything long-running, or a policy that starts nothing) is still heard from.
            if tick is not None and rounds + self.decide_calls >= next_tick:
                next_tick = rounds + self.decide_calls + TICK_EVERY
                tick(self.done, n_jobs, t)
        if self._progress:
            self._progress(self.done, n_jobs, self.now)
        if timer:
            self.wall_s = timer() - t0
        return self

    def _wants_running_view(self) -> bool:
        # a preemptive policy may want to act with nothing pending (never needed by ours)
        return False

    def _stale(self, ev: tuple[float, int, int, int, int]) -> bool:
        _, kind, _, a, b = ev
        if kind in (_FINISH, _STOP):
            job = self.jobs[a]
            return job.state != "running" or job.run_id != b
        if kind == _WAKE:
            return self._wake is None or ev[0] != self._wake
        if kind in (_FAIL, _SPOT):
            return self.node_state[a] != READY or b != self._node_ev[a]
        return False

    def _handle(self, kind: int, a: int, b: int) -> bool:
        if kind == _FINISH:
            job = self.jobs[a]
            if job.state == "running" and job.run_id == b:
                self._finish(job)
                return True
            return False
        if kind == _STOP:
            job = self.jobs[a]
            if job.state == "running" and job.run_id == b:
                self._interrupt(job)
                return True
            return False
        if kind == _FAIL:
            if self._stale((self.now, kind, 0, a, b)):
                return False
            self.node_failures += 1
            self._node_down(a, until=self.now + self.config.repair_s, failure=True)
            return True
        if kind == _SPOT:
            if self._stale((self.now, kind, 0, a, b)):
                return False
            self.spot_interruptions += 1
            self._node_down(a, until=self.now + self.config.spot_outage_s, failure=False)
            return True
        if kind == _REPAIR:
            self._node_up(a)
            return True
        if kind == _RELEASE:
            self.node_state[a] = READY
            self.ready_gpus_by_model[self.node_model[a]] += self.node_gpus[a]
            self._index(a)
            self._schedule_failure(a)
            self._schedule_spot(a)
            return True
        if kind == _WAKE:
            if self._wake == self.now:
                self._wake = None
                return True
            return False
        raise AssertionError(kind)

    def _call_policy(self) -> None:
        self._stopped_now = 0
        timer = self._timer
        self.decide_calls += 1
        if timer:
            t0 = timer()
            self.policy.schedule(self, self.now)
            self.decide_times.append(timer() - t0)
        else:
            self.policy.schedule(self, self.now)
