"""Writes to jobs: submission, cancellation and the state transitions the loop applies.

Every function here is keyword-only, atomic, and moves a job with a conditional UPDATE guarded by
the state machine (``scheduler.states``), so two workers racing on the same job cannot both win.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from tenants.models import SUBMIT_ROLES, PriorityClass, Team
from tenants.permissions import can_submit_to, is_platform_admin, submission_target

from . import reference, streams
from .errors import Conflict, DomainError, FieldErrors, Forbidden, NotFound
from .models import Allocation, GpuModel, Job, JobEvent, Node
from .states import IllegalTransition, JobState, check_transition, sources_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobRequest:
    """A validated-shape submission (types checked by the caller; domain rules checked here)."""

    name: str
    team: str
    workers: int
    gpus_per_worker: int
    image: str = ""
    command: str = ""
    env: dict[str, str] | None = None
    gpu_model: str | None = None
    priority_class: str | None = None
    preemptible: bool | None = None
    checkpoint_interval_s: int | None = None
    runtime_limit_s: int | None = None
    dataset: str = ""
    elastic: dict[str, int] | None = None
    simulated_duration_s: float | None = None


def event_record(
    *,
    job: Job,
    kind: str,
    message: str = "",
    data: dict | None = None,
    time: datetime | None = None,
) -> JobEvent:
    """Append an event to the job's timeline."""
    return JobEvent.objects.create(
        job=job, kind=kind, message=message, data=data or {}, time=time or timezone.now()
    )


def job_payload(job: Job, placement: dict[str, list[int]] | None = None) -> dict[str, Any]:
    return {
        "type": "job.status",
        "job": job.pk,
        "team": job.team.slug,
        "name": job.name,
        "state": job.state,
        "why": job.why_pending,
        "estimated_start": job.estimated_start.isoformat() if job.estimated_start else None,
        "placement": placement or {},
        "time": timezone.now().isoformat(),
    }


def publish_job(job: Job, placement: dict[str, list[int]] | None = None) -> None:
    streams.publish(streams.team_group(job.team_id), job_payload(job, placement))


