"""Writes: job submission, node admin actions (quarantine, drain, release), clusters.

Every function here is keyword-only and atomic. A job's later state changes (start, preempt,
requeue, finish, fail, cancel) live in ``scheduler.transitions``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from catalogue.models import GpuModel
from core import streams
from core.bounds import number_error
from core.envvars import MAX_ENTRY_BYTES, env_name_errors
from core.errors import (
    MAX_LISTED_ERRORS,
    Conflict,
    DomainError,
    FieldErrors,
    Forbidden,
    ListErrors,
    NotFound,
)
from core.images import image_error
from core.names import name_errors
from scheduler.policy import SnapshotError, routing_from_dict, routing_to_dict
from tenants.models import SUBMIT_ROLES, PriorityClass, Team
from tenants.permissions import is_platform_admin, submission_target

from . import reference
from .admission import check_submission
from .backends import get_backend
from .backends.base import BackendError
from .models import Allocation, Cluster, Job, Node, NodeEvent, NodeState, TeamClusterAccess
from .states import JobState
from .transitions import event_record, publish_job
from .triggers import request_cycle

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
    deadline: datetime | None = None
    dataset: str = ""
    elastic: dict[str, int] | None = None
    simulated_duration_s: float | None = None
    dataset_version: str = ""
    code_ref: str = ""
    checkpoint_on_advice: bool = False
    # The contract's routing object (docs/routing.md); None: no constraints of its own.
    routing: dict[str, Any] | None = None


# JobRequest's numeric fields and the Job field whose declared bounds apply to each.
_NUMBER_FIELDS = {
    "workers": "workers",
    "gpus_per_worker": "gpus_per_worker",
    "checkpoint_interval_s": "checkpoint_interval_s",
    "runtime_limit_s": "runtime_limit_s",
    "simulated_duration_s": "simulated_duration_s",
}


def request_number_errors(req: JobRequest) -> dict[str, list[str]]:
    """The numeric fields of ``req`` outside the bounds the Job model declares, by field. Pure
    (no database): arrays run it for every index, the rules that read the database once per
    group of equal indices."""
    errors: dict[str, list[str]] = {}
    for name, model_field in _NUMBER_FIELDS.items():
        value = getattr(req, name)
        if value is None and name not in ("workers", "gpus_per_worker"):
            continue
        problem = number_error(Job, model_field, value)
        if problem:
            errors[name] = [problem]
    # An array's template and items reach these fields unchecked: any JSON value until here.
    elastic: object = req.elastic
    if elastic is not None:
        if not isinstance(elastic, dict):
            errors["elastic"] = ["must be an object with min_workers and max_workers"]
        else:
            for key in ("min_workers", "max_workers"):
                value = elastic.get(key)
                if value is None:
                    problem = "is required for an elastic job (with min_workers and max_workers)"
                else:
                    problem = number_error(Job, f"elastic_{key}", value)
                if problem:
                    errors[f"elastic.{key}"] = [problem]
    return errors


def request_text_errors(req: JobRequest) -> dict[str, list[str]]:
    """What in ``req``'s image and command no cluster could start, by field. Pure (no database):
    arrays run it for every index, since these differ by index."""
    errors: dict[str, list[str]] = {}
    # (an array's index reaches these fields unchecked: any JSON value until here)
    image: object = req.image
    if isinstance(image, str) and image_error(image):
        errors["image"] = [image_error(image)]
    # Slurm runs it as the one argument of bash -c, which Linux caps as it caps a variable.
    given_command: object = req.command
    command = given_command if isinstance(given_command, str) else ""
    command_bytes = len(command.encode(errors="surrogatepass"))
    if command_bytes > MAX_ENTRY_BYTES:
        errors["command"] = [
            f"is {command_bytes} bytes; at most {MAX_ENTRY_BYTES} (a longer command cannot be "
            "started: put it in a script the job runs)"
        ]
    return errors


# A deadline further out than this is a typo more often than a plan, and it would never be urgent.
MAX_DEADLINE_AHEAD = timedelta(days=90)


def deadline_error(deadline: datetime, *, now: datetime) -> str:
    """Why ``deadline`` is not acceptable at ``now`` ("" when it is)."""
    if deadline.tzinfo is None:
        return "must include a time zone (e.g. 2030-01-31T18:00:00Z)"
    if deadline <= now:
        return "must be in the future"
    if deadline - now > MAX_DEADLINE_AHEAD:
        return f"must be at most {MAX_DEADLINE_AHEAD.days} days ahead"
    return ""


def _validate_request(
    req: JobRequest, *, user: User, target: tuple[str, Team | None, str | None] | None = None
) -> tuple[Team, GpuModel | None, PriorityClass]:
    """``target``: ``(slug, team, role)`` as ``submission_target`` answered it earlier in the same
    request (the team rate limit looks it up first); used only when the slug is the request's."""
    errors: dict[str, list[str]] = request_number_errors(req)

    def err(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if req.deadline is not None:
        problem = deadline_error(req.deadline, now=timezone.now())
        if problem:
            err("deadline", problem)

    if req.routing is not None:
        for field, message in routing_errors(req.routing):
            err(field, message)

    for message in env_name_errors(req.env):
        err("env", message)
    for field, messages in request_text_errors(req).items():
        errors.setdefault(field, []).extend(messages)

    for message in name_errors(req.name):
        err("name", message)
    # Shown with the job as the name is, and matched to a dataset's name, which is one line.
    for field in ("dataset", "dataset_version"):
        for message in name_errors(getattr(req, field)):
            err(field, message)

    if target is not None and target[0] == req.team:
        team, role = target[1], target[2]
    else:
        team, role = submission_target(user, req.team)
    if team is None:
        # Not telling apart "no such team" from "not yours" keeps other teams' names private.
        err("team", f"you are not a member of a team '{req.team}'")
    elif not (is_platform_admin(user) or role in SUBMIT_ROLES):
        err("team", "viewers cannot submit jobs to this team")

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

    if team is not None and priority is not None and not is_platform_admin(user):
        _check_entitlements(req, team=team, priority=priority, err=err)

    if team is not None:
        retired = retired_team_clusters_error(team)
        if retired:
            # On the field that names clusters when the submission has one (the team's list,
            # not the submission, is at fault otherwise).
            named = isinstance(req.routing, dict) and bool(req.routing.get("clusters"))
            err("routing.clusters" if named else "non_field_errors", retired)

    if "gpus_per_worker" not in errors and "gpu_model" not in errors:
        largest = reference.largest_node_gpus(gpu_model)
        if req.gpus_per_worker > largest:
            largest = reference.largest_node_gpus(gpu_model, fresh=True)
        if req.gpus_per_worker > largest:
            where = f"a {gpu_model.name} node" if gpu_model else "any node"
            err(
                "gpus_per_worker",
                f"{req.gpus_per_worker} GPUs per worker is more than {where} has ({largest})",
            )

    if req.elastic is not None and not any(k.startswith("elastic") for k in errors):
        lo, hi = req.elastic["min_workers"], req.elastic["max_workers"]
        if hi < lo:
            err("elastic.max_workers", "must be >= min_workers")
        elif "workers" not in errors and not lo <= req.workers <= hi:
            err("workers", f"must lie within the elastic range {lo}..{hi}")

    gang_checked = ("workers", "gpus_per_worker", "gpu_model", "elastic.min_workers")
    if req.gpus_per_worker > 0 and not any(field in errors for field in gang_checked):
        # A gang no cluster could ever hold is refused, as sbatch refuses a request beyond the
        # partition's configured nodes ("Requested node configuration is not available"):
        # accepted, it would wait for good and count against the team's pending cap.
        field = "elastic.min_workers" if req.elastic is not None else "workers"
        least = req.elastic["min_workers"] if req.elastic is not None else req.workers
        most = reference.largest_gang_workers(gpu_model, req.gpus_per_worker)
        if least > most:
            most = reference.largest_gang_workers(gpu_model, req.gpus_per_worker, fresh=True)
        if least > most:
            nodes = f"{gpu_model.name} nodes" if gpu_model else "nodes of one GPU model"
            err(
                field,
                f"{least} workers of {req.gpus_per_worker} GPUs can never run at once: one "
                f"cluster's {nodes} hold at most {most}",
            )

    if errors:
        raise FieldErrors(errors)
    assert team is not None and priority is not None  # either missing is an error above
    return team, gpu_model, priority


MAX_ROUTING_ERRORS_REPORTED = MAX_LISTED_ERRORS


def routing_errors(value: Any) -> list[tuple[str, str]]:
    """What is wrong with a submitted routing object, as ``(field, reason)`` pairs: its shape
    (the policy contract's own reader) and the cluster and region names no cluster has, which
    would otherwise make the job wait forever for a typo, and the clusters being retired or
    retired (``scheduler.retirement``), where no new job starts. At most
    ``MAX_ROUTING_ERRORS_REPORTED`` names are listed, then one ``and N more not shown`` per list
    that had more (as telemetry caps a batch's errors)."""
    try:
        routing = routing_from_dict(value, "routing")
    except SnapshotError as exc:
        return [(exc.field, exc.reason)]
    if routing is None:
        return []
    names, regions, retiring = set(), set(), set()
    for name, region, retiring_since in Cluster.objects.values_list(
        "name", "region", "retiring_since"
    ):
        names.add(name)
        regions.add(region)
        if retiring_since is not None:
            retiring.add(name)
    # A list is as long as its sender makes it: 300,000 unknown names made a 300,000-entry
    # error body of tens of MB. The first few say what is wrong; the rest is counted.
    errors: dict[str, list[str]] = {}
    listed = ListErrors(errors, limit=MAX_ROUTING_ERRORS_REPORTED)

    def problem(key: str, i: int, message: str) -> None:
        listed.add(f"routing.{key}", f"routing.{key}[{i}]", message)

    for key in ("clusters", "prefer_clusters"):
        for i, name in enumerate(getattr(routing, key) or ()):
            if name not in names:
                problem(key, i, f"no cluster is named {name!r}")
            elif name in retiring:
                problem(key, i, f"cluster {name!r} is retired: no new job runs there")
    for key in ("regions", "prefer_regions"):
        for i, region in enumerate(getattr(routing, key) or ()):
            if region not in regions:
                problem(key, i, f"no cluster is in region {region!r}")
    listed.close()
    return [(field, message) for field, messages in errors.items() for message in messages]


def retired_team_clusters_error(team: Team) -> str:
    """Why ``team`` may not submit when every cluster it may use (its own list intersected with
    its ancestors', as the engine reads them: ``scheduler.policy.routing.team_clusters``) is
    retired or being retired, naming them and what to do; "" when one is in service or the team
    is held to no list. Such a job could never start (Slurm likewise refuses a submission to a
    DRAIN or INACTIVE partition); one already pending is left alone, the loop saying why
    (``scheduler.snapshot.retired_team_clusters``). No query while no cluster is being retired
    (a cached fact), else two."""
    if not reference.any_cluster_retiring():
        return ""
    parents = dict(Team.objects.values_list("id", "parent_id"))
    chain: list[int] = []
    node: int | None = team.pk
    while node is not None and node not in chain:
        chain.append(node)
        node = parents.get(node)
    lists: dict[int, set[str]] = {}
    retired: dict[str, bool | None] = {}  # name -> retired yet (None: in service)
    for team_id, name, retiring_since, retired_at in TeamClusterAccess.objects.filter(
        team_id__in=chain
    ).values_list("team_id", "cluster__name", "cluster__retiring_since", "cluster__retired_at"):
        lists.setdefault(team_id, set()).add(name)
        retired[name] = None if retiring_since is None else retired_at is not None
    allowed: set[str] | None = None
    for team_id in chain:
        if team_id in lists:
            allowed = set(lists[team_id]) if allowed is None else allowed & lists[team_id]
    if not allowed or any(retired[name] is None for name in allowed):
        return ""
    listed = ", ".join(
        f"{name} ({'retired' if retired[name] else 'being retired'})" for name in sorted(allowed)
    )
    return (
        f"every cluster team {team.slug} may use is retired: {listed}; no job of it can start. "
        "Nothing was submitted: ask a platform admin to let the team use another cluster or to "
        "reinstate one of these"
    )


def _check_entitlements(
    req: JobRequest, *, team: Team, priority: PriorityClass, err: Callable[[str, str], None]
) -> None:
    """The team's quota settings: a restricted priority class needs a grant; opting out of
    preemption in a class whose jobs are preemptible needs the team's permission. Read only when
    the request asks for either (most submissions cost no query here)."""
    restricted = priority.restricted
    opts_out = req.preemptible is False and priority.preemptible_by_default
    if not (restricted or opts_out):
        return
    from tenants.selectors import team_entitlements

    granted = team_entitlements(team)
    if restricted and not granted.may_use(priority):
        usable = ", ".join(sorted(granted.granted_classes)) or "none"
        err(
            "priority_class",
            f"team {team.slug} may not use the restricted priority class '{priority.name}' "
            f"(restricted classes granted to it: {usable}); a platform admin grants classes "
            "in the team's quota settings",
        )
    if opts_out and not granted.may_opt_out_of_preemption:
        err(
            "preemptible",
            f"team {team.slug} may not opt out of preemption: jobs of priority class "
            f"'{priority.name}' are preemptible (a platform admin can allow opting out in the "
            "team's quota settings)",
        )


def pending_caps_check(*, user: User, team: Team, adding: int) -> None:
    """Refuse a submission that would take the team's pending jobs, or the submitter's pending
    jobs in the team, past its cap (the team's quota settings, else ``JOB_PENDING_MAX_TEAM`` /
    ``JOB_PENDING_MAX_USER``; arrays count by size). Raises FieldErrors on "team".

    The team's row is locked before the count (one query: the caps and both counts), so
    concurrent submissions to a team cannot together pass its cap: the second waits for the
    first to commit and counts its jobs. Locking only close to a cap (within 10 %) let two
    submissions that were each far from it, two arrays of 6 under a cap of 10, or an array
    filling the cap and one job, each count the pending jobs from before the other and both
    pass. The lock is held until the submission commits (a few milliseconds): submissions to
    one team are serialized, those to different teams are not."""
    from django.conf import settings
    from django.db import connection

    from tenants.models import TeamEntitlements

    jobs, caps = Job._meta.db_table, TeamEntitlements._meta.db_table
    # One statement over one index range (job_team_state), nothing to group or sort (the ORM's
    # version joined the team and sorted every pending row: 8 ms at 9,000 pending, not 4).
    sql = (
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN submitter_id = %s THEN 1 ELSE 0 END), 0), "
        f"(SELECT max_pending_jobs FROM {caps} WHERE team_id = %s), "
        f"(SELECT max_pending_jobs_per_user FROM {caps} WHERE team_id = %s) "
        f"FROM {jobs} WHERE team_id = %s AND state = %s"
    )

    def read() -> tuple[int, int, int, int]:
        with connection.cursor() as cursor:
            cursor.execute(sql, [user.pk, team.pk, team.pk, team.pk, JobState.PENDING.value])
            in_team, mine, team_cap, user_cap = cursor.fetchone()
        return (
            in_team,
            mine,
            settings.JOB_PENDING_MAX_TEAM if team_cap is None else team_cap,
            settings.JOB_PENDING_MAX_USER if user_cap is None else user_cap,
        )

    # FOR NO KEY UPDATE: submissions to the team wait for each other, while the foreign-key
    # checks of rows that merely reference the team (another service's audit entry, a quota)
    # do not wait for a submission, which would deadlock with locks that submission waits for.
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    in_team, mine, team_cap, user_cap = read()
    problems = []
    if in_team + adding > team_cap:
        problems.append(
            f"team {team.slug} has {in_team:,} pending jobs and may hold {team_cap:,}; "
            f"these {adding:,} more would pass its cap (arrays count by size): wait for some "
            "to start or cancel some"
        )
    if mine + adding > user_cap:
        problems.append(
            f"you have {mine:,} pending jobs in team {team.slug} and may hold {user_cap:,}; "
            f"these {adding:,} more would pass the per-user cap (arrays count by size)"
        )
    if problems:
        raise FieldErrors({"team": problems})


