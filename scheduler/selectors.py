"""Reads of scheduler state a user can reach. Each starts from a team-scoped queryset.

(The scheduling loop's snapshot builder lives in ``scheduler.snapshot``.)
"""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from .errors import NotFound
from .models import Allocation, Job, JobEvent, Node


def job_list(*, user, filters: dict | None = None) -> QuerySet[Job]:
    """The caller's teams' jobs, newest first, with what list views show in a bounded number of
    queries."""
    qs = (
        Job.objects.visible_to(user)
        .select_related("team", "submitter", "gpu_model", "priority_class")
        .prefetch_related(
            Prefetch(
                "allocations",
                queryset=Allocation.objects.filter(ended_at__isnull=True).select_related("node"),
                to_attr="live_allocations",
            )
        )
    )
    filters = filters or {}
    if state := filters.get("state"):
        qs = qs.filter(state__in=state.split(","))
    if team := filters.get("team"):
        qs = qs.filter(team__slug=team)
    if submitter := filters.get("submitter"):
        qs = qs.filter(submitter__username=submitter)
    return qs


def job_get(*, user, job_id: int) -> Job:
    """One job of the caller's teams; another team's job (or none) is NotFound."""
    job = job_list(user=user).filter(pk=job_id).first()
    if job is None:
        raise NotFound("no such job", field="id")
    return job


def job_events(*, user, job_id: int) -> QuerySet[JobEvent]:
    job = job_get(user=user, job_id=job_id)
    return JobEvent.objects.filter(job=job).order_by("time", "id")


def job_placement(job: Job) -> dict[str, list[int]]:
    """Node name -> GPU indices of the job's live allocations (uses the prefetch when present)."""
    allocations = getattr(job, "live_allocations", None)
    if allocations is None:
        allocations = job.allocations.filter(ended_at__isnull=True).select_related("node")
    placement: dict[str, list[int]] = {}
    for allocation in allocations:
        placement.setdefault(allocation.node.name, []).append(allocation.gpu_index)
    for indices in placement.values():
        indices.sort()
    return placement


def node_list(*, user) -> QuerySet[Node]:
    """Nodes are visible to every signed-in user (the cluster is shared); their jobs are not."""
    if not user.is_authenticated:
        return Node.objects.none()
    return Node.objects.select_related("cluster", "gpu_model").order_by("cluster__name", "name")
