"""The simulated backend: the demo's and the tests' cluster.

Jobs progress on a scaled clock (``SIMULATED_TIME_SCALE`` simulated seconds per real second),
write a checkpoint every ``checkpoint_interval_s`` of simulated work, and finish when their
simulated service time is done. Nodes fail now and then (a seeded rate per node-hour, or on
demand through :meth:`SimulatedBackend.fail_node`) and come back after a repair time; runs on a
failed node end as NODE_FAILED. Per-GPU utilization samples are produced for busy GPUs.

State lives in the database (``SimulatedRun``, ``SimulatedNodeFault``) so every process sees the
same cluster. Every call is idempotent by ``(job_id, attempt)``. A run's team (``RunRef.team``)
is not read: only the platform makes runs here, so a run of a name is the platform's own.

Nothing is executed, but each run is given what a real one gets: its workers' launcher variables
(:func:`~scheduler.backends.base.launcher_env`; the master address is worker 0's node name) are
recorded with the run and printed at the top of its log, and the log is an append-only output
read by byte cursor like a real one: the loss curve is a function of the training step, so a
resumed attempt continues it from its checkpoint.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.bounds import MAX_DURATION_S

from .base import (
    DEFAULT_MASTER_PORT,
    BackendJobSpec,
    BackendJobState,
    BackendJobStatus,
    BackendNode,
    BackendRejected,
    LiveRun,
    LogChunk,
    RunRef,
    backend_job_name,
    byte_chunk,
    byte_window,
    worker_envs,
    worker_slots,
)

if TYPE_CHECKING:
    from scheduler.models import SimulatedRun

DEFAULT_SERVICE_TIME_S = 1800.0
# The launcher variables a simulated log shows for each worker.
_SHOWN_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_NNODES",
    "PET_NODE_RANK",
)


def _loss(job_id: str, step: int) -> float:
    """A decaying loss with a little noise: a function of the step, so it continues across
    attempts resumed from a checkpoint."""
    noise = int.from_bytes(hashlib.sha256(f"{job_id}/{step}".encode()).digest()[:4], "big")
    return max(0.05, 4.0 * 0.985**step * (1 + 0.02 * (noise / 2**32 - 0.5)))


FAILURE_CHECK_BUCKET_S = 10.0


def _seconds(text: str, name: str) -> float:
    """A positive, finite number of seconds from the job's environment, or the run is refused
    (as a real launcher would fail on it)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise BackendRejected(f"{name} must be a positive number of seconds, not {text[:40]!r}")
    return value


