"""The one interface every cluster backend implements (simulated, Slurm, Kubernetes).

The scheduling loop decides *where* a job runs; a backend only executes that decision on a real
(or simulated) cluster and reports back what it sees. Guarantees every implementation keeps:

- Idempotent by our identity: ``submit`` of a spec whose ``(job_id, attempt)`` the backend already
  knows returns the existing reference instead of starting a second copy; ``cancel``,
  ``checkpoint``, ``drain_node`` and ``undrain_node`` of something already in the asked-for state
  succeed quietly ("already done" is success).
- Typed failures: a transient outage raises :class:`BackendUnavailable` (callers retry with
  backoff, jobs keep their state); a request the cluster refuses raises :class:`BackendRejected`.
- No shell strings: commands and requests are built from argument lists / structured objects.
- A run is never restarted by the cluster itself: the platform owns requeueing (a new attempt,
  from the checkpoint). ``live_runs`` lists what the cluster may still run, so the sync cancels
  any run of an attempt the platform has moved past or of a job that is over.
- Every worker gets the variables distributed-training launchers read (:func:`launcher_env`):
  the same names and meanings on every backend.
- ``read_log`` pages through a run's output by an opaque cursor: a tail when none is given,
  then exactly the text written since, never a line twice.
- A run is named to ``poll_jobs``, ``read_log``, ``cancel`` and ``checkpoint`` by a
  :class:`RunRef`: which attempt of which job, and whose (the team ``submit`` ran it for). A
  backend where other teams could make a job of the same name (Slurm with ``team_accounts``)
  takes for the run only a job of that team's; the others may ignore the team. The account a
  run was submitted as (``team_account``) is recorded with it and named in every later
  :class:`RunRef`, so a team mapped to another account keeps its runs in sight. A run recorded
  without one (submitted before the platform recorded accounts) learns it from the cluster
  (``run_owners``: the owner of the backend's job of the run's reference) at the next sync.

This module is plain Python (no Django) so backends and their parsers are testable on their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable


class BackendError(Exception):
    """Base of every error a backend raises."""


class BackendUnavailable(BackendError):
    """The cluster cannot be reached right now; the same call may succeed later."""


class BackendRejected(BackendError):
    """The cluster refused the request; retrying the same call will not help."""


class BackendJobState(StrEnum):
    PENDING = "pending"  # accepted by the backend, not yet running
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NODE_FAILED = "node_failed"  # stopped because a node it ran on died
    # Stopped by the cluster's own scheduler (Slurm preemption), not by the job or the platform:
    # the platform requeues the job from its checkpoint.
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"  # the backend has no record of it


TERMINAL_BACKEND_STATES = frozenset(
    {
        BackendJobState.SUCCEEDED,
        BackendJobState.FAILED,
        BackendJobState.CANCELLED,
        BackendJobState.NODE_FAILED,
        BackendJobState.INTERRUPTED,
    }
)


def backend_job_name(job_id: str, attempt: int) -> str:
    """The name every backend gives a job run, so a run can be found again by our identity."""
    return f"gp-{job_id}-a{attempt}"


_RUN_NAME = re.compile(r"^gp-(?P<job_id>.+)-a(?P<attempt>[0-9]+)$")


def parse_backend_job_name(name: str) -> tuple[str, int] | None:
    """``(job_id, attempt)`` from a run name made by :func:`backend_job_name`; None for any other
    name (someone else's job on a shared cluster)."""
    match = _RUN_NAME.match(name)
    if match is None:
        return None
    return match["job_id"], int(match["attempt"])


@dataclass(frozen=True, slots=True)
class BackendJobSpec:
    """What to run and exactly where: one worker per placement entry, in placement order."""

    job_id: str
    attempt: int
    name: str
    team: str
    image: str
    command: str
    workers: int
    gpus_per_worker: int
    placement: Mapping[str, tuple[int, ...]]
    env: Mapping[str, str] = field(default_factory=dict)
    runtime_limit_s: int | None = None
    # Seconds a run has, once asked to stop, to write its final checkpoint (the policy's
    # preemption grace): Kubernetes' termination grace, Slurm's time-limit warning.
    checkpoint_grace_s: int = 120
    # Simulated backend only: how long the work takes when run exclusively, and how much of it
    # was done before this attempt (resumed from a checkpoint).
    service_time_s: float | None = None
    resume_from_s: float = 0.0

    @property
    def backend_name(self) -> str:
        return backend_job_name(self.job_id, self.attempt)


@dataclass(frozen=True, slots=True)
class RunRef:
    """One run as the platform names it to its backend: attempt ``attempt`` of job ``job_id``
    (``backend_run_id``), submitted for team ``team`` (its slug, as ``BackendJobSpec.team``).
    The team travels with the run so a backend never has to guess whose a job of the run's name
    is."""

    job_id: str
    attempt: int
    team: str
    # The identity the backend ran it as, as ``Backend.team_account`` named it at submit (Slurm
    # with ``team_accounts``: the team's Unix account then); "" when none was recorded (the
    # backend's own identity, or a run submitted before accounts were recorded), and the backend
    # then judges by the team. Recorded so that mapping a team to another account later changes
    # only the team's new runs.
    account: str = ""

    @property
    def backend_name(self) -> str:
        return backend_job_name(self.job_id, self.attempt)


@dataclass(frozen=True, slots=True, order=True)
class LiveRun:
    """A run the cluster may still run (``Backend.live_runs``): attempt ``attempt`` of job
    ``job_id``, and the account that owns it where a cluster runs teams' work as accounts of
    their own (Slurm with ``team_accounts``); "" for the backend's own identity."""

    job_id: str
    attempt: int
    account: str = ""


@dataclass(frozen=True, slots=True)
class BackendJobStatus:
    job_id: str
    attempt: int
    state: BackendJobState
    backend_ref: str = ""
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    # Why it ended, or, for a PENDING run, why the cluster keeps it waiting (Slurm's pending
    # reason: "ReqNodeNotAvail, Reserved for maintenance", "QOSMaxGRESPerUser").
    reason: str = ""
    # Seconds of work safely checkpointed in this attempt, when the backend knows it.
    checkpointed_progress_s: float | None = None
    # A RUNNING run: when the cluster started it (epoch seconds), when the backend knows it; the
    # platform bills a run it saw waiting from here, not from when it placed it.
    started_at: float | None = None
    # A PENDING run: the cluster's reason is about the nodes the run was placed on (a
    # reservation, an unavailable node, nodes busy with the cluster's other work), so the
    # platform's next placement avoids them; False for a reason about the job or its account
    # (a QOS or association limit), which another placement would not change.
    pending_on_nodes: bool = False
    # A PENDING run that the cluster's own scheduler keeps from starting (Slurm: every pending
    # run), which the platform gives up on after a grace. False where pending means starting
    # (Kubernetes: the platform binds the pods itself; a pod pulling its image is on its way).
    held_by_cluster: bool = False


@dataclass(frozen=True, slots=True)
class BackendNode:
    name: str
    gpus: int
    gpu_model: str = ""
    state: str = "ready"  # ready | draining | drained | down
    reason: str = ""
    # An active reservation of the cluster's own that keeps the platform's runs off the node
    # ("maint until 2026-12-05T13:52:05"); blank when there is none.
    reserved: str = ""
    zone: str = ""
    rack: str = ""
    nvlink_domain: str = ""
    fabric: str = ""
    spot: bool = False


@runtime_checkable
class Backend(Protocol):
    """A cluster the platform drives. See the module docstring for the guarantees."""

    kind: str

    def submit(self, spec: BackendJobSpec) -> str:
        """Start ``spec`` on exactly its placement; return the backend's reference."""
        ...

    def cancel(self, run: RunRef) -> None:
        """Stop the run now. Unknown or finished runs are not an error."""
        ...

    def checkpoint(self, run: RunRef) -> None:
        """Ask the run to write a checkpoint (a signal); it keeps running."""
        ...

    def drain_node(self, name: str, reason: str) -> None:
        """Stop new work landing on ``name`` (quarantine); running work may finish."""
        ...

    def undrain_node(self, name: str) -> None:
        """Return ``name`` to service."""
        ...

    def list_nodes(self) -> list[BackendNode]:
        """The cluster's nodes as the backend sees them now."""
        ...

    def poll_jobs(self, runs: Iterable[RunRef]) -> list[BackendJobStatus]:
        """States of the given runs (each status names its run by ``(job_id, attempt)``);
        unknown runs come back UNKNOWN. A run
        the backend finds in a state it cannot interpret (a newer cluster's) is left out: no
        news, so the loop changes nothing about it."""
        ...

    def read_log(
        self, run: RunRef, *, cursor: str | None = None, limit_bytes: int = 65536
    ) -> LogChunk:
        """Output of the run: without ``cursor`` its last ``limit_bytes`` (whole lines), else
        what follows ``cursor``, at most ``limit_bytes``. No output yet is an empty chunk."""
        ...

    def live_runs(self, job_id_prefix: str, accounts: Iterable[str] = ()) -> list[LiveRun]:
        """Every run whose job id starts with ``job_id_prefix`` that the cluster may still run:
        pending, running, or queued to run again, each with the account that owns it; runs of
        ``accounts`` too (accounts the platform recorded runs as, which the backend's settings
        may no longer name; read lazily, so a backend whose runs are all its own leaves it
        unread). Finished runs (and runs already being stopped) are left out. The
        platform cancels the ones it no longer wants (``scheduler.loop.stale_runs``), so a run
        it gave up on never keeps GPUs; it judges a run owned by a team's account only as that
        team's."""
        ...

    def team_account(self, team: str) -> str:
        """The account ``team``'s new runs are submitted as ("" : the backend's own identity).
        The platform records it with each run it submits (``RunRef.account``)."""
        ...

    def run_owners(self, runs: Mapping[str, RunRef]) -> dict[str, str]:
        """The account that owns each of ``runs`` (the backend's reference, as ``submit``
        returned it -> the run) as the cluster itself reports it ("" : the backend's own
        identity), for runs the platform recorded no account for (submitted before it recorded
        them). Runs the cluster no longer knows are left out; a backend that runs everything as
        itself answers "" for every run without asking its cluster, so each is recorded once."""
        ...


# ---------------------------------------------------------------------------------------------
# Logs


@dataclass(frozen=True, slots=True)
class LogChunk:
    """A piece of a run's output. ``cursor`` (opaque) continues right after ``text``;
    ``truncated`` says text before this chunk was skipped (a tail, or a reader that fell behind
    by more than one chunk).

    ``break_at`` and ``break_cursor`` are for a reader that must not show a line in two pieces
    (the log as a team's viewer sees it: a secret split by two reads would escape its mask). Set
    when ``text`` does not end on a line end (``\n`` or ``\r``): ``text[:break_at]`` ends on
    its last line end (``break_at`` 0: ``text`` is one unfinished line) and ``break_cursor``
    continues from there. In a line longer than the read allows, ``text`` ends where the read
    did and ``break_at`` after its last blank (space or tab), so no word is cut; None when it
    has none. ``at_limit``: the read stopped at its limit, so more output follows ``text``
    already. A backend whose reads always end on a line end (Kubernetes) leaves these unset."""

    text: str
    cursor: str
    truncated: bool = False
    break_at: int | None = None
    break_cursor: str | None = None
    at_limit: bool = False


def byte_window(size: int | None, cursor: str | None, limit: int) -> tuple[int, bool]:
    """``(start, truncated)``: where to read the next at most ``limit`` bytes of an output of
    ``size`` bytes (None: unknown) that only grows. A tail starts ``limit`` bytes before the end;
    a cursor is a byte offset (anything else is refused with ValueError)."""
    if cursor is None:
        start = max(0, (size or 0) - limit)
        return start, start > 0
    if not cursor.isdigit() or len(cursor) > 18:
        raise ValueError(f"not a log cursor: {cursor[:40]!r}")
    return int(cursor), False


def byte_chunk(data: bytes, start: int, *, limit: int, tail: bool, truncated: bool) -> LogChunk:
    """The chunk of the output bytes ``data`` read at offset ``start``: a tail drops its partial
    first line; a full read stops after its last newline (or, in one enormous line, before a
    split UTF-8 character), so the next read starts on a boundary."""
    begin, end = 0, len(data)
    if tail and start > 0:
        newline = data.find(b"\n")
        begin = newline + 1 if newline >= 0 else end
    if len(data) >= limit and not tail:
        newline = data.rfind(b"\n")
        if newline >= 0:
            end = newline + 1
        else:
            while end > 0 and (data[end - 1] & 0xC0) == 0x80:
                end -= 1
            if end > 0 and data[end - 1] >= 0xC0:
                end -= 1
            end = end or len(data)
    text = data[begin:end].decode("utf-8", errors="replace")
    full = len(data) >= limit and not tail
    at = _break_in(data, begin, end, full=full)
    if at is None:
        return LogChunk(text=text, cursor=str(start + end), truncated=truncated, at_limit=full)
    # The line ends and blanks are ASCII, so decoding the bytes before one gives exactly the
    # characters of ``text`` before it (an undecodable byte never swallows one).
    return LogChunk(
        text=text,
        cursor=str(start + end),
        truncated=truncated,
        break_at=len(data[begin:at].decode("utf-8", errors="replace")),
        break_cursor=str(start + at),
        at_limit=full,
    )


_LINE_ENDS = (b"\n", b"\r")


def _break_in(data: bytes, begin: int, end: int, *, full: bool) -> int | None:
    """The offset in ``data`` of :class:`LogChunk`'s break for the text ``data[begin:end]``
    (None: no break). ``full``: the read stopped at its limit, more may follow."""
    if begin >= end or data[end - 1 : end] in _LINE_ENDS:
        return None
    last_end = max(data.rfind(b"\n", begin, end), data.rfind(b"\r", begin, end))
    if last_end >= 0:
        return last_end + 1
    if not full:
        return begin  # one unfinished line: wait for its end
    # A line longer than the read: break after its last blank, so no word (no token, no
    # value without blanks) is cut; a line without blanks is cut where the read stopped.
    blank = max(data.rfind(b" ", begin, end), data.rfind(b"\t", begin, end))
    return blank + 1 if blank >= begin else None


def log_tail(backend: Backend, run: RunRef, lines: int = 100) -> str:
    """The last ``lines`` lines of a run's output ("" when there is none)."""
    if lines <= 0:
        return ""
    chunk = backend.read_log(run, cursor=None, limit_bytes=min(lines * 512, 1 << 20))
    return "\n".join(chunk.text.splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------
# The distributed-training environment

DEFAULT_MASTER_PORT = 29500


def identity_env(spec: BackendJobSpec) -> dict[str, str]:
    """The platform's own variables of a run, the same on every backend (each adds its own
    checkpoint plumbing): which job and attempt, and where a resumed attempt starts."""
    return {
        "GPUPLATFORM_JOB_ID": spec.job_id,
        "GPUPLATFORM_ATTEMPT": str(spec.attempt),
        "GPUPLATFORM_JOB_NAME": spec.name,
        "GPUPLATFORM_TEAM": spec.team,
        "GPUPLATFORM_IMAGE": spec.image,
        "GPUPLATFORM_GPUS_PER_WORKER": str(spec.gpus_per_worker),
        "GPUPLATFORM_CHECKPOINT_GRACE_S": str(spec.checkpoint_grace_s),
        # Seconds of work already saved by earlier attempts: where a resumed run starts.
        "GPUPLATFORM_RESUME_FROM_S": f"{spec.resume_from_s:g}",
    }


def launcher_env(
    *,
    workers: int,
    worker: int,
    local_worker: int,
    workers_on_node: int,
    gpus_per_worker: int,
    master_addr: str,
    master_port: int,
) -> dict[str, str]:
    """What torchrun, Lightning, Accelerate and DeepSpeed read, for worker ``worker``.

    A worker is one launcher instance (a torchrun agent, a Lightning trainer): it is that
    launcher's "node", so ``NODE_RANK`` / ``PET_NODE_RANK`` are the worker's index and
    ``PET_NNODES`` the number of workers, and ``RANK`` / ``WORLD_SIZE`` are those of the
    workers, as Kubeflow's PyTorchJob sets them. ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` (the
    worker among the workers of its node) are set only for one-GPU workers: a multi-GPU worker's
    launcher sets them for the processes it starts, and Lightning would read a preset
    ``LOCAL_RANK`` as "launched by someone else" and start no processes. ``master_addr`` must be
    reachable from every worker (an address, not a name that may not resolve). The platform's own
    copies are ``GPUPLATFORM_*``.
    """
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(workers),
        "RANK": str(worker),
        "NODE_RANK": str(worker),
        "PET_NNODES": str(workers),
        "PET_NODE_RANK": str(worker),
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(master_port),
        "GPUPLATFORM_WORKER": str(worker),
        "GPUPLATFORM_WORKERS": str(workers),
        "GPUPLATFORM_LOCAL_WORKER": str(local_worker),
        "GPUPLATFORM_WORKERS_ON_NODE": str(workers_on_node),
        "GPUPLATFORM_MASTER_ADDR": master_addr,
        "GPUPLATFORM_MASTER_PORT": str(master_port),
    }
    if gpus_per_worker == 1:
        env["LOCAL_RANK"] = str(local_worker)
        env["LOCAL_WORLD_SIZE"] = str(workers_on_node)
    return env


def worker_slots(spec: BackendJobSpec) -> list[tuple[str, tuple[int, ...]]]:
    """``(node, gpu indices)`` of each worker, worker 0 first.

    One worker per placement entry when there are as many entries as workers. When the engine
    packed several workers on one node (fewer entries than workers), each node's GPUs are split,
    in order, into groups of ``gpus_per_worker``. Anything else cannot be run as asked:
    ``ValueError``.
    """
    entries = [(node, tuple(gpus)) for node, gpus in spec.placement.items()]
    if len(entries) == spec.workers:
        return entries
    per = spec.gpus_per_worker
    if per > 0 and all(len(g) % per == 0 for _, g in entries):
        slots = [(node, g[i : i + per]) for node, g in entries for i in range(0, len(g), per)]
        if len(slots) == spec.workers:
            return slots
    raise ValueError(
        f"placement {dict(entries)} does not give {spec.workers} workers of "
        f"{spec.gpus_per_worker} GPUs"
    )


def worker_envs(
    spec: BackendJobSpec, *, master_addr: str, master_port: int
) -> list[dict[str, str]]:
    """:func:`launcher_env` of every worker of ``spec`` (worker 0 first), placed as
    :func:`worker_slots` places them."""
    slots = worker_slots(spec)
    on_node: dict[str, int] = {}
    for node, _ in slots:
        on_node[node] = on_node.get(node, 0) + 1
    seen: dict[str, int] = {}
    envs = []
    for worker, (node, _) in enumerate(slots):
        local = seen.get(node, 0)
        seen[node] = local + 1
        envs.append(
            launcher_env(
                workers=spec.workers,
                worker=worker,
                local_worker=local,
                workers_on_node=on_node[node],
                gpus_per_worker=spec.gpus_per_worker,
                master_addr=master_addr,
                master_port=master_port,
            )
        )
    return envs