def job_fields(
    *,
    user: User,
    team: Team,
    gpu_model: GpuModel | None,
    priority: PriorityClass,
    request: JobRequest,
    submitted_at: datetime,
    **extra: Any,
) -> dict[str, Any]:
    """The fields of a new pending job from a validated request (shared by single and array
    submission; ``extra`` sets further fields such as the array it belongs to). Fields left out
    take the model's defaults."""
    # (a routing object read is one: routing_from_dict answers None for None only)
    routing = None if request.routing is None else routing_from_dict(request.routing)
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
        "deadline": request.deadline,
        "dataset": request.dataset,
        "dataset_version": request.dataset_version,
        "code_ref": request.code_ref,
        "checkpoint_on_advice": bool(request.checkpoint_on_advice),
        "routing": None if routing is None else routing_to_dict(routing),
        "elastic_min_workers": (request.elastic or {}).get("min_workers"),
        "elastic_max_workers": (request.elastic or {}).get("max_workers"),
        "requested_workers": request.workers if request.elastic else None,
        "simulated_duration_s": request.simulated_duration_s,
        "state": JobState.PENDING.value,
        "why_pending": "waiting for the next scheduling cycle",
        "submitted_at": submitted_at,
        **extra,
    }


# The references of a job (and of an array) that an admin may delete while it is submitted.
_REFERENCES = ("priority_class", "gpu_model", "team", "submitter")


