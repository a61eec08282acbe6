"""`gpuplatform`: our policy engine driven through snapshot -> decide -> apply, as in the live loop.

What the engine may know is what a real scheduler knows: the cluster, running and pending jobs,
team usage, and runtime estimates: the user's runtime limit where the trace has one (the
platform's own history does; the public traces do not), else a predictor over jobs that have
already finished (the trace's future durations are never handed over).

Snapshots are built incrementally: `Node`, `RunningJob` and `PendingJob` objects are cached and
rebuilt only when their inputs change (the simulator marks changed nodes; a job's entry is keyed
by what it shows the engine), so a call costs O(changes) plus the tuple copies.

Decisions are applied as the live loop applies them: preemptions first, then starts; a start on
GPUs that are not free is dropped (counted in `start_conflicts`); `Reserve` and `Pending` are
informational; `Resize` is not modelled (trace jobs are not elastic) and only counted.

A job allowed on several GPU models (openb `gpu_spec` "A|B") is shown to the engine as needing the
first of them: the engine takes one model or any, and "any" could place it on a model it may not
use. This under-uses the alternatives; the default openb list has no such job.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scheduler.policy import (
    Config,
    Decisions,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    decide,
)

from .simulator import SimJob, Simulator

if TYPE_CHECKING:
    from scheduler.prediction import JobDescription

# A job's description as RuntimeModel keys its features (ModelPredictor's estimate cache).
_DescriptionKey = tuple[str, str, str, str, int, int, str | None, str]
# What a pending job's PendingJob is built from besides its fixed fields (_pending_inputs), and
# the estimate part of it (_pending_job's key).
_PendingInputs = tuple[int, float, float, bool]
_PendingKey = tuple[float | None, float, bool]

PRIORITY_CLASSES = {"production": 1000, "research": 500, "best-effort": 100}


class RuntimePredictor:
    """Runtime estimates from already-finished jobs only: the median of the last `window`
    durations of the same (tenant, GPU count), else of the same GPU count, else of all jobs;
    None before anything has finished (the engine then uses its default). For a job that has
    already run longer than that, the median of the finished durations longer than what it has
    run (a conditional median: heavy tails make old jobs likely to run long), or twice what it
    has run when no finished job ran that long."""

    def __init__(self, window: int = 64, min_samples: int = 5) -> None:
        self.window = window
        self.min_samples = min_samples
        self._recent: dict[object, deque[float]] = {}
        self._sorted: dict[object, list[float]] = {}
        self._base: dict[tuple[str, int], float | None] = {}  # cleared on every observation
        self.version = 0  # bumped on every observation: estimates may differ from then on

    def observe(self, tenant: str, gpus: int, duration: float) -> None:
        """Record a finished job's actual run time."""
        for key in ((tenant, gpus), gpus, None):
            recent = self._recent.setdefault(key, deque())
            ordered = self._sorted.setdefault(key, [])
            recent.append(duration)
            insort(ordered, duration)
            if len(recent) > self.window:
                old = recent.popleft()
                del ordered[bisect_left(ordered, old)]
        self._base.clear()
        self.version += 1

    def _samples(self, tenant: str, gpus: int) -> list[float] | None:
        for k, minimum in (((tenant, gpus), self.min_samples), (gpus, self.min_samples), (None, 1)):
            ordered = self._sorted.get(k)
            if ordered and len(ordered) >= minimum:
                return ordered
        return None

    def base_estimate(self, tenant: str, gpus: int) -> float | None:
        """Predicted total run time of a fresh job of `gpus` GPUs from `tenant`."""
        key = (tenant, gpus)
        if key not in self._base:
            ordered = self._samples(tenant, gpus)
            self._base[key] = ordered[len(ordered) // 2] if ordered else None
        return self._base[key]

    def observe_job(self, job: SimJob) -> None:
        self.observe(job.tenant, job.gpus, job.duration)

    def estimate_job(self, job: SimJob, attained_s: float = 0.0) -> float | None:
        return self.estimate(job.tenant, job.gpus, attained_s)

    def estimate(self, tenant: str, gpus: int, attained_s: float = 0.0) -> float | None:
        """Predicted total run time of a job, given `attained_s` seconds already done."""
        est = self.base_estimate(tenant, gpus)
        if est is None or attained_s < est:
            return est
        ordered = self._samples(tenant, gpus)
        assert ordered is not None  # base_estimate found an estimate in these samples
        i = bisect_right(ordered, attained_s)
        if i < len(ordered):
            return ordered[i + (len(ordered) - i) // 2]
        return 2.0 * attained_s


class ModelPredictor:
    """`RuntimePredictor`'s interface over the live loop's learned model
    (`scheduler.prediction.RuntimeModel`): finished jobs are learned in a batch at the next
    estimate; a job that has run longer than its prediction is expected to run as long again as
    it has run, as the live snapshot expects. It learns from what the trace knows of a job: its
    tenant, shape, GPU model and class, and the user, name and image where the trace has them
    (the platform's own history does; the public traces do not)."""

    def __init__(self) -> None:
        from scheduler.prediction import RuntimeModel

        self.model = RuntimeModel()
        self._batch: list[tuple[JobDescription, float]] = []
        self._cache: dict[_DescriptionKey, float | None] = {}
        self.version = 0

    @staticmethod
    def describe(job: SimJob) -> JobDescription:
        from scheduler.prediction import JobDescription

        return JobDescription(
            team=job.tenant,
            user=job.user,
            name=job.name,
            image=job.image,
            workers=job.workers,
            gpus_per_worker=job.gpus_per_worker,
            gpu_model=job.models[0] if job.models else None,
            priority_class=job.priority_class,
        )

    def observe_job(self, job: SimJob) -> None:
        self._batch.append((self.describe(job), max(job.duration, 1.0)))

    def _learn(self) -> None:
        batch, self._batch = self._batch, []
        self.model.learn([d for d, _ in batch], [r for _, r in batch])
        self._cache.clear()
        self.version += 1

    # Learning moves every prediction a little, and a changed estimate rebuilds the job's entry
    # and the engine's memos: learn in batches (as the live loop does, once per cycle) and keep
    # predictions on a 5 % grid, so estimates change only when the model really moved.
    BATCH = 16
    GRID = math.log(1.05)

    def estimate_job(self, job: SimJob, attained_s: float = 0.0) -> float | None:
        if len(self._batch) >= self.BATCH or (self._batch and not self.model.ready):
            self._learn()
        desc = self.describe(job)
        key: _DescriptionKey = (
            desc.team,
            desc.user,
            desc.name,
            desc.image,
            desc.workers,
            desc.gpus_per_worker,
            desc.gpu_model,
            desc.priority_class,
        )
        if key not in self._cache:
            (raw,) = self.model.predict_s([desc])
            self._cache[key] = (
                None if raw is None else math.exp(round(math.log(raw) / self.GRID) * self.GRID)
            )
        est = self._cache[key]
        if est is None or attained_s < est:
            return est
        return 2.0 * attained_s


def _pending_inputs(predictor_version: int, job: SimJob) -> _PendingInputs:
    """What a pending job's PendingJob is built from besides its fixed fields: while these are
    equal, the cached object stands (one definition for both places that test it)."""
    return (predictor_version, job.progress, job.executed_s, job.requeued)


class GpuPlatformPolicy:
    """Adapter from the simulator to `scheduler.policy.decide` (engine defaults unless `config`
    is given)."""

    name = "gpuplatform"
    # the engine never hands GPUs freed by a preemption to a job in the same cycle
    cycle_on_stop = True

    def __init__(
        self,
        config: Config | None = None,
        *,
        name: str | None = None,
        priority_classes: Mapping[str, int] | None = None,
        teams: Mapping[str, Mapping[str, Any]] | None = None,
        deadlines: bool = True,
        runtime_model: bool = False,
    ) -> None:
        """`priority_classes` and `teams` (the team tree with weights and quotas, as
        `history.History.teams` has it) come from a trace of the platform's own history; other
        traces get the three default classes and one flat team per tenant.

        `deadlines=False` hides the jobs' deadlines from the engine (no-deadline ordering; the
        metrics still count hits). `runtime_model=True` plans every job with the learned model's
        prediction (`ModelPredictor`), ignoring users' limits, instead of the limit or the
        per-(tenant, GPUs) median."""
        self.deadlines = deadlines
        self.runtime_model = runtime_model
        self.config = config or Config()
        if name:
            self.name = name
        self.classes = dict(priority_classes) if priority_classes is not None else PRIORITY_CLASSES
        # fair share and quotas read these; only the decayed usage changes between calls
        self._teams = {
            t: Team(
                name=t,
                parent=spec["parent"],
                weight=spec["weight"],
                quota={m: Quota(g, b) for m, (g, b) in spec["quota"].items()},
            )
            for t, spec in (teams or {}).items()
        }
        # The engine's least-attained-service queues (Config.las): when on, a running job that
        # has crossed a threshold and saved a checkpoint in its run may become a victim, so the
        # adapter asks for a cycle at that moment (the engine computes the queue itself from
        # started_at and attained_service_s).
        las = self.config.las
        self.las = tuple(sorted(las.thresholds_gpu_s)) if las is not None else ()
        long_run = las.long_run_s if las is not None and self.las else None
        self.long_run = long_run if long_run is not None and long_run > 0 else 0.0
        self.predictor: RuntimePredictor | ModelPredictor = (
            ModelPredictor() if runtime_model else RuntimePredictor()
        )
        self._nodes: list[Node] = []
        self._node_names: list[str] = []
        self._node_index: dict[str, int] = {}
        self._running: dict[int, tuple[int, float, RunningJob]] = {}
        self._pending: dict[int, tuple[_PendingKey, PendingJob, _PendingInputs]] = {}
        self._finished_seen = 0
        # LAS wake-ups: a heap of (threshold crossing time, job idx, run id, threshold index, the
        # run's first checkpoint), one live entry per run, so finding the earliest crossing does
        # not scan every running job; entries of runs that ended are dropped at the top.
        self._demotions: list[tuple[float, int, int, int, float]] = []
        self._demotion_run: dict[int, int] = {}  # job idx -> run id with an entry in the heap
        # Overdue wake-ups: (expected end, job idx, run id) of running jobs. When a job outruns
        # its expected end the engine's release timeline moves (reservations, backfill windows),
        # which the live loop notices at its next cycle: the replay looks again then too.
        self._ends: list[tuple[float, int, int]] = []
        self.resizes_ignored = 0
        self.last_decisions: Decisions | None = None

    @property
    def fair_share_half_life_s(self) -> float:
        """The engine's half-life: the simulator decays the usage it hands over with it."""
        return self.config.fair_share_half_life_s

    # -- snapshot ---------------------------------------------------------------------------

    def _sync_nodes(self, sim: Simulator) -> None:
        if not self._nodes:
            specs = sim.cluster.nodes
            self._node_names = [n.name for n in specs]
            self._node_index = {name: i for i, name in enumerate(self._node_names)}
            self._nodes = [None] * len(specs)  # type: ignore[list-item]
        specs = sim.cluster.nodes
        for i in sim.changed_nodes:
            s = specs[i]
            self._nodes[i] = Node(
                name=s.name,
                gpu_model=s.gpu_model,
                gpus=s.gpus,
                free_gpus=tuple(sim.node_free[i]),
                zone=s.zone,
                rack=s.rack,
                nvlink_domain=s.nvlink_domain,
                fabric=s.fabric,
                spot=s.spot,
                state=sim.node_state[i],
            )
        sim.changed_nodes.clear()

    def _observe_finished(self, sim: Simulator) -> None:
        # feed the predictor with jobs that finished since the last call (finish order)
        finished = sim.finished
        for k in range(self._finished_seen, len(finished)):
            self.predictor.observe_job(sim.jobs[finished[k]])
        self._finished_seen = len(finished)

    def _crossing(self, job: SimJob, k: int, first_save: float) -> float:
        # when the run's attained GPU-s, (executed_s + now - run_start) x GPUs, reaches
        # threshold k; k = len(las): when its run time reaches las.long_run_s in the last queue.
        # Not before the run's first checkpoint (``first_save``): until then no job of its class
        # may preempt it (the minimum quantum), so a cycle could not act on the crossing.
        if k < len(self.las):
            t = job.run_start - job.executed_s + self.las[k] / job.gpus
        else:
            t = job.run_start - job.executed_s + max(self.long_run, self.las[-1] / job.gpus)
        return max(t, first_save)

    def _track_demotions(self, sim: Simulator, job: SimJob) -> None:
        # a job that is never preempted is never a victim whatever its queue: no wake-up for it
        if self.las and job.preemptible and self._demotion_run.get(job.idx) != job.run_id:
            self._demotion_run[job.idx] = job.run_id
            first_save = sim.next_checkpoint_at(job, after=job.run_start)
            if first_save != float("inf"):
                heapq.heappush(
                    self._demotions,
                    (self._crossing(job, 0, first_save), job.idx, job.run_id, 0, first_save),
                )

    def _next_demotion(self, sim: Simulator, now: float) -> float:
        """The earliest time after ``now`` at which a running job that may be preempted has
        crossed a LAS threshold and saved a checkpoint in its run (plus 1 us, so that it has),
        or inf."""
        heap = self._demotions
        jobs = sim.jobs
        while heap:
            t, idx, run_id, k, first_save = heap[0]
            job = jobs[idx]
            if job.state != "running" or job.run_id != run_id:
                heapq.heappop(heap)
                continue
            if t > now:
                return t + 1e-6
            # crossed already: its next threshold still ahead, if any
            while t <= now and k + 1 < len(self.las) + (1 if self.long_run > 0 else 0):
                k += 1
                t = self._crossing(job, k, first_save)
            if t > now:
                heapq.heapreplace(heap, (t, idx, run_id, k, first_save))
            else:
                heapq.heappop(heap)
        return float("inf")

    def _running_job(self, sim: Simulator, job: SimJob) -> RunningJob:
        # The expected end is fixed when the job starts (from the estimate then), as a live
        # scheduler records it; it is only pushed out when the job outruns it. The entry is
        # rebuilt only when the job's last checkpoint or expected end changes.
        now = sim.now
        cached = self._running.get(job.idx)
        if (
            cached is not None
            and cached[0] == job.run_id
            and now < cached[1]
            and cached[2].releasing_at == job.stop_at
        ):
            return cached[2]
        placement = None
        if cached is not None and cached[0] == job.run_id:
            expected_end = cached[2].expected_end
            # same run, same GPUs: the same mapping lets the engine recognise it (identity)
            placement = cached[2].placement
        else:
            est = self._estimate(job, job.progress)
            expected_end = None
            if est is not None:
                expected_end = job.run_start + job.overhead + max(0.0, est - job.progress)
        if expected_end is not None and expected_end <= now:
            # it has outrun its estimate: re-estimate given how far it got
            reached = job.progress + max(0.0, now - job.run_start - job.overhead)
            est = self.predictor.estimate_job(job, reached)
            expected_end = now + max(60.0, (est or 0.0) - reached)
        lca = sim.last_checkpoint_at(job)
        ci = job.checkpoint_interval_s
        # valid until the next checkpoint or the expected end, whichever comes first
        next_ckpt = sim.next_checkpoint_at(job)
        valid_until = min(next_ckpt, expected_end if expected_end is not None else float("inf"))
        names = self._node_names
        rj = RunningJob(
            id=job.id,
            team=job.tenant,
            priority_class=job.priority_class,
            gpu_model=job.models[0] if job.models else None,  # see the module docstring
            workers=job.workers,
            gpus_per_worker=job.gpus_per_worker,
            placement=placement or {names[n]: g for n, g in job.placement.items()},
            started_at=job.run_start,
            expected_end=expected_end,
            preemptible=job.preemptible,
            last_checkpoint_at=lca,
            checkpoint_interval_s=ci,
            releasing_at=job.stop_at,
            # service received in earlier runs, lost work included (what LAS queues count)
            attained_service_s=job.executed_s,
            submitted_at=job.submit,
        )
        self._running[job.idx] = (job.run_id, valid_until, rj)
        if expected_end is not None and (
            cached is None or cached[0] != job.run_id or cached[2].expected_end != expected_end
        ):
            heapq.heappush(self._ends, (expected_end, job.idx, job.run_id))
        return rj

    def _estimate(self, job: SimJob, progress: float) -> float | None:
        # The user's runtime limit when the trace has one (the live loop hands the engine the
        # limit too), else the predictor over finished jobs.
        if job.runtime_limit_s is not None and not self.runtime_model:
            return job.runtime_limit_s
        return self.predictor.estimate_job(job, progress)

    def _pending_job(self, job: SimJob, now: float) -> PendingJob:
        # The estimate depends only on the predictor's samples and the job's progress: while
        # neither changed, the entry stands without asking the predictor again.
        inputs = _pending_inputs(self.predictor.version, job)
        cached = self._pending.get(job.idx)
        if cached is not None and cached[2] == inputs:
            return cached[1]
        est = self._estimate(job, job.progress)
        key = (est, job.executed_s, job.requeued)
        if cached is not None and cached[0] == key:
            self._pending[job.idx] = (key, cached[1], inputs)
            return cached[1]
        pj = PendingJob(
            id=job.id,
            team=job.tenant,
            priority_class=job.priority_class,
            gpu_model=job.models[0] if job.models else None,  # see the module docstring
            workers=job.workers,
            gpus_per_worker=job.gpus_per_worker,
            submitted_at=job.submit,
            runtime_estimate_s=est,
            preemptible=job.preemptible,
            attained_service_s=job.executed_s,
            requeued=job.requeued,
            deadline=job.deadline if self.deadlines else None,
        )
        self._pending[job.idx] = (key, pj, inputs)
        return pj

    def snapshot(self, sim: Simulator, now: float) -> Snapshot:
        """The engine's view of the simulator now (no future durations in it)."""
        self._observe_finished(sim)
        self._sync_nodes(sim)
        # The validity test of _running_job, inlined: this runs for every running job per call.
        cache = self._running
        rebuild = self._running_job
        sim_now = sim.now
        running_list = []
        for j in sim.running.values():
            c = cache.get(j.idx)
            if c is None or c[0] != j.run_id or sim_now >= c[1] or c[2].releasing_at != j.stop_at:
                running_list.append(rebuild(sim, j))
                self._track_demotions(sim, j)
            else:
                running_list.append(c[2])
        running = tuple(running_list)
        # every running job has an entry now, so entries of gone jobs exist only if it is larger
        if len(cache) > len(sim.running):
            for idx in [i for i in cache if i not in sim.running]:
                del cache[idx]
        prebuild = self._pending_job
        if type(self)._pending_job is GpuPlatformPolicy._pending_job:
            # The validity test of _pending_job, inlined likewise (not where a subclass builds
            # its own jobs): the same PendingJob object while the predictor and the job's
            # progress are unchanged.
            pcache = self._pending
            predictor = self.predictor
            version = predictor.version
            # Every finished job moves the predictor's version, so every pending job's inputs
            # change, while most estimates do not: ask the predictor once per (tenant, GPUs,
            # progress) in this call (its estimates are a function of those for one version),
            # and keep the entry when the estimate is the same, as _pending_job would.
            # (only a RuntimePredictor estimates from those three alone)
            by_shape = (
                predictor
                if type(predictor) is RuntimePredictor and not self.runtime_model
                else None
            )
            estimates: dict[tuple[str, int, float], float | None] = {}
            pending_list = []
            for j in sim.pending.values():
                pc = pcache.get(j.idx)
                if pc is not None:
                    inputs = _pending_inputs(version, j)
                    if pc[2] == inputs:
                        pending_list.append(pc[1])
                        continue
                    if by_shape is not None and j.runtime_limit_s is None:
                        shape = (j.tenant, j.gpus, j.progress)
                        if shape in estimates:
                            est = estimates[shape]
                        else:
                            est = estimates[shape] = by_shape.estimate(*shape)
                        key = (est, j.executed_s, j.requeued)
                        if pc[0] == key:
                            pcache[j.idx] = (key, pc[1], inputs)
                            pending_list.append(pc[1])
                            continue
                pending_list.append(prebuild(j, now))
            pending = tuple(pending_list)
        else:
            pending = tuple(prebuild(j, now) for j in sim.pending.values())
        if len(self._pending) > len(sim.pending):
            for idx in [i for i in self._pending if i not in sim.pending]:
                del self._pending[idx]
        usage = sim.tenant_usage
        teams = tuple(
            replace(team, usage_gpu_s=usage.get(name, 0.0)) for name, team in self._teams.items()
        ) + tuple(Team(name=t, usage_gpu_s=u) for t, u in usage.items() if t not in self._teams)
        return Snapshot(
            now=now,
            config=self.config,
            priority_classes=self.classes,
            teams=teams,
            nodes=tuple(self._nodes),
            running=running,
            pending=pending,
        )

    # -- apply ------------------------------------------------------------------------------

    def schedule(self, sim: Simulator, now: float) -> None:
        """Build a snapshot, call `decide`, apply preemptions then starts."""
        self.apply(sim, now, decide(self.snapshot(sim, now)))

    def apply(self, sim: Simulator, now: float, decisions: Decisions) -> None:
        """Carry out one call's decisions and ask for the next wake-up (a demotion or an
        overrun, whichever comes first)."""
        self.last_decisions = decisions
        by_id = sim.by_id
        for p in decisions.preempt:
            sim.preempt(by_id[p.job], p.grace_s, p.reason)
        index = self._node_index
        for s in decisions.start:
            job = by_id[s.job]
            if sim.start(job, {index[name]: tuple(g) for name, g in s.placement.items()}):
                self._track_demotions(sim, job)
        self.resizes_ignored += len(decisions.resize)
        if sim.pending:
            # a running job crossing a LAS threshold may now be preempted, and one outrunning
            # its expected end moves reservations: look again then, as the live loop would
            wake = self._next_demotion(sim, now) if self.las else float("inf")
            wake = min(wake, self._next_overdue(sim, now))
            if wake != float("inf"):
                sim.wake_at(wake)

    def _next_overdue(self, sim: Simulator, now: float) -> float:
        """Just after the earliest expected end after ``now`` of a running job, or inf."""
        heap = self._ends
        jobs = sim.jobs
        running = self._running
        while heap:
            t, idx, run_id = heap[0]
            job = jobs[idx]
            entry = running.get(idx)
            if (
                t <= now
                or job.state != "running"
                or job.run_id != run_id
                or entry is None
                or entry[2].expected_end != t
            ):
                heapq.heappop(heap)
                continue
            return t + 1e-6
        return float("inf")
