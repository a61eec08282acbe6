"""Job arrays (sweeps): one submission creates N jobs from a template with per-index parameters.

Guarantees:

- **All or nothing.** Every index is validated by the same domain rules as a single submission
  (``scheduler.services._validate_request``) before anything is written; one bad index refuses the
  whole array with :class:`FieldErrors` naming the index and field (``items[3].gpus_per_worker``)
  or the template field (``template.gpu_model``) it came from, and no job is created.
- **Bounded work.** Indices that share the fields the domain rules read (workers, GPUs, model,
  priority, limits, elastic range) are validated once, so a 5,000-index sweep that varies only its
  environment costs a handful of queries; the jobs and their ``submitted`` events are written with
  two bulk INSERTs, and one scheduling cycle is requested.
- **Group cancel.** :func:`array_cancel` cancels every live job of the array in one transaction
  (GPUs released, backends told after commit), with the same visibility and role rules as
  ``transitions.job_cancel``.

Reads (:func:`array_list`, :func:`array_get`) start from the caller's teams, like every selector.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction
from django.db.models import Count, Field, Q, QuerySet
from django.utils import timezone

from catalogue.models import GpuModel
from core import streams
from core.bounds import MAX_ARRAY_SIZE
from core.envvars import env_name_errors
from core.errors import Conflict, FieldErrors, Forbidden, NotFound
from core.names import name_errors
from tenants.models import PriorityClass, Team
from tenants.permissions import can_submit_to

from .admission import check_submission
from .env_visibility import HIDDEN_VALUE, shown_command, shown_env
from .models import Cluster, Job, JobArray, JobEvent
from .services import (
    JobRequest,
    _validate_request,
    deadline_error,
    job_fields,
    pending_caps_check,
    references_checked,
    request_number_errors,
    request_text_errors,
)
from .states import LIVE_STATES, JobState
from .transitions import jobs_cancel_locked
from .triggers import request_cycle

# Indices whose requests agree on the fields checked once per group (_RULE_FIELDS) share
# their check; what that check resolved (the team, GPU model and priority class).
_RuleKey = tuple[object, ...]
_Resolved = tuple[Team, GpuModel | None, PriorityClass]

# Per-index errors listed before the rest are summarised (a 10,000-index mistake stays readable).
MAX_REPORTED_ERRORS = 50
ARRAY_INDEX_ENV = "GPUPLATFORM_ARRAY_INDEX"

# JobRequest fields a template or an item may set (the team is the array's, one for all).
OVERRIDABLE = frozenset(f.name for f in fields(JobRequest)) - {"team"}
# The fields the domain rules read: indices equal on these are validated once.
_RULE_FIELDS = (
    "workers",
    "gpus_per_worker",
    "gpu_model",
    "priority_class",
    "preemptible",
    "checkpoint_interval_s",
    "runtime_limit_s",
    "elastic",
    "routing",
)
# Numeric fields outside the rule key (sweeps vary them per index): bounded index by index.
_PER_INDEX_NUMBERS = frozenset({"simulated_duration_s"})
# Other fields outside the rule key whose rules read no database: checked index by index too.
# Checked only with each group's first index, another index's deadline in the past or years
# ahead, or a dataset name with a line break, was accepted where a single job's was refused.
_PER_INDEX_RULES = frozenset({"deadline", "dataset", "dataset_version"})
# Text fields outside the rule key that the cluster must be able to start: checked by index.
_PER_INDEX_TEXT = frozenset({"image", "command"})


@dataclass(frozen=True)
class ArrayRequest:
    """A shape-checked array submission: ``template`` and each of ``items`` hold JobRequest
    fields (types already checked by the caller); an item's fields override the template's and an
    item's ``env`` is merged over the template's."""

    name: str
    team: str
    template: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)


def _member_request(req: ArrayRequest, index: int) -> JobRequest:
    item = req.items[index]
    merged = {**req.template, **item}
    env = {**(req.template.get("env") or {}), **(item.get("env") or {})}
    env[ARRAY_INDEX_ENV] = str(index)
    merged["env"] = env
    merged["name"] = item.get("name") or f"{req.name}-{index}"
    return JobRequest(team=req.team, **merged)


def _rule_key(job_request: JobRequest) -> _RuleKey:
    elastic = job_request.elastic
    return tuple(
        tuple(sorted(elastic.items()))
        if name == "elastic" and elastic
        # a routing object (a dict of lists) as text: indices with the same one share a check
        else json.dumps(job_request.routing, sort_keys=True, default=str)
        if name == "routing"
        else getattr(job_request, name)
        for name in _RULE_FIELDS
    )


def _index_rule_errors(member: JobRequest, *, now: datetime) -> dict[str, list[str]]:
    """The rules of ``_PER_INDEX_RULES`` for one index, as ``_validate_request`` states them."""
    errors: dict[str, list[str]] = {}
    if member.deadline is not None:
        problem = deadline_error(member.deadline, now=now)
        if problem:
            errors["deadline"] = [problem]
    for name in ("dataset", "dataset_version"):
        problems = name_errors(getattr(member, name))
        if problems:
            errors[name] = problems
    return errors


def _validate_array(
    *, user: User, req: ArrayRequest
) -> tuple[list[JobRequest], Team, dict[_RuleKey, _Resolved]]:
    """Validate every index; return the member requests and the resolved team, GPU models and
    priority classes, or raise FieldErrors naming each bad index and field."""
    size = len(req.items)
    if size < 1:
        raise FieldErrors({"items": ["an array needs at least one index"]})
    if size > MAX_ARRAY_SIZE:
        raise FieldErrors({"items": [f"at most {MAX_ARRAY_SIZE} indices per array (got {size})"]})
    unknown = set(req.template) - OVERRIDABLE
    if unknown:
        raise FieldErrors({f"template.{k}": ["not a job field"] for k in sorted(unknown)})

    members = [_member_request(req, i) for i in range(size)]
    groups: dict[_RuleKey, list[int]] = defaultdict(list)
    for i, member in enumerate(members):
        groups[_rule_key(member)].append(i)

    errors: dict[str, list[str]] = {}
    reported = 0

    def attribute(bad_field: str, messages: list[str], indices: list[int]) -> None:
        """File an error under the template or the items that set the field."""
        nonlocal reported
        root = bad_field.split(".")[0]
        if root in ("team", "non_field_errors"):  # the array's, not an index's
            errors.setdefault(root, messages)
            return
        from_items = [i for i in indices if root in req.items[i]]
        if len(from_items) < len(indices):
            errors.setdefault(f"template.{bad_field}", messages)
        for i in from_items:
            if reported < MAX_REPORTED_ERRORS:
                errors[f"items[{i}].{bad_field}"] = messages
            reported += 1

    resolved: dict[_RuleKey, _Resolved] = {}
    for key, indices in groups.items():
        try:
            resolved[key] = _validate_request(members[indices[0]], user=user)
        except FieldErrors as exc:
            for bad_field, messages in exc.errors.items():
                # numbers, environments, names, deadlines, datasets, images and commands
                # differ by index: checked for each, below
                per_index = _PER_INDEX_NUMBERS | _PER_INDEX_RULES | _PER_INDEX_TEXT
                if bad_field not in per_index | {"env", "name"}:
                    attribute(bad_field, messages, indices)
    template_env = env_name_errors(req.template.get("env"))
    if template_env:
        errors["template.env"] = template_env
    # an item without a name of its own is called after the array ("<name>-<index>")
    array_name = name_errors(req.name)
    if array_name:
        errors["name"] = array_name
    elif any("name" not in item for item in req.items):
        # The longest such name must fit the job's column: past it, the write failed (a 500).
        longest = Job._meta.get_field("name").max_length
        assert longest is not None  # Job.name declares its length
        room = longest - len(f"-{size - 1}")
        if len(req.name) > room:
            errors["name"] = [
                f"at most {room} characters for an array of {size:,} (its jobs are named "
                f"<name>-<index>, at most {longest} characters)"
            ]
    now = timezone.now()
    for i, member in enumerate(members):
        for bad_field, messages in _index_rule_errors(member, now=now).items():
            attribute(bad_field, messages, [i])
        if any(getattr(member, name) is not None for name in _PER_INDEX_NUMBERS):
            for bad_field, messages in request_number_errors(member).items():
                if bad_field in _PER_INDEX_NUMBERS:
                    attribute(bad_field, messages, [i])
        for bad_field, messages in request_text_errors(member).items():
            attribute(bad_field, messages, [i])
        item_env = env_name_errors(req.items[i].get("env"))
        if item_env:
            if reported < MAX_REPORTED_ERRORS:
                errors[f"items[{i}].env"] = item_env
            reported += 1
        item_name = name_errors(req.items[i].get("name"))
        if item_name:
            if reported < MAX_REPORTED_ERRORS:
                errors[f"items[{i}].name"] = item_name
            reported += 1
    if errors:
        if reported > MAX_REPORTED_ERRORS:
            errors["items"] = [
                f"{reported} index errors in all; the first {MAX_REPORTED_ERRORS} are listed"
            ]
        raise FieldErrors(errors)
    team = next(iter(resolved.values()))[0]
    return members, team, {key: value for key, value in resolved.items()}


def array_submit(*, user: User, request: ArrayRequest) -> JobArray:
    """Validate and queue every index of the array, or nothing (FieldErrors names what is wrong).

    The jobs are pending, named ``<name>-<index>`` unless an item names itself, and carry their
    index in ``Job.array_index`` and in the environment variable GPUPLATFORM_ARRAY_INDEX. One
    ``array.status`` message goes to the team's stream and one scheduling cycle is requested, both
    after commit.
    """
    with references_checked(), transaction.atomic():
        members, team, resolved = _validate_array(user=user, req=request)
        check_submission(team=team)
        pending_caps_check(user=user, team=team, adding=len(members))
        now = timezone.now()
        array = JobArray.objects.create(
            team=team,
            submitter=user,
            name=request.name,
            size=len(members),
            template=_stored_template(request.template),
            submitted_at=now,
        )
        jobs = []
        for index, member in enumerate(members):
            _team, gpu_model, priority = resolved[_rule_key(member)]
            jobs.append(
                job_fields(
                    user=user,
                    team=team,
                    gpu_model=gpu_model,
                    priority=priority,
                    request=member,
                    submitted_at=now,
                    array=array,
                    array_index=index,
                )
            )
        _insert_members(jobs)
        _record_submitted_events(array, user=user, now=now)
        _publish_array(array, {JobState.PENDING.value: len(jobs)})
        request_cycle()
    return array


def _stored_template(template: dict[str, Any]) -> dict[str, Any]:
    """The template as its JSON column keeps it. A deadline is the one job field whose value is
    no JSON type: it is kept as ISO 8601 text, the way the API writes a job's deadline (handed
    to the column as a datetime, the write failed and the submission with it)."""
    stored = dict(template)
    if isinstance(stored.get("deadline"), datetime):
        stored["deadline"] = stored["deadline"].isoformat()
    return stored


def _insert_members(members: list[dict[str, Any]]) -> None:
    """Write the array's jobs from their fields (``services.job_fields``).

    On PostgreSQL with COPY: building 5,000 model instances and Django's bulk INSERT (175,000
    parameter values prepared one by one in Python, then quoted into arrays) were most of a
    5,000-index submission; COPY streams plain values through psycopg's C adapters. The jobs'
    ids are not read back: the events are derived from the rows by array id, and the response
    is the array."""
    if connection.vendor != "postgresql":
        Job.objects.bulk_create([Job(**fields) for fields in members], batch_size=2000)
        return
    from psycopg.types.json import Jsonb

    columns = [f for f in Job._meta.concrete_fields if not f.primary_key]
    defaults = {f.name: f.get_default() for f in columns}

    def value(column: Field[Any, Any], fields: dict[str, Any]) -> object:
        given = fields[column.name] if column.name in fields else defaults[column.name]
        if given is None:
            return None
        if column.is_relation:
            return given.pk
        if isinstance(given, Enum):  # psycopg writes an enum's name; the column holds values
            return given.value
        if column.get_internal_type() == "JSONField":
            return Jsonb(given)
        return given

    # A concrete field has a column: the stubs type Field.column as optional for all fields.
    names = ", ".join(
        connection.ops.quote_name(f.column)  # type: ignore[arg-type]
        for f in columns
    )
    statement = f"COPY {Job._meta.db_table} ({names}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        for fields in members:
            copy.write_row([value(column, fields) for column in columns])


def _record_submitted_events(array: JobArray, *, user: User, now: datetime) -> None:
    """One ``submitted`` event per member, written by the database in one INSERT … SELECT.

    Building 5,000 JobEvent objects in Python cost about as much as the jobs themselves; the rows
    are all alike but for the job id and index, so the database derives them from the jobs."""
    event, job = JobEvent._meta, Job._meta
    prefix = f"submitted by {user.get_username()} as index "
    suffix = f" of array #{array.pk}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {event.db_table} (job_id, time, kind, message, data) "  # noqa: S608
            f"SELECT id, %s, 'submitted', %s || CAST(array_index AS TEXT) || %s, %s "
            f"FROM {job.db_table} WHERE array_id = %s",
            [now, prefix, suffix, "{}", array.pk],
        )


def _publish_array(array: JobArray, counts: dict[str, int]) -> None:
    # One message per array rather than one per job: a 5,000-index sweep must not flood the
    # channel layer (single job changes made later by the loop are still published per job).
    streams.publish(
        streams.team_group(array.team_id),
        {
            "type": "array.status",
            "array": array.pk,
            "team": array.team.slug,
            "name": array.name,
            "size": array.size,
            "counts": counts,
            "time": timezone.now().isoformat(),
        },
    )


def array_cancel(*, user: User, array_id: int) -> JobArray:
    """Cancel every live job of an array of one of the caller's teams, in one transaction.

    Another team's array is NotFound; viewers get a DomainError; an array with no live job left is
    a Conflict. GPUs of running members are released in the same transaction and their backends
    told to stop after commit. Members finished meanwhile keep their final state.
    """
    with transaction.atomic():
        array = array_list(user=user).filter(pk=array_id).first()
        if array is None:
            raise NotFound("no such job array", field="id")
        if not can_submit_to(user, array.team):
            raise Forbidden("viewers cannot cancel jobs", field="id")
        # Lock the live members (ordered, like the loop, to keep lock order stable) so the
        # loop's conditional starts either happen before us or find the job cancelled. Not
        # joined to their clusters: a member a cycle started while we waited for its lock comes
        # back fresh, but a joined row would be the one read before the wait (no cluster), and
        # stopping its run failed (a 500, nothing cancelled). Clusters are read after the lock.
        live = list(
            Job.objects.select_for_update(of=("self",))
            .select_related("team")
            .filter(array=array, state__in=list(LIVE_STATES))
            .order_by("id")
        )
        if not live:
            raise Conflict("no job of this array is live any more", field="state")
        clusters = Cluster.objects.in_bulk({job.cluster_id for job in live if job.cluster_id})
        for job in live:
            if job.cluster_id:
                job.cluster = clusters[job.cluster_id]
        now = timezone.now()
        jobs_cancel_locked(
            jobs=live, message=f"cancelled with array by {user.get_username()}", now=now
        )
        JobArray.objects.filter(pk=array.pk).update(cancelled_at=now)
        array.cancelled_at = now
        _publish_array(array, {JobState.CANCELLED.value: len(live)})
        request_cycle()
    return array_get(user=user, array_id=array.pk)


_COUNTS = {state.value: Count("jobs", filter=Q(jobs__state=state.value)) for state in JobState}


def array_list(*, user: User | AnonymousUser) -> QuerySet[JobArray]:
    """Arrays of the caller's teams (all for platform admins), newest first, each annotated with
    its members' count per state (``n_pending``, ``n_running``, …) in ONE query whatever the page
    size."""
    if not user.is_authenticated:
        return JobArray.objects.none()
    qs = JobArray.objects.all()
    if not user.is_superuser:
        team_ids = user.memberships.values("team_id")
        qs = qs.filter(team_id__in=team_ids)
    return qs.select_related("team", "submitter").annotate(
        **{f"n_{state}": count for state, count in _COUNTS.items()}
    )


def array_get(*, user: User | AnonymousUser, array_id: int) -> JobArray:
    """One array of the caller's teams; another team's array (or none) is NotFound."""
    array = array_list(user=user).filter(pk=array_id).first()
    if array is None:
        raise NotFound("no such job array", field="id")
    return array


def submit_team_ids(user: User) -> set[int] | None:
    """Teams whose arrays' environment values ``user`` may read (those they may submit to);
    None for platform admins (all). One query."""
    from tenants.models import SUBMIT_ROLES, Membership
    from tenants.permissions import is_platform_admin

    if is_platform_admin(user):
        return None
    return set(
        Membership.objects.filter(user=user, role__in=SUBMIT_ROLES).values_list(
            "team_id", flat=True
        )
    )


def shown_template(array: JobArray, *, may_see: set[int] | None) -> dict[str, Any]:
    """The array's template with its env values hidden and its command's secrets redacted unless
    the team is in ``may_see`` (``submit_team_ids``; None: everything shown)."""
    template = dict(array.template or {})
    visible = may_see is None or array.team_id in may_see
    if "env" in template:
        template["env"] = shown_env(template["env"], visible=visible)
    if isinstance(template.get("command"), str):
        template["command"] = shown_command(template["command"], visible=visible)
    return template


def array_counts(array: JobArray) -> dict[str, int]:
    """State -> number of members, from the annotation of :func:`array_list`."""
    return {state.value: getattr(array, f"n_{state.value}", 0) for state in JobState}


__all__ = [
    "HIDDEN_VALUE",
    "MAX_ARRAY_SIZE",
    "ArrayRequest",
    "array_cancel",
    "array_counts",
    "array_get",
    "array_list",
    "array_submit",
    "shown_env",
    "shown_template",
    "submit_team_ids",
]