@contextlib.contextmanager
def references_checked() -> Iterator[None]:
    """Around a submission's transaction: a row the job references deleted between its
    validation and its commit (an unused priority class or GPU model an admin removed) fails
    the foreign key at commit; that is the field's 400, as if the row had never existed, not
    a 500. Other integrity errors propagate."""
    try:
        yield
    except IntegrityError as exc:
        cause = exc.__cause__
        constraint = getattr(getattr(cause, "diag", None), "constraint_name", None) or ""
        field = next((f for f in _REFERENCES if f"_{f}_id_" in constraint), None)
        if getattr(cause, "sqlstate", None) != "23503" or field is None:
            raise
        raise FieldErrors(
            {field: ["was removed while the job was being submitted; submit it again"]}
        ) from None


def job_submit(
    *, user: User, request: JobRequest, target: tuple[str, Team | None, str | None] | None = None
) -> Job:
    """Validate and queue a job. All-or-nothing: on any error nothing is written.

    Raises :class:`FieldErrors` naming each bad field. Triggers a scheduling cycle after commit.
    ``target`` is the caller's team and role when already looked up (see ``_validate_request``).
    """
    with references_checked(), transaction.atomic():
        team, gpu_model, priority = _validate_request(request, user=user, target=target)
        check_submission(team=team)
        pending_caps_check(user=user, team=team, adding=1)
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
        request_cycle()
    return job


