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
    UNKNOWN = "unknown"  # the backend has no record of it


TERMINAL_BACKEND_STATES = frozenset(
    {
        BackendJobState.SUCCEEDED,
        BackendJobState.FAILED,
        BackendJobState.CANCELLED,
        BackendJobState.NODE_FAILED,
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
    checkpoint_grace_s: int = 120
    # Simulated backend only: how long the work takes when run exclusively, and how much of it
    # was done before this attempt (resumed from a checkpoint).
    service_time_s: float | None = None
    resume_from_s: float = 0.0

    @property
    def backend_name(self) -> str:
        return backend_job_name(self.job_id, self.attempt)


@dataclass(frozen=True, slots=True)
class BackendJobStatus:
    job_id: str
    attempt: int
    state: BackendJobState
    backend_ref: str = ""
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    reason: str = ""
    # Seconds of work safely checkpointed in this attempt, when the backend knows it.
    checkpointed_progress_s: float | None = None


@dataclass(frozen=True, slots=True)
class BackendNode:
    name: str
    gpus: int
    gpu_model: str = ""
    state: str = "ready"  # ready | draining | drained | down
    reason: str = ""
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

    def cancel(self, job_id: str, attempt: int) -> None:
        """Stop the run now. Unknown or finished runs are not an error."""
        ...

    def checkpoint(self, job_id: str, attempt: int) -> None:
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

    def poll_jobs(self, runs: Iterable[tuple[str, int]]) -> list[BackendJobStatus]:
        """States of the given ``(job_id, attempt)`` runs; unknown runs come back UNKNOWN."""
        ...

    def log_tail(self, job_id: str, attempt: int, lines: int = 100) -> str:
        """The last ``lines`` lines of the run's output, or "" when there is none."""
        ...

    def live_runs(self, job_id_prefix: str) -> list[tuple[str, int]]:
        """``(job_id, attempt)`` of every run whose job id starts with ``job_id_prefix`` that the
        cluster may still run: pending, running, or queued to run again. Finished runs (and runs
        already being stopped) are left out. The platform cancels the ones it no longer wants
        (``scheduler.backends.stale_runs``), so a run it gave up on never keeps GPUs."""
        ...