def _validate_request(
    req: JobRequest, *, user, target: tuple[str, Team | None, str | None] | None = None
) -> tuple[Team, GpuModel | None, PriorityClass]:
    """``target``: ``(slug, team, role)`` as ``submission_target`` answered it earlier in the same
    request (the team rate limit looks it up first); used only when the slug is the request's."""
    errors: dict[str, list[str]] = {}

    def err(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if target is not None and target[0] == req.team:
        team, role = target[1], target[2]
    else:
        team, role = submission_target(user, req.team)
    if team is None:
        # Not telling apart "no such team" from "not yours" keeps other teams' names private.
        err("team", f"you are not a member of a team '{req.team}'")
    elif not (is_platform_admin(user) or role in SUBMIT_ROLES):
        err("team", "viewers cannot submit jobs to this team")

    if req.workers < 1:
        err("workers", "must be >= 1")
    if req.gpus_per_worker < 1:
        err("gpus_per_worker", "must be >= 1")

    gpu_model = None
    if req.gpu_model:
        gpu_model = reference.gpu_model_named(req.gpu_model)
        if gpu_model is None:
            known = ", ".join(GpuModel.objects.values_list("name", flat=True)) or "none"
            err("gpu_model", f"unknown GPU model '{req.gpu_model}' (known: {known})")

    if req.priority_class:
        priority = reference.priority_class_named(req.priority_class)
        if priority is None:
            known = ", ".join(PriorityClass.objects.values_list("name", flat=True)) or "none"
            err("priority_class", f"unknown priority class '{req.priority_class}' (known: {known})")
    else:
        priority = reference.default_priority_class()
        if priority is None:
            err("priority_class", "no priority class is configured on this platform")

    if req.gpus_per_worker >= 1 and "gpu_model" not in errors:
        largest = reference.largest_node_gpus(gpu_model)
        if req.gpus_per_worker > largest:
            largest = reference.largest_node_gpus(gpu_model, fresh=True)
        if req.gpus_per_worker > largest:
            where = f"a {gpu_model.name} node" if gpu_model else "any node"
            err(
                "gpus_per_worker",
                f"{req.gpus_per_worker} GPUs per worker is more than {where} has ({largest})",
            )

    for field in ("checkpoint_interval_s", "runtime_limit_s"):
        value = getattr(req, field)
        if value is not None and value < 1:
            err(field, "must be >= 1 second")

    if req.elastic is not None:
        lo, hi = req.elastic.get("min_workers"), req.elastic.get("max_workers")
        if not isinstance(lo, int) or lo < 1:
            err("elastic.min_workers", "must be an integer >= 1")
        elif not isinstance(hi, int) or hi < lo:
            err("elastic.max_workers", "must be an integer >= min_workers")
        elif not lo <= req.workers <= hi:
            err("workers", f"must lie within the elastic range {lo}..{hi}")

    if errors:
        raise FieldErrors(errors)
    return team, gpu_model, priority


def job_fields(
    *, user, team, gpu_model, priority, request: JobRequest, submitted_at: datetime, **extra: Any
) -> dict[str, Any]:
    """The fields of a new pending job from a validated request (shared by single and array
    submission; ``extra`` sets further fields such as the array it belongs to). Fields left out
    take the model's defaults."""
    return {
        "team": team,
        "submitter": user,
        "name": request.name,
        "image": request.image,
        "command": request.command,
        "env": request.env or {},
        "workers": request.workers,
        "gpus_per_worker": request.gpus_per_worker,
        "gpu_model": gpu_model,
        "priority_class": priority,
        "preemptible": (
            priority.preemptible_by_default if request.preemptible is None else request.preemptible
        ),
        "checkpoint_interval_s": request.checkpoint_interval_s,
        "runtime_limit_s": request.runtime_limit_s,
        "dataset": request.dataset,
        "elastic_min_workers": (request.elastic or {}).get("min_workers"),
        "elastic_max_workers": (request.elastic or {}).get("max_workers"),
        "simulated_duration_s": request.simulated_duration_s,
        "state": JobState.PENDING.value,
        "why_pending": "waiting for the next scheduling cycle",
        "submitted_at": submitted_at,
        **extra,
    }


def job_submit(
    *, user, request: JobRequest, target: tuple[str, Team | None, str | None] | None = None
) -> Job:
    """Validate and queue a job. All-or-nothing: on any error nothing is written.

    Raises :class:`FieldErrors` naming each bad field. Triggers a scheduling cycle after commit.
    ``target`` is the caller's team and role when already looked up (see ``_validate_request``).
    """
    with transaction.atomic():
        team, gpu_model, priority = _validate_request(request, user=user, target=target)
        from billing.services import budget_check_submission

        budget_check_submission(team=team)
        job = Job(
            **job_fields(
                user=user,
                team=team,
                gpu_model=gpu_model,
                priority=priority,
                request=request,
                submitted_at=timezone.now(),
            )
        )
        job.save()
        event_record(job=job, kind="submitted", message=f"submitted by {user.get_username()}")
        publish_job(job)
        _trigger_cycle()
    return job


def _trigger_cycle() -> None:
    from .triggers import request_cycle

    request_cycle()


def job_transition(*, job: Job, target: JobState, **fields: Any) -> bool:
    """Move ``job`` to ``target`` if its current state allows it, as one conditional UPDATE.

    Returns False (and changes nothing) when another worker already moved it elsewhere.
    """
    updated = Job.objects.filter(pk=job.pk, state__in=sources_for(target)).update(
        state=target, **fields
    )
    if updated:
        job.state = target
        for key, value in fields.items():
            setattr(job, key, value)
    return bool(updated)


def release_allocations(*, job: Job, at: datetime | None = None) -> int:
    """End the job's live allocations (its GPUs become free). Idempotent."""
    return Allocation.objects.filter(job=job, ended_at__isnull=True).update(
        ended_at=at or timezone.now()
    )


def job_cancel(*, user, job_id: int) -> Job:
    """Cancel a live job of one of the caller's teams.

    Another team's job is NotFound. A job already final is a Conflict. The backend is told to stop
    after commit; GPUs are released in the same transaction as the state change.
    """
    with transaction.atomic():
        job = Job.objects.visible_to(user).select_related("team").filter(pk=job_id).first()
        if job is None:
            raise NotFound("no such job", field="id")
        if not can_submit_to(user, job.team):
            raise Forbidden("viewers cannot cancel jobs", field="id")
        try:
            check_transition(job.state, JobState.CANCELLED)
        except IllegalTransition as exc:
            raise Conflict(f"job is already {job.state}", field="state") from exc
        was_holding = job.state in (JobState.RUNNING, JobState.PREEMPTED)
        now = timezone.now()
        if not job_transition(job=job, target=JobState.CANCELLED, finished_at=now, why_pending=""):
            raise Conflict("job changed state meanwhile; try again", field="state")
        release_allocations(job=job, at=now)
        event_record(job=job, kind="cancelled", message=f"cancelled by {user.get_username()}")
        publish_job(job)
        if was_holding and job.cluster_id:
            from .enforce import backend_cancel_after_commit

            backend_cancel_after_commit(job)
        _trigger_cycle()
    return job


# --- Nodes (admin actions from the cluster view and the API) ---------------------------------


def _node_for_admin(*, user, node_id: int):
    from .models import Node as NodeRow

    if not is_platform_admin(user):
        raise NotFound("no such node", field="id")
    node = NodeRow.objects.select_related("cluster").filter(pk=node_id).first()
    if node is None:
        raise NotFound("no such node", field="id")
    return node


def _node_changed(node, kind: str, message: str, *, actor=None, before: str = "") -> None:
    from tenants.audit import audit_record

    now = timezone.now()
    if actor is not None:
        audit_record(
            actor=actor,
            action=f"node.{kind}",
            target=node,
            before={"state": before},
            after={"state": node.state},
            comment=message,
        )
    node_event_record(node=node, kind=kind, message=message, now=now)


def node_event_record(*, node: Node, kind: str, message: str, now: datetime) -> None:
    """Record a node event; announce it to admins (``node.event``) and the node's new state to
    every cluster view (``node.status``), after commit."""
    from .models import NodeEvent

    message = message[:500]
    NodeEvent.objects.create(node=node, kind=kind, message=message, time=now)
    streams.publish(
        streams.ADMIN_GROUP,
        {
            "type": "node.event",
            "node": node.name,
            "kind": kind,
            "message": message,
            "time": now.isoformat(),
        },
    )
    publish_node_status(node=node, now=now)


def publish_node_status(*, node: Node, now: datetime) -> None:
    """The node's state, health and which of its GPUs are in use (never by whom: every signed-in
    user hears the cluster group), after commit."""
    in_use = set(
        Allocation.objects.filter(node=node, ended_at__isnull=True).values_list(
            "gpu_index", flat=True
        )
    )
    streams.publish(
        streams.CLUSTER_GROUP,
        {
            "type": "node.status",
            "node": node.name,
            "state": node.state,
            "health": node.health,
            "gpus": {str(i): "in use" if i in in_use else "free" for i in range(node.gpu_count)},
            "time": now.isoformat(),
        },
    )


def _backend_after_commit(node, action: str, *args) -> None:
    from .backends import get_backend
    from .backends.base import BackendError

    def run() -> None:
        try:
            getattr(get_backend(node.cluster), action)(node.name, *args)
        except BackendError:
            log.warning("backend %s of %s failed; the next sync retries", action, node.name)

    transaction.on_commit(run)


def node_quarantine(*, user, node_id: int, reason: str) -> Node:
    """Quarantine a node by hand (platform admins): no new work, drained on the backend, released
    only by :func:`node_release`. Running jobs keep running."""
    from .models import NodeState

    if not reason or not reason.strip():
        raise DomainError("give a reason for the quarantine", field="reason")
    with transaction.atomic():
        node = _node_for_admin(user=user, node_id=node_id)
        if node.state == NodeState.QUARANTINED:
            return node
        Node.objects.filter(pk=node.pk).update(
            state=NodeState.QUARANTINED, state_reason=reason.strip()[:300], probation_until=None
        )
        before = node.state
        node.state, node.state_reason = NodeState.QUARANTINED, reason.strip()[:300]
        _node_changed(
            node,
            "quarantined",
            f"{reason.strip()} (by {user.get_username()})",
            actor=user,
            before=before,
        )
        _backend_after_commit(node, "drain_node", reason.strip())
    return node


def node_drain(*, user, node_id: int, reason: str) -> Node:
    """Let running work finish but place nothing new on the node (platform admins)."""
    from .models import NodeState

    with transaction.atomic():
        node = _node_for_admin(user=user, node_id=node_id)
        if node.state in (NodeState.DRAINING, NodeState.QUARANTINED):
            return node
        Node.objects.filter(pk=node.pk).update(
            state=NodeState.DRAINING, state_reason=(reason or "drained by admin")[:300]
        )
        before, node.state = node.state, NodeState.DRAINING
        _node_changed(
            node,
            "drained",
            f"{reason or 'drained'} (by {user.get_username()})",
            actor=user,
            before=before,
        )
        _backend_after_commit(node, "drain_node", reason or "drained by admin")
    return node


def node_release(*, user, node_id: int) -> Node:
    """Return a drained or quarantined node to service (platform admins). A down node stays down
    until the backend reports it back."""
    from .models import NodeState

    with transaction.atomic():
        node = _node_for_admin(user=user, node_id=node_id)
        if node.state not in (NodeState.DRAINING, NodeState.QUARANTINED):
            raise Conflict(f"node is {node.state}, not drained or quarantined", field="state")
        Node.objects.filter(pk=node.pk).update(
            state=NodeState.READY, state_reason="", probation_until=None
        )
        before, node.state = node.state, NodeState.READY
        _node_changed(
            node, "released", f"released by {user.get_username()}", actor=user, before=before
        )
        _backend_after_commit(node, "undrain_node")
        _trigger_cycle()
    return node


# --- Clusters --------------------------------------------------------------------------------


def cluster_import_nodes(*, cluster) -> tuple[int, int]:
    """Create or update the cluster's nodes from its backend's inventory (GPU count and model,
    rack, NVLink domain, zone, fabric, spot). Nodes the backend no longer lists are left alone
    (an admin removes them). Returns ``(created, updated)``. Idempotent."""
    from .backends import get_backend
    from .models import NodeState

    seen = get_backend(cluster).list_nodes()
    created = updated = 0
    with transaction.atomic():
        for item in seen:
            model_name = item.gpu_model or "gpu"
            gpu_model, _ = GpuModel.objects.get_or_create(name=model_name)
            defaults = {
                "gpu_model": gpu_model,
                "gpu_count": max(1, item.gpus),
                "zone": item.zone,
                "rack": item.rack,
                "nvlink_domain": item.nvlink_domain,
                "fabric": item.fabric,
                "spot": item.spot,
            }
            node, was_created = Node.objects.get_or_create(
                cluster=cluster,
                name=item.name,
                defaults={
                    **defaults,
                    "state": NodeState.DOWN if item.state == "down" else NodeState.READY,
                },
            )
            if was_created:
                created += 1
                continue
            changed = [k for k, v in defaults.items() if getattr(node, k) != v]
            if changed:
                for key in changed:
                    setattr(node, key, defaults[key])
                node.save(update_fields=changed)
                updated += 1
    return created, updated