# --- Nodes (admin actions from the cluster view and the API) ---------------------------------


def node_for_admin(*, user: User, node_id: int) -> Node:
    # Nodes belong to no team, so there is no existence to hide: an action for platform admins
    # only is a 403 (docs/tenancy.md), as the API's permission class and routing admin answer.
    if not is_platform_admin(user):
        raise Forbidden("node actions are for platform admins")
    # Locked: the loop and the health rules change a node's state too, and each action below
    # decides from the state it reads.
    node: Node | None = (
        Node.objects.select_for_update(of=("self",))
        .select_related("cluster")
        .filter(pk=node_id)
        .first()
    )
    if node is None:
        raise NotFound("no such node", field="id")
    return node


def _node_changed(
    node: Node,
    kind: str,
    message: str,
    *,
    actor: User | None = None,
    before: dict[str, str] | None = None,
) -> None:
    from tenants.audit import audit_record

    now = timezone.now()
    if node.state == NodeState.DOWN:
        # Its state reads down before and after: say what the action changed.
        message = f"{message}, while down: it comes back {node.resume_state or NodeState.READY}"
    if actor is not None:
        audit_record(
            actor=actor,
            action=f"node.{kind}",
            target=node,
            before=before,
            after=_service_state(node),
            comment=message,
        )
    node_event_record(node=node, kind=kind, message=message, now=now)


