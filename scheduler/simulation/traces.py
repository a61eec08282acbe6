"""Trace loaders and a synthetic trace generator.

Every loader returns a tuple of `TraceJob`s sorted by `(submit, id)` with times shifted so nothing
is negative. The files are read from wherever they are (by default `../shared/traces` relative to
the repository root); nothing is copied or converted. Tenants are assigned deterministically from
`(seed, job id)` when the trace has none, so the same seed always gives the same labels.

Formats:
- `itp`: Microsoft ITP clusters (ElasticFlow), columns `job_id,submission_time,duration,num_gpu`.
- `openb`: Alibaba GPU v2023 "openb" pod lists. CPU-only pods and pods that were never scheduled
  (their service time is unknown) are skipped; runtime is `deletion_time - scheduled_time`; a
  fractional GPU request (`gpu_milli < 1000`) is treated as one whole GPU (no GPU sharing model);
  `gpu_spec` (`A|B`) becomes the set of allowed GPU models.
- `synthetic`: `generate_synthetic()`; no file.
- `gpuplatform`: the platform's own history (`manage.py export_trace`), JSON Lines with the
  cluster, teams and priority classes in its header; loaded by `history.load_history`.
"""

from __future__ import annotations

import csv
import hashlib
import math
import os
import random
from dataclasses import replace

from .history import load_history
from .trace_job import SIM_DEFAULT_CHECKPOINTS as SIM_DEFAULT_CHECKPOINTS
from .trace_job import TRACE_TIME, csv_cell, finish_trace, trace_time
from .trace_job import TraceJob as TraceJob
from .trace_job import default_traces_dir as default_traces_dir

DEFAULT_TENANTS = ("team-a", "team-b", "team-c", "team-d")
FORMATS = ("itp", "openb", "gpuplatform")


def assign_tenant(job_id: str, seed: int, tenants: tuple[str, ...] = DEFAULT_TENANTS) -> str:
    """A tenant picked from a stable hash of `(seed, job_id)`: deterministic across runs and
    Python processes (no reliance on `hash()` randomization)."""
    digest = hashlib.blake2b(f"{seed}:{job_id}".encode(), digest_size=8).digest()
    return tenants[int.from_bytes(digest, "big") % len(tenants)]


def detect_format(path: str | os.PathLike[str]) -> str:
    """The trace format from the first line: `itp` or `openb` (CSV headers) or `gpuplatform`
    (a JSON header naming it). Raises ValueError otherwise."""
    with open(path, newline="") as fh:
        first = fh.readline().strip()
    if first.startswith("{") and '"gpuplatform-trace"' in first:
        return "gpuplatform"
    header = first.split(",")
    if {"job_id", "submission_time", "duration", "num_gpu"} <= set(header):
        return "itp"
    if {"name", "num_gpu", "creation_time"} <= set(header):
        return "openb"
    raise ValueError(f"{path}: unknown trace format (header {header!r})")


def load_itp(
    path: str | os.PathLike[str],
    *,
    max_jobs: int | None = None,
    max_submit: float | None = None,
    seed: int = 0,
    tenants: tuple[str, ...] = DEFAULT_TENANTS,
) -> tuple[TraceJob, ...]:
    """Load a Microsoft ITP cluster CSV. `max_submit` keeps rows with `submission_time <=
    max_submit` (the benchmark window is 2246340 on cluster04); `max_jobs` keeps the first N
    after sorting. Rows with a non-positive duration or GPU count raise ValueError."""
    jobs: list[TraceJob] = []
    with open(path, newline="") as fh:
        for lineno, row in enumerate(csv.DictReader(fh), start=2):
            submit = csv_cell(path, lineno, row, "submission_time", trace_time, TRACE_TIME)
            if max_submit is not None and submit > max_submit:
                # the files are sorted by submission_time, so nothing later can qualify
                break
            if max_jobs is not None and len(jobs) >= max_jobs and submit > jobs[-1].submit:
                # the file is sorted: every later row sorts after the first max_jobs
                break
            duration = csv_cell(path, lineno, row, "duration", trace_time, TRACE_TIME)
            gpus = csv_cell(path, lineno, row, "num_gpu", int, "must be a whole number")
            job_id = csv_cell(path, lineno, row, "job_id", str, "")
            if duration <= 0 or gpus <= 0:
                raise ValueError(f"{path}:{lineno}: duration and num_gpu must be > 0")
            jobs.append(
                TraceJob(job_id, submit, duration, gpus, assign_tenant(job_id, seed, tenants))
            )
    return finish_trace(jobs, max_jobs)


