"""When would a job finish if it were submitted now: the submit form's feasibility estimate.

``job_feasibility`` validates the request as ``job_submit`` does (same errors, same 400s), then
asks the engine about the cluster as it is: the current snapshot plus the candidate job, one
``decide`` call, nothing written and nothing applied. The engine either starts the candidate
(it would start now) or gives its reserved start; the finish adds the run time the engine plans
with (the user's limit, else the history's prediction, else the engine's default). Without a
reservation (the engine plans only its first few blocked jobs per GPU model) the start is
unknown and so is the finish; so is a start or finish past ``LATEST_ESTIMATE``.

Cost: one snapshot and one engine call, the cost of a scheduling cycle without its writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from django.contrib.auth.models import User

from scheduler.policy import PendingJob, decide, routing_from_dict

from .models import Dataset
from .runtime_prediction import predict_runtime_s
from .services import JobRequest, _validate_request
from .snapshot import build_snapshot

CANDIDATE_ID = "feasibility-candidate"
# Estimates past this are unknown, as the loop shows a pending job's (loop/apply.py): a policy
# may set any finite default run time or preemption grace, and datetime ends in the year 9999.
LATEST_ESTIMATE = datetime(9000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Feasibility:
    start: datetime | None  # None: no start estimate at current load
    starts_now: bool
    finish: datetime | None
    runtime_s: float
    runtime_source: str  # "your runtime limit", "similar past jobs", "the default"
    deadline: datetime | None
    meets_deadline: bool | None  # None: no deadline, or no estimate


def job_feasibility(*, user: User, request: JobRequest, now: datetime) -> Feasibility:
    """The estimate for ``request`` as ``user`` would submit it at ``now``. Raises the same
    ``FieldErrors`` as ``job_submit`` for a bad request; writes nothing."""
    from scheduler.prediction import JobDescription

    team, gpu_model, priority = _validate_request(request, user=user)
    snapshot, _ = build_snapshot(now=now)
    if request.runtime_limit_s:
        runtime_s, source = float(request.runtime_limit_s), "your runtime limit"
    else:
        (predicted,) = predict_runtime_s(
            [
                JobDescription(
                    team=team.slug,
                    user=user.get_username(),
                    name=request.name,
                    image=request.image,
                    workers=request.workers,
                    gpus_per_worker=request.gpus_per_worker,
                    gpu_model=gpu_model.name if gpu_model else None,
                    priority_class=priority.name,
                )
            ]
        )
        if predicted is not None:
            runtime_s, source = predicted, "similar past jobs"
        else:
            runtime_s, source = snapshot.config.default_runtime_s, "the default"
    candidate = PendingJob(
        id=CANDIDATE_ID,
        team=team.slug,
        priority_class=priority.name,
        gpu_model=gpu_model.name if gpu_model else None,
        workers=request.workers,
        gpus_per_worker=request.gpus_per_worker,
        submitted_at=now.timestamp(),
        runtime_estimate_s=runtime_s,
        preemptible=(
            priority.preemptible_by_default if request.preemptible is None else request.preemptible
        ),
        deadline=request.deadline.timestamp() if request.deadline else None,
        dataset=request.dataset or None,
    )
    if snapshot.clusters:
        # Routed: the estimate honours where the job may run, as the cycle would.
        size_gb = Dataset.objects.filter(name=request.dataset).values_list("size_gb", flat=True)
        candidate = replace(
            candidate,
            routing=routing_from_dict(request.routing),
            dataset_size_gb=next(iter(size_gb), None) if request.dataset else None,
        )
    decisions = decide(replace(snapshot, pending=(*snapshot.pending, candidate)))
    start: datetime | None = None
    if any(s.job == CANDIDATE_ID for s in decisions.start):
        start = now
    else:
        at = next((p.estimated_start for p in decisions.pending if p.job == CANDIDATE_ID), None)
        if at is not None and at < LATEST_ESTIMATE.timestamp():
            start = datetime.fromtimestamp(at, now.tzinfo)
    finish = None
    if start is not None and start.timestamp() + runtime_s < LATEST_ESTIMATE.timestamp():
        finish = start + timedelta(seconds=runtime_s)
    meets = None
    if request.deadline is not None and finish is not None:
        meets = finish <= request.deadline
    return Feasibility(
        start=start,
        starts_now=start == now,
        finish=finish,
        runtime_s=runtime_s,
        runtime_source=source,
        deadline=request.deadline,
        meets_deadline=meets,
    )