def _service_state(node: Node) -> dict[str, str]:
    # A down node's admin actions change only the state it comes back to.
    if node.state == NodeState.DOWN:
        return {"state": node.state, "resume_state": node.resume_state}
    return {"state": node.state}


def _held(node: Node) -> tuple[str, str]:
    """The state the node is in and its reason, or for a down node those it comes back to."""
    if node.state == NodeState.DOWN:
        return node.resume_state, node.resume_reason
    return node.state, node.state_reason


def _node_set(node: Node, state: str, reason: str, **fields: Any) -> None:
    """Write the locked ``node``'s service state. A down node stays down and keeps it as the
    state to come back to (``resume_state``, blank for ready), as Slurm's DOWN+DRAIN: marked
    draining at once, the loop would see it go down again and record a second failure (which
    also counts towards a quarantine)."""
    if node.state == NodeState.DOWN:
        held = "" if state == NodeState.READY else state
        fields |= {"resume_state": held, "resume_reason": reason}
    else:
        fields |= {"state": state, "state_reason": reason}
    Node.objects.filter(pk=node.pk).update(**fields)
    for name, value in fields.items():
        setattr(node, name, value)


def node_event_record(*, node: Node, kind: str, message: str, now: datetime) -> None:
    """Record a node event; announce it to admins (``node.event``) and the node's new state to
    every cluster view (``node.status``), after commit."""
    message = message[:500]
    NodeEvent.objects.create(node=node, kind=kind, message=message, time=now)
    event: streams.NodeEventPayload = {
        "type": "node.event",
        "node": node.name,
        "kind": kind,
        "message": message,
        "time": now.isoformat(),
    }
    # (a dict of its own: streams.publish takes a plain dict, which a TypedDict is not to mypy)
    streams.publish(streams.ADMIN_GROUP, dict(event))
    publish_node_status(node=node, now=now)


