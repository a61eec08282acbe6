"""Run-time predictions for the loop and the submit form, learned from the platform's finished jobs.

One ``RuntimeModel`` (``scheduler.prediction``) per process, trained incrementally: the first use
learns the most recent ``HISTORY_JOBS`` succeeded jobs, every later use learns only the jobs that
finished since (one query, ordered by ``(finished_at, id)``, so each job is learned once). A
process that restarts relearns from the database; two processes learn the same jobs in the same
order and so predict the same. Only succeeded jobs teach: a failed or cancelled run says nothing
about how long the work takes.

A job's run seconds are its last attempt's plus ``earlier_runs_s`` (what earlier attempts ran).

Every team's history teaches one model, but teams share only what identifies no job (shapes, GPU
models, classes; ``scheduler.prediction.runtime``): its predictions show in estimates, estimated
starts and deadline warnings.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Q

from scheduler.prediction import JobDescription, RuntimeModel

from .models import Job
from .states import JobState

HISTORY_JOBS = 20_000
_DESCRIPTION_FIELDS = (
    "team__slug",
    "submitter__username",
    "name",
    "image",
    "workers",
    "gpus_per_worker",
    "gpu_model__name",
    "priority_class__name",
)


def describe(row: dict[str, Any]) -> JobDescription:
    """A job's description from a ``values()`` row with ``_DESCRIPTION_FIELDS``."""
    return JobDescription(
        team=row["team__slug"],
        user=row["submitter__username"] or "",
        name=row["name"] or "",
        image=row["image"] or "",
        workers=row["workers"],
        gpus_per_worker=row["gpus_per_worker"],
        gpu_model=row["gpu_model__name"],
        priority_class=row["priority_class__name"] or "",
    )


def describe_job(job: Job) -> JobDescription:
    """A job's description from a model instance (the submit form's unsaved job too)."""
    gpu_model = job.gpu_model if job.gpu_model_id else None
    return JobDescription(
        team=job.team.slug,
        user=job.submitter.get_username() if job.submitter_id else "",
        name=job.name,
        image=job.image,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        gpu_model=gpu_model.name if gpu_model is not None else None,
        priority_class=job.priority_class.name if job.priority_class_id else "",
    )


def finished_history(
    after: tuple[datetime, int] | None = None, *, limit: int = HISTORY_JOBS
) -> list[tuple[tuple[datetime, int], JobDescription, float]]:
    """Succeeded jobs as ``((finished_at, id), description, run seconds)``, oldest first: those
    finished after ``after``, or the most recent ``limit`` when ``after`` is None. One query."""
    qs = Job.objects.filter(
        state=JobState.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False
    )
    if after is not None:
        at, pk = after
        qs = qs.filter(Q(finished_at__gt=at) | Q(finished_at=at, id__gt=pk)).order_by(
            "finished_at", "id"
        )
    else:
        qs = qs.order_by("-finished_at", "-id")
    rows = list(
        qs.values("id", "started_at", "finished_at", "earlier_runs_s", *_DESCRIPTION_FIELDS)[:limit]
    )
    if after is None:
        rows.reverse()
    out = []
    for row in rows:
        run_s = (row["finished_at"] - row["started_at"]).total_seconds() + row["earlier_runs_s"]
        if run_s > 0:
            out.append(((row["finished_at"], row["id"]), describe(row), run_s))
    return out


class _Learner:
    """The process's model and how far through the history it has learned."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.model = RuntimeModel()
        self.watermark: tuple[datetime, int] | None = None

    def refresh(self) -> RuntimeModel:
        with self.lock:
            rows = finished_history(self.watermark)
            if rows:
                self.model.learn([d for _, d, _ in rows], [r for _, _, r in rows])
                self.watermark = rows[-1][0]
            return self.model


# Made at the first prediction, not at import: scikit-learn takes ~2 s to import, and every
# manage.py command and web worker imports this module through the loop without predicting.
_learner: _Learner | None = None
_learner_lock = threading.Lock()


def reset() -> None:
    """Forget everything learned (tests that rebuild the database between cases)."""
    global _learner
    _learner = None


def predict_runtime_s(
    jobs: Sequence[JobDescription] | Iterable[JobDescription],
) -> list[float | None]:
    """Predicted run seconds per job (None while too little history), after learning the jobs
    finished since the last call."""
    global _learner
    with _learner_lock:
        if _learner is None:
            _learner = _Learner()
        learner = _learner
    return learner.refresh().predict_s(jobs)