class SimulatedBackend:
    kind = "simulated"

    def __init__(self, *, cluster_id: int, config: dict[str, Any] | None = None):
        self.cluster_id = cluster_id
        self.config = config or {}
        self.seed = int(self.config.get("seed", 0))
        self._last_failure_check: datetime | None = None

    # -- clock -------------------------------------------------------------------------------
    @property
    def scale(self) -> float:
        return float(self.config.get("time_scale", settings.SIMULATED_TIME_SCALE))

    def _now(self) -> datetime:
        return timezone.now()

    # -- runs ----------------------------------------------------------------------------------
    def run_provenance(self, spec: BackendJobSpec) -> dict[str, Any]:
        """For the attempt's reproducibility record: a simulated run pulls no image."""
        return {
            "image_digest": None,
            "image_note": "simulated cluster: no image is pulled or run",
            "runtime": {"simulated_service_time_s": spec.service_time_s},
        }

    def submit(self, spec: BackendJobSpec) -> str:
        from scheduler.models import SimulatedRun

        ref = spec.backend_name
        if SimulatedRun.objects.filter(
            cluster_id=self.cluster_id, job_id=spec.job_id, attempt=spec.attempt
        ).exists():
            return ref
        try:
            slots = worker_slots(spec)
        except ValueError as exc:
            raise BackendRejected(str(exc)) from exc
        master = slots[0][0]
        envs = worker_envs(spec, master_addr=master, master_port=DEFAULT_MASTER_PORT)
        service = spec.service_time_s or DEFAULT_SERVICE_TIME_S
        interval = None
        if spec.env.get("CHECKPOINT_INTERVAL_S"):
            interval = _seconds(spec.env["CHECKPOINT_INTERVAL_S"], "CHECKPOINT_INTERVAL_S")
        try:
            with transaction.atomic():
                SimulatedRun.objects.create(
                    cluster_id=self.cluster_id,
                    job_id=spec.job_id,
                    attempt=spec.attempt,
                    nodes=sorted(spec.placement),
                    started_at=self._now(),
                    service_time_s=service,
                    resume_from_s=min(spec.resume_from_s, service),
                    checkpoint_interval_s=interval,
                    launch_env=[
                        {"node": node, "env": env}
                        for (node, _), env in zip(slots, envs, strict=True)
                    ],
                )
        except IntegrityError:
            pass  # a concurrent submit of the same run won: that is the idempotent outcome
        return ref

    def cancel(self, run: RunRef) -> None:
        from scheduler.models import SimulatedRun

        SimulatedRun.objects.filter(
            cluster_id=self.cluster_id,
            job_id=run.job_id,
            attempt=run.attempt,
            cancelled_at__isnull=True,
        ).update(cancelled_at=self._now())

    def checkpoint(self, run: RunRef) -> None:
        from scheduler.models import SimulatedRun

        SimulatedRun.objects.filter(
            cluster_id=self.cluster_id, job_id=run.job_id, attempt=run.attempt
        ).update(checkpoint_requested_at=self._now())

    def _status(
        self, run: SimulatedRun, now: datetime, down: dict[str, list[datetime]]
    ) -> BackendJobStatus:
        # ``pending_nodes`` (config: node name -> reason): the cluster keeps every run placed on
        # such a node waiting, as Slurm does a run whose time limit reaches into a maintenance
        # reservation there. Tests set it to see what the loop does with such a run.
        held = self.config.get("pending_nodes") or {}
        reasons = [str(held[n]) for n in run.nodes if n in held]
        if reasons and run.cancelled_at is None:
            return BackendJobStatus(
                job_id=run.job_id,
                attempt=run.attempt,
                state=BackendJobState.PENDING,
                backend_ref=backend_job_name(run.job_id, run.attempt),
                nodes=tuple(dict.fromkeys(run.nodes)),
                reason=reasons[0],
                pending_on_nodes=True,
                held_by_cluster=True,
            )
        end_of_work = run.started_at + timedelta(
            seconds=(run.service_time_s - run.resume_from_s) / self.scale
        )
        failed_at = min(
            (t for n in run.nodes for t in down.get(n, ()) if t >= run.started_at), default=None
        )
        stop = min(t for t in (run.cancelled_at, failed_at, end_of_work, now) if t is not None)
        progress = (
            run.resume_from_s + max(0.0, (stop - run.started_at).total_seconds()) * self.scale
        )
        progress = min(progress, run.service_time_s)
        checkpointed = run.resume_from_s
        if run.checkpoint_interval_s:
            done_since_resume = progress - run.resume_from_s
            checkpointed += (
                done_since_resume // run.checkpoint_interval_s
            ) * run.checkpoint_interval_s
        if run.checkpoint_requested_at and run.checkpoint_requested_at <= stop:
            # A requested checkpoint is written at once (the simulated job honours the signal).
            asked = run.resume_from_s + (
                (run.checkpoint_requested_at - run.started_at).total_seconds() * self.scale
            )
            checkpointed = max(checkpointed, min(asked, progress))
        ref = backend_job_name(run.job_id, run.attempt)
        running = BackendJobStatus(
            job_id=run.job_id,
            attempt=run.attempt,
            state=BackendJobState.RUNNING,
            backend_ref=ref,
            nodes=tuple(dict.fromkeys(run.nodes)),
            checkpointed_progress_s=checkpointed,
        )
        if run.cancelled_at and stop == run.cancelled_at and run.cancelled_at < end_of_work:
            return replace(running, state=BackendJobState.CANCELLED)
        if failed_at is not None and stop == failed_at and failed_at < end_of_work:
            return replace(running, state=BackendJobState.NODE_FAILED, reason="node failed")
        if stop == end_of_work:
            return replace(running, state=BackendJobState.SUCCEEDED, exit_code=0)
        return running

    def poll_jobs(self, runs: Iterable[RunRef]) -> list[BackendJobStatus]:
        from scheduler.models import SimulatedRun

        wanted = {(run.job_id, run.attempt) for run in runs}
        if not wanted:
            return []
        now = self._now()
        down = self._fault_times()
        rows = SimulatedRun.objects.filter(
            cluster_id=self.cluster_id, job_id__in={job_id for job_id, _ in wanted}
        ).defer("launch_env")  # each worker's variables: read only to show a run's environment
        found = {(r.job_id, r.attempt): r for r in rows}
        out = []
        for key in sorted(wanted):
            run = found.get(key)
            if run is None:
                out.append(
                    BackendJobStatus(job_id=key[0], attempt=key[1], state=BackendJobState.UNKNOWN)
                )
            else:
                out.append(self._status(run, now, down))
        return out

    def team_account(self, team: str) -> str:
        """Every run is the simulated cluster's own: no team accounts."""
        return ""

    def run_owners(self, runs: Mapping[str, RunRef]) -> dict[str, str]:
        """Every run is the simulated cluster's own, without asking."""
        return dict.fromkeys(runs, "")

    def live_runs(self, job_id_prefix: str, accounts: Iterable[str] = ()) -> list[LiveRun]:
        """Runs still working (not cancelled, not failed with their node, not done).

        A simulated run never restarts by itself, so this finds only runs whose cancel was
        skipped. Only runs young enough to be unfinished are read: none lasts longer than the
        longest service time on the scaled clock. ``accounts`` changes nothing: every run is
        the simulated cluster's own.
        """
        from django.db.models import Max

        from scheduler.models import SimulatedRun

        uncancelled = SimulatedRun.objects.filter(
            cluster_id=self.cluster_id,
            cancelled_at__isnull=True,
            job_id__startswith=job_id_prefix,
        )
        longest = uncancelled.aggregate(longest=Max("service_time_s"))["longest"]
        if longest is None:
            return []
        now = self._now()
        # Capped: a run recorded with an absurd service time must not overflow the date maths.
        window_s = min(longest / self.scale, MAX_DURATION_S)
        recent = uncancelled.filter(started_at__gte=now - timedelta(seconds=window_s)).defer(
            "launch_env"
        )
        down = self._fault_times()
        return sorted(
            LiveRun(run.job_id, run.attempt)
            for run in recent
            if self._status(run, now, down).state
            in (BackendJobState.RUNNING, BackendJobState.PENDING)
        )

    def read_log(
        self, run: RunRef, *, cursor: str | None = None, limit_bytes: int = 65536
    ) -> LogChunk:
        """The run's simulated output so far, by byte cursor (see the module docstring)."""
        data = self._output(run.job_id, run.attempt).encode()
        limit = max(1, int(limit_bytes))
        try:
            start, truncated = byte_window(len(data), cursor, limit)
        except ValueError as exc:
            raise BackendRejected(str(exc)) from exc
        window = data[start : start + limit]
        return byte_chunk(window, start, limit=limit, tail=cursor is None, truncated=truncated)

    def _output(self, job_id: str, attempt: int) -> str:
        from scheduler.models import SimulatedRun

        run = SimulatedRun.objects.filter(
            cluster_id=self.cluster_id, job_id=job_id, attempt=attempt
        ).first()
        if run is None:
            return ""
        status = self._status(run, self._now(), self._fault_times())
        out = [f"[gpuplatform] attempt {attempt} on {', '.join(dict.fromkeys(run.nodes))}"]
        for index, worker in enumerate(run.launch_env or []):
            env = worker.get("env") or {}
            shown = " ".join(f"{k}={env[k]}" for k in _SHOWN_ENV if k in env)
            out.append(f"[gpuplatform] worker {index} on {worker.get('node')}: {shown}")
        first_step = int(run.resume_from_s // 60) + 1
        if run.resume_from_s:
            out.append(
                f"[gpuplatform] resumed from checkpoint at {run.resume_from_s:.0f} s of work: "
                f"step {first_step}"
            )
        stop = self._now()
        if run.cancelled_at is not None:
            stop = min(stop, run.cancelled_at)
        done_s = min(
            run.service_time_s,
            run.resume_from_s + max(0.0, (stop - run.started_at).total_seconds()) * self.scale,
        )
        for step in range(first_step, int(done_s // 60) + 1):
            out.append(f"step {step:6d}  loss {_loss(job_id, step):.4f}")
        if status.state == BackendJobState.SUCCEEDED:
            out.append("[gpuplatform] training finished")
        return "\n".join(out) + "\n"

    # -- nodes -----------------------------------------------------------------------------
    def _fault_times(self) -> dict[str, list[datetime]]:
        """Node name -> start times of its failures so far, oldest first."""
        from scheduler.models import SimulatedNodeFault

        times: dict[str, list[datetime]] = {}
        rows = SimulatedNodeFault.objects.filter(
            cluster_id=self.cluster_id, failed_at__lte=self._now()
        ).order_by("failed_at")
        for name, failed_at in rows.values_list("node_name", "failed_at"):
            times.setdefault(name, []).append(failed_at)
        return times

    def fail_node(self, name: str, *, repair_after_s: float = 60.0) -> None:
        """Make ``name`` fail now for ``repair_after_s`` real seconds (demo and tests)."""
        from scheduler.models import SimulatedNodeFault

        now = self._now()
        SimulatedNodeFault.objects.create(
            cluster_id=self.cluster_id,
            node_name=name,
            failed_at=now,
            repaired_at=now + timedelta(seconds=repair_after_s),
        )

    def _draw_random_failures(self, node_names: list[str]) -> None:
        rate = float(
            self.config.get(
                "failure_rate_per_node_hour", settings.SIMULATED_FAILURE_RATE_PER_NODE_HOUR
            )
        )
        if rate <= 0:
            return
        now = self._now()
        last = self._last_failure_check or now
        self._last_failure_check = now
        buckets = int((now - last).total_seconds() // FAILURE_CHECK_BUCKET_S)
        if buckets <= 0:
            return
        p = min(1.0, rate * self.scale * FAILURE_CHECK_BUCKET_S / 3600.0) * buckets
        bucket_id = int(now.timestamp() // FAILURE_CHECK_BUCKET_S)
        for name in node_names:
            digest = hashlib.sha256(f"{self.seed}/{name}/{bucket_id}".encode()).digest()
            if int.from_bytes(digest[:8], "big") / 2**64 < p:
                self.fail_node(name, repair_after_s=float(self.config.get("repair_s", 45)))

    def list_nodes(self) -> list[BackendNode]:
        from scheduler.models import Node, NodeState, SimulatedNodeFault

        now = self._now()
        nodes = list(Node.objects.filter(cluster_id=self.cluster_id).select_related("gpu_model"))
        self._draw_random_failures([n.name for n in nodes])
        down = set(
            SimulatedNodeFault.objects.filter(
                cluster_id=self.cluster_id, failed_at__lte=now, repaired_at__gt=now
            ).values_list("node_name", flat=True)
        )
        # Nobody but the platform drains a simulated node, so it holds drained exactly what the
        # platform holds, read from the database: every process (web, worker) agrees, where the
        # drain calls a process made (config["drained"]) are only that process's own.
        held = (NodeState.DRAINING, NodeState.QUARANTINED, NodeState.RETIRED)
        return [
            BackendNode(
                name=n.name,
                gpus=n.gpu_count,
                gpu_model=n.gpu_model.name,
                state="down" if n.name in down else ("drained" if n.state in held else "ready"),
                zone=n.zone,
                rack=n.rack,
                nvlink_domain=n.nvlink_domain,
                fabric=n.fabric,
                spot=n.spot,
            )
            for n in nodes
        ]

    def drain_node(self, name: str, reason: str) -> None:
        # Recorded for tests to see the call; list_nodes answers from the platform's state.
        drained = set(self.config.get("drained", []))
        drained.add(name)
        self.config["drained"] = sorted(drained)

    def undrain_node(self, name: str) -> None:
        self.config["drained"] = sorted(set(self.config.get("drained", [])) - {name})

    def gpu_utilization(
        self, placement_by_node: dict[str, list[int]]
    ) -> dict[str, dict[str, float]]:
        """Per-GPU utilization samples (0..1) for the given busy GPUs; idle GPUs read 0."""
        bucket = int(self._now().timestamp() // 5)
        samples: dict[str, dict[str, float]] = {}
        for node, indices in placement_by_node.items():
            rng = random.Random(f"{self.seed}/{node}/{bucket}")
            samples[node] = {str(i): round(0.55 + 0.45 * rng.random(), 3) for i in indices}
        return samples
