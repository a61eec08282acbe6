"""A trace's job, and where the shared traces live: what every trace loader (`traces`,
`history`) and the cluster specs (`cluster`) share, so that none of them imports another back."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

# the engine's own bound: a node the simulator replays is one the engine accepts
from scheduler.policy import MAX_NODE_GPUS as MAX_NODE_GPUS

T = TypeVar("T")

# Sizes and times a trace or cluster may state. Every one sizes the replay's work, so an
# absurd value (10^9 jobs, nodes or GPUs) ran out of memory or never finished; the limits are
# far above the largest public traces and clusters (the Alibaba and Microsoft traces hold under
# a million jobs over months on a few thousand nodes).
MAX_TRACE_JOBS = 10_000_000
# Ten years in seconds: the traces span weeks to months. NaN or infinity spun the replay forever.
MAX_TRACE_TIME_S = 10 * 366 * 24 * 3600.0

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


def csv_cell(
    path: object,
    lineno: int,
    row: Mapping[str, str | None],
    column: str,
    parse: Callable[[str], T],
    reason: str,
) -> T:
    """``parse(row[column])``, or ValueError naming the file, line and column: a column missing
    from the header or from a short row, or a value ``parse`` refuses (``reason`` says what it
    must be)."""
    value = row.get(column)
    if value is None:
        raise ValueError(f"{path}:{lineno}: column {column!r} is missing")
    try:
        return parse(value)
    except ValueError:
        raise ValueError(f"{path}:{lineno}: {column} {value!r}: {reason}") from None


def trace_time(value: str) -> float:
    """A time or duration of a trace: finite, at most MAX_TRACE_TIME_S either way."""
    number = float(value)
    if not math.isfinite(number) or abs(number) > MAX_TRACE_TIME_S:
        raise ValueError(value)
    return number


TRACE_TIME = "must be a finite number of seconds, at most 10 years"