def load_openb(
    path: str | os.PathLike[str],
    *,
    max_jobs: int | None = None,
    max_submit: float | None = None,
    seed: int = 0,
    tenants: tuple[str, ...] = DEFAULT_TENANTS,
) -> tuple[TraceJob, ...]:
    """Load an Alibaba openb pod list (a file with times: not the `multigpu*` lists, which have
    none). Skips CPU-only pods and never-scheduled pods; see the module docstring."""
    jobs: list[TraceJob] = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if "creation_time" not in (reader.fieldnames or ()):
            raise ValueError(f"{path}: this pod list has no timestamps; it cannot be replayed")
        for lineno, row in enumerate(reader, start=2):
            gpus = csv_cell(path, lineno, row, "num_gpu", int, "must be a whole number")
            # empty times: a pod never scheduled (skipped); missing ones: a short row (refused)
            scheduled = csv_cell(path, lineno, row, "scheduled_time", str, "")
            deleted = csv_cell(path, lineno, row, "deletion_time", str, "")
            if gpus <= 0 or not scheduled or not deleted:
                continue
            submit = csv_cell(path, lineno, row, "creation_time", trace_time, TRACE_TIME)
            if max_submit is not None and submit > max_submit:
                continue
            ended = csv_cell(path, lineno, row, "deletion_time", trace_time, TRACE_TIME)
            started = csv_cell(path, lineno, row, "scheduled_time", trace_time, TRACE_TIME)
            duration = max(1.0, ended - started)
            spec = (row.get("gpu_spec") or "").strip()
            models = tuple(sorted(m for m in spec.split("|") if m)) if spec else None
            name = csv_cell(path, lineno, row, "name", str, "")
            jobs.append(
                TraceJob(
                    name,
                    submit,
                    duration,
                    gpus,
                    assign_tenant(name, seed, tenants),
                    models,
                )
            )
    return finish_trace(jobs, max_jobs)


def load_trace(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    max_jobs: int | None = None,
    max_submit: float | None = None,
    seed: int = 0,
) -> tuple[TraceJob, ...]:
    """Load a trace in format `fmt` (detected from the header when None)."""
    fmt = fmt or detect_format(path)
    if fmt == "itp":
        return load_itp(path, max_jobs=max_jobs, max_submit=max_submit, seed=seed)
    if fmt == "openb":
        return load_openb(path, max_jobs=max_jobs, max_submit=max_submit, seed=seed)
    if fmt == "gpuplatform":
        return load_history(path, max_jobs=max_jobs, max_submit=max_submit).jobs
    raise ValueError(f"unknown trace format {fmt!r}; expected one of {FORMATS}")


def scale_arrivals(trace: tuple[TraceJob, ...], factor: float) -> tuple[TraceJob, ...]:
    """The same jobs with submission times multiplied by `factor` (relative to the first one):
    `factor < 1` compresses arrivals to raise the offered load (a labelled stress variant, not
    the trace as recorded). Durations and order are unchanged."""
    if factor <= 0:
        raise ValueError("arrival scale must be > 0")
    if not trace:
        return trace
    t0 = trace[0].submit
    return tuple(replace(j, submit=t0 + (j.submit - t0) * factor) for j in trace)


def generate_synthetic(
    n_jobs: int,
    *,
    seed: int = 0,
    mean_interarrival_s: float = 300.0,
    median_duration_s: float = 3600.0,
    duration_sigma: float = 1.5,
    gpu_choices: tuple[tuple[int, float], ...] = (
        (1, 0.7),
        (2, 0.05),
        (4, 0.08),
        (8, 0.12),
        (16, 0.05),
    ),
    tenants: tuple[str, ...] = DEFAULT_TENANTS,
) -> tuple[TraceJob, ...]:
    """A seeded synthetic trace: Poisson arrivals, log-normal durations (>= 60 s), GPU counts
    drawn from `gpu_choices` (count, weight). Same arguments, same trace."""
    rng = random.Random(seed)
    counts = [c for c, _ in gpu_choices]
    weights = [w for _, w in gpu_choices]
    t = 0.0
    jobs = []
    for i in range(n_jobs):
        t += rng.expovariate(1.0 / mean_interarrival_s)
        duration = max(60.0, round(median_duration_s * math.exp(rng.gauss(0.0, duration_sigma))))
        gpus = rng.choices(counts, weights)[0]
        job_id = f"syn-{i:06d}"
        jobs.append(
            TraceJob(job_id, round(t, 3), duration, gpus, tenants[rng.randrange(len(tenants))])
        )
    return tuple(jobs)


def with_deadlines(
    trace: tuple[TraceJob, ...],
    *,
    share: float,
    factors: tuple[float, float] = (1.5, 4.0),
    seed: int = 0,
) -> tuple[TraceJob, ...]:
    """The trace with a deadline on a `share` of its jobs (picked from a stable hash of
    `(seed, id)`): `submit + duration x f`, `f` uniform in `factors` from the same hash. No public
    trace records deadlines; this is how deadline-scheduling studies give them one (a multiple of
    the job's own run time, so every deadline is feasible on an idle cluster)."""
    lo, hi = factors
    out = []
    for j in trace:
        digest = hashlib.blake2b(f"deadline:{seed}:{j.id}".encode(), digest_size=16).digest()
        pick = int.from_bytes(digest[:8], "big") / 2**64
        if pick < share:
            f = lo + (hi - lo) * int.from_bytes(digest[8:], "big") / 2**64
            j = replace(j, deadline=j.submit + j.duration * f)
        out.append(j)
    return tuple(out)
