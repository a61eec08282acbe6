"""A trace's job, and where the shared traces live: what every trace loader (`traces`,
`history`) and the cluster specs (`cluster`) share, so that none of them imports another back."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

# TraceJob.checkpoint_interval_s when the trace does not say: the simulation's own setting
SIM_DEFAULT_CHECKPOINTS = -1.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: what was asked for and how long it ran exclusively (its service time)."""

    id: str
    submit: float
    duration: float
    gpus: int
    tenant: str
    models: tuple[str, ...] | None = None  # allowed GPU models; None = any
    priority_class: str = "research"
    # What a trace of the platform's own history knows about a job (others leave the defaults:
    # the simulator splits GPUs into workers by node size and applies its own job model).
    gpus_per_worker: int | None = None
    preemptible: bool | None = None  # None: SimConfig.preemptible
    checkpoint_interval_s: float | None = SIM_DEFAULT_CHECKPOINTS  # None: never checkpoints
    runtime_limit_s: float | None = None  # the user's limit: a real scheduler knows it
    deadline: float | None = None  # when the user needs it finished (same clock as submit)
    # Who asked and what it is: the run-time model learns from them. Only the platform's own
    # history has them; no public trace here records a user, a job name or an image.
    user: str = ""
    name: str = ""
    image: str = ""


def default_traces_dir() -> Path:
    """`../shared/traces` relative to the repository root (the checkout holding `scheduler/`)."""
    repo_root = Path(__file__).resolve().parents[2]
    return repo_root.parent / "shared" / "traces"


def finish_trace(jobs: list[TraceJob], max_jobs: int | None) -> tuple[TraceJob, ...]:
    """Sorted by `(submit, id)`, cut to `max_jobs`, shifted so no submission time is negative:
    what every loader returns."""
    jobs.sort(key=lambda j: (j.submit, j.id))
    if max_jobs is not None:
        jobs = jobs[:max_jobs]
    if jobs and jobs[0].submit < 0:
        shift = -jobs[0].submit
        jobs = [replace(j, submit=j.submit + shift) for j in jobs]
    return tuple(jobs)