def publish_node_status(*, node: Node, now: datetime, in_use: set[int] | None = None) -> None:
    """The node's state, health and which of its GPUs are in use (never by whom: every signed-in
    user hears the cluster group), after commit. ``in_use``: the node's GPUs held by a live
    allocation, when the caller read them for many nodes at once (else one query here)."""
    if in_use is None:
        in_use = set(
            Allocation.objects.filter(node=node, ended_at__isnull=True).values_list(
                "gpu_index", flat=True
            )
        )
    payload: streams.NodeStatusPayload = {
        "type": "node.status",
        "node": node.name,
        "state": node.state,
        "resume_state": node.resume_state,
        "cluster_hold": node.no_new_work(now),
        "health": node.health,
        "gpus": {str(i): "in use" if i in in_use else "free" for i in range(node.gpu_count)},
        "time": now.isoformat(),
    }
    streams.publish(streams.CLUSTER_GROUP, dict(payload))


def _backend_after_commit(node: Node, action: str, *args: str) -> None:
    def run() -> None:
        try:
            getattr(get_backend(node.cluster), action)(node.name, *args)
        except BackendError as exc:
            # A drain is asked again by the next sync (it sees the node in service there); a
            # failed undrain is not, since the sync cannot tell it from a site admin's drain.
            log.warning("backend %s of %s failed: %s", action, node.name, exc)

    transaction.on_commit(run)


def node_reason_checked(reason: str) -> str:
    """An admin's reason as the node's ``state_reason`` column holds it, whole: a longer one is
    refused (the portal cut it silently where the API refused it)."""
    limit = Node._meta.get_field("state_reason").max_length
    assert limit is not None  # Node.state_reason declares its length
    if len(reason) > limit:
        raise DomainError(
            f"a reason is at most {limit} characters ({len(reason)} given)", field="reason"
        )
    return reason


def node_quarantine(*, user: User, node_id: int, reason: str) -> Node:
    """Quarantine a node by hand (platform admins): no new work, drained on the backend, released
    only by :func:`node_release`. Running jobs keep running.

    A node a health rule quarantined (on probation, released by the loop when it ends) becomes
    quarantined by hand: its probation is dropped and the admin's reason recorded. Only a repeat
    (quarantined, no probation, the same reason) changes nothing. A down node stays down and
    comes back quarantined. Forbidden, then NotFound, come before any refusal of the reason."""
    with transaction.atomic():
        node = node_for_admin(user=user, node_id=node_id)
        if not reason or not reason.strip():
            raise DomainError("give a reason for the quarantine", field="reason")
        stored = node_reason_checked(reason.strip())
        if _held(node) == (NodeState.QUARANTINED, stored) and node.probation_until is None:
            return node
        before = _service_state(node)
        _node_set(node, NodeState.QUARANTINED, stored, probation_until=None)
        _node_changed(
            node,
            "quarantined",
            f"{reason.strip()} (by {user.get_username()})",
            actor=user,
            before=before,
        )
        _backend_after_commit(node, "drain_node", reason.strip())
    return node


def node_drain(*, user: User, node_id: int, reason: str) -> Node:
    """Let running work finish but place nothing new on the node (platform admins). A down node
    stays down and comes back drained. A node already out of service is left as it is.
    Forbidden, then NotFound, come before a refusal of the reason."""
    with transaction.atomic():
        node = node_for_admin(user=user, node_id=node_id)
        stored = node_reason_checked(reason or "drained by admin")
        if _held(node)[0] in (NodeState.DRAINING, NodeState.QUARANTINED):
            return node
        before = _service_state(node)
        _node_set(node, NodeState.DRAINING, stored)
        _node_changed(
            node,
            "drained",
            f"{reason or 'drained'} (by {user.get_username()})",
            actor=user,
            before=before,
        )
        _backend_after_commit(node, "drain_node", reason or "drained by admin")
    return node


def node_release(*, user: User, node_id: int) -> Node:
    """Return a drained or quarantined node to service (platform admins). A down node's drain or
    quarantine is lifted where it stands, as Slurm's resume of a DOWN+DRAIN node: it stays down
    and comes back ready when the backend reports it back. A node with neither is a Conflict."""
    with transaction.atomic():
        node = node_for_admin(user=user, node_id=node_id)
        if _held(node)[0] not in (NodeState.DRAINING, NodeState.QUARANTINED):
            if node.state == NodeState.DOWN:
                raise Conflict(
                    "node is down and neither drained nor quarantined: it returns to service "
                    "when its backend reports it back",
                    field="state",
                )
            raise Conflict(f"node is {node.state}, not drained or quarantined", field="state")
        before = _service_state(node)
        _node_set(node, NodeState.READY, "", probation_until=None)
        _node_changed(
            node, "released", f"released by {user.get_username()}", actor=user, before=before
        )
        _backend_after_commit(node, "undrain_node")
        request_cycle()
    return node


# A node's identity on its backend and the GPUs its allocations index: what a running run was
# placed on, by name, on one cluster.
NODE_FIXED_WHILE_RUNNING = ("name", "cluster", "gpu_model", "gpu_count")


def node_change_problems(*, node: Node, changed: Iterable[str]) -> dict[str, str]:
    """Why each of the ``changed`` fields of ``node`` may not change now (field -> reason): its
    name, cluster, GPU model and GPU count stay as they are while any of its GPUs is allocated.
    Runs are found on the backend by the node's name on its cluster and hold GPU indices of it;
    renamed, moved or re-GPU'd under a running job, its allocation pointed at a node the backend
    runs nothing on (or at GPUs the node no longer has). Its state changes only through
    :func:`node_drain`, :func:`node_quarantine` and :func:`node_release`."""
    fixed = [f for f in NODE_FIXED_WHILE_RUNNING if f in set(changed)]
    if not fixed or node.pk is None:
        return {}
    allocated = Allocation.objects.filter(node_id=node.pk, ended_at__isnull=True).count()
    if not allocated:
        return {}
    reason = (
        f"running jobs hold {allocated} of its GPUs: drain the node and change this once they "
        "have ended"
    )
    return {field: reason for field in fixed}


# --- Clusters --------------------------------------------------------------------------------


def cluster_import_nodes(*, cluster: Cluster) -> tuple[int, int]:
    """Create or update the cluster's nodes from its backend's inventory (GPU count and model,
    rack, NVLink domain, zone, fabric, spot). Nodes the backend no longer lists are left alone
    (an admin removes them). A node a Node row cannot hold (a name longer than the column, a GPU
    count outside the model's bounds) is skipped with a warning, so one odd node does not stop
    the others' import. Returns ``(created, updated)``. Idempotent. A retired (or retiring)
    cluster is a Conflict: its new nodes would be ready, and take work it no longer takes."""
    if cluster.retiring_since is not None:
        raise Conflict(
            f"cluster {cluster.name} is retired: reinstate it before importing its nodes",
            field="cluster",
        )
    seen = get_backend(cluster).list_nodes()
    created = updated = 0
    name_limit = Node._meta.get_field("name").max_length or 0
    with transaction.atomic():
        for item in seen:
            why = (
                f"its name is longer than {name_limit} characters"
                if len(item.name) > name_limit
                else number_error(Node, "gpu_count", max(1, item.gpus))
            )
            if why:
                log.warning("cluster %s: node %.200s not imported: %s", cluster, item.name, why)
                continue
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


def cluster_backend_mark(*, cluster: Cluster, error: str = "") -> None:
    """Record whether the cluster's backend answered (``error`` empty) or why it did not; the
    row is written only when that changed. The loop's observe and enforce stages call it; a
    backend outage is the cluster's state, never its jobs'."""
    available = not error
    if cluster.backend_available != available or cluster.backend_error != error:
        Cluster.objects.filter(pk=cluster.pk).update(
            backend_available=available,
            backend_error=error[:2000],
            backend_checked_at=timezone.now(),
        )
        cluster.backend_available, cluster.backend_error = available, error
