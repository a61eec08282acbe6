"""Reads of scheduler state a user can reach. Each starts from a team-scoped queryset.

(The scheduling loop's snapshot builder lives in ``scheduler.snapshot``.)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Prefetch, QuerySet

from core.errors import DomainError, NotFound, Unavailable
from tenants.models import Membership
from tenants.permissions import Caller, is_platform_admin
from tenants.selectors import team_get

from .env_visibility import may_see_env_values, shown_log
from .models import Allocation, Cluster, Job, JobEvent, Node
from .states import FINAL_STATES, JobState

log = logging.getLogger(__name__)


def job_list(*, user: Caller, filters: Mapping[str, str] | None = None) -> QuerySet[Job]:
    """The caller's teams' jobs, newest first, with what list views show in a bounded number of
    queries. A ``team`` filter naming a team the caller does not see (or none) is NotFound."""
    qs = (
        Job.objects.visible_to(user)
        .select_related("team", "submitter", "gpu_model", "priority_class", "cluster")
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
        qs = qs.filter(team=team_get(user=user, slug=team))
    if submitter := filters.get("submitter"):
        qs = qs.filter(submitter__username=submitter)
    return qs


def submitter_visible(*, user: Caller, username: str) -> bool:
    """Whether ``username`` names someone whose jobs ``user`` may list: the caller, a member of
    one of the caller's teams, or the submitter of a job the caller sees (someone who has left
    the team since); any user for a platform admin. A user only of other teams is False, as a
    name no one has is: the answer never tells who exists elsewhere. At most two queries."""
    if not user or not user.is_authenticated:
        return False
    if user.get_username() == username:
        return True
    if is_platform_admin(user):
        return get_user_model().objects.filter(username=username).exists()
    teams_of_caller = Membership.objects.filter(user=user).values("team_id")
    return (
        Membership.objects.filter(team_id__in=teams_of_caller, user__username=username).exists()
        or Job.objects.visible_to(user).filter(submitter__username=username).exists()
    )


def job_get(*, user: Caller, job_id: int) -> Job:
    """One job of the caller's teams; another team's job (or none) is NotFound."""
    job = job_list(user=user).filter(pk=job_id).first()
    if job is None:
        raise NotFound("no such job", field="id")
    return job


def job_events(*, user: Caller, job_id: int) -> QuerySet[JobEvent]:
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


def node_list(*, user: User | AnonymousUser) -> QuerySet[Node]:
    """Nodes are visible to every signed-in user (the cluster is shared); their jobs are not."""
    if not user.is_authenticated:
        return Node.objects.none()
    return Node.objects.select_related("cluster", "gpu_model").order_by("cluster__name", "name")


def cluster_backend_error(*, user: Caller, cluster: Cluster) -> str:
    """Why the cluster's backend last failed, as ``user`` may see it; empty while it answers.

    The recorded text is the backend's own (a submit's stderr, a Kubernetes API error body) and
    may echo any team's job: its name, command, environment or image. Platform admins see it
    whole; everyone else only that the backend failed and when, which is what they need to know
    why their job waits. Every surface that shows the error (the API, the cluster page) asks
    this function."""
    if not cluster.backend_error:
        return ""
    if is_platform_admin(user):
        return cluster.backend_error
    if cluster.backend_checked_at is None:
        return "the cluster's backend reported an error"
    when = cluster.backend_checked_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"the cluster's backend reported an error at {when}"


# --- attempts and logs -------------------------------------------------------------------------


@dataclass(frozen=True)
class JobAttempt:
    """One run of a job: where it ran, when, how it ended, what it lost and resumed from."""

    attempt: int
    nodes: list[str]
    gpus: int
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str  # running | preempted | requeued | succeeded | failed | cancelled
    reason: str
    resumed_from_s: float
    lost_gpu_s: float


def job_attempts(*, user: Caller, job_id: int) -> list[JobAttempt]:
    """Every attempt of one of the caller's teams' jobs, oldest first, from its allocations
    (which GPUs each attempt held) and its events (how each ended). Another team's job is
    NotFound."""
    job = job_get(user=user, job_id=job_id)
    held: dict[int, list[Allocation]] = {}
    for allocation in Allocation.objects.filter(job=job).select_related("node").order_by("id"):
        held.setdefault(allocation.attempt, []).append(allocation)
    events = list(JobEvent.objects.filter(job=job).order_by("time", "id"))
    starts = [e for e in events if e.kind == "started"]
    out: list[JobAttempt] = []
    resumed_from = 0.0
    for number in range(1, job.attempts + 1):
        # An allocation ended at its start held nothing: the time a run waited on the cluster,
        # reopened from its real start. Shown only for an attempt that never ran at all.
        held_some = [a for a in held.get(number, []) if a.ended_at != a.started_at]
        allocations = held_some or held.get(number, [])
        start = next((e for e in starts if (e.data or {}).get("attempt") == number), None)
        started_at = start.time if start else min((a.started_at for a in allocations), default=None)
        next_start = next(
            (e.time for e in starts if (e.data or {}).get("attempt") == number + 1), None
        )
        # The events between this attempt's start and the next one's say how it ended.
        window = [
            e
            for e in events
            if (started_at is None or e.time >= started_at)
            and (next_start is None or e.time < next_start)
        ]
        outcome, reason, lost = "running", "", 0.0
        for event in window:
            if event.kind == "preempted":
                outcome, reason = "preempted", event.message
            elif event.kind == "requeued":
                data = event.data or {}
                outcome, reason = "requeued", str(data.get("reason") or event.message)
                lost = float(data.get("lost_gpu_s") or 0.0)
            elif event.kind in ("succeeded", "failed", "cancelled"):
                outcome, reason = event.kind, event.message
        if number == job.attempts and job.state in FINAL_STATES:
            outcome = job.state
        ended = [a.ended_at for a in allocations]
        ended_at = None if not ended or None in ended else max(ended)  # type: ignore[type-var]
        out.append(
            JobAttempt(
                attempt=number,
                nodes=sorted({a.node.name for a in allocations}),
                gpus=len(allocations),
                started_at=started_at,
                ended_at=ended_at,
                outcome=outcome,
                reason=reason,
                resumed_from_s=resumed_from,
                lost_gpu_s=lost,
            )
        )
        requeue = next((e for e in reversed(window) if e.kind == "requeued"), None)
        if requeue is not None:
            resumed_from = float((requeue.data or {}).get("resume_from_s") or 0.0)
    return out


LOG_LIMIT_DEFAULT = 64 * 1024
LOG_LIMIT_MAX = 1024 * 1024
_CURSOR = re.compile(r"[A-Za-z0-9-]{1,64}")


@dataclass(frozen=True)
class JobLog:
    """A piece of one attempt's output. ``finished``: the attempt has ended, so once a read
    returns no text there is nothing more to follow in it."""

    job: Job
    attempt: int | None
    text: str
    cursor: str | None
    truncated: bool
    finished: bool


def attempt_finished(job: Job, attempt: int) -> bool:
    """The attempt will write no more output: a later one started, the job is over, or the job
    was requeued and waits for its next attempt."""
    return attempt < job.attempts or job.state in FINAL_STATES or job.state == JobState.PENDING


def job_log(
    *,
    user: Caller,
    job_id: int,
    attempt: int | None = None,
    cursor: str | None = None,
    limit_bytes: int = LOG_LIMIT_DEFAULT,
) -> JobLog:
    """Output of an attempt of one of the caller's teams' jobs (default: the latest), from its
    cluster's backend: without ``cursor`` the tail (at most ``limit_bytes``), with it what was
    written since. Another team's job is NotFound; a bad attempt, cursor or limit is a 400
    naming it; a backend that does not answer is Unavailable (503), never a 500.

    A caller who may not see the job's env values (a viewer of its team) reads the output with
    those values and the secrets of :func:`~scheduler.env_visibility.redact_text` masked
    (:func:`~scheduler.env_visibility.shown_log`), and in whole lines: a secret written across
    two reads would escape the mask, so a line the job has not finished is left for a later
    read (its cursor starts there), unless the attempt is over. A line longer than the read is
    broken after a blank, not inside a word."""
    job = job_get(user=user, job_id=job_id)
    return job_log_read(job=job, user=user, attempt=attempt, cursor=cursor, limit_bytes=limit_bytes)


def job_log_read(
    *,
    job: Job,
    user: Caller,
    attempt: int | None,
    cursor: str | None,
    limit_bytes: int = LOG_LIMIT_DEFAULT,
) -> JobLog:
    """:func:`job_log` for a job already read through a user-scoped selector."""
    from .backends import backend_run_ref, get_backend
    from .backends.base import BackendError, BackendRejected

    if not 1 <= limit_bytes <= LOG_LIMIT_MAX:
        raise DomainError(f"must be between 1 and {LOG_LIMIT_MAX}", field="limit_bytes")
    if cursor is not None and not _CURSOR.fullmatch(cursor):
        raise DomainError("not a cursor this API returned", field="cursor")
    if attempt is None:
        attempt = job.attempts or None
    elif not 1 <= attempt <= max(job.attempts, 1) or not job.attempts:
        raise DomainError(
            f"the job has {job.attempts} attempt{'s' if job.attempts != 1 else ''}",
            field="attempt",
        )
    cluster = job.cluster if job.cluster_id is not None else None
    if attempt is None or cluster is None:
        return JobLog(job, None, "", cursor, False, job.state in FINAL_STATES)
    try:
        chunk = get_backend(cluster).read_log(
            backend_run_ref(job, attempt), cursor=cursor, limit_bytes=limit_bytes
        )
    except BackendRejected as exc:
        raise DomainError(str(exc), field="cursor") from exc
    except BackendError as exc:
        log.warning("log of job %s attempt %s unavailable: %s", job.pk, attempt, exc)
        raise Unavailable(f"the cluster did not answer: {exc}", field="cluster") from exc
    finished = attempt_finished(job, attempt)
    text, next_cursor = chunk.text, chunk.cursor
    if not may_see_env_values(user, job.team):
        # Stop at the break unless what follows it is the attempt's last word: a finished
        # attempt's unfinished last line is shown whole (no later read would show it).
        held_back = chunk.at_limit or not finished
        if held_back and chunk.break_at is not None and chunk.break_cursor is not None:
            text, next_cursor = text[: chunk.break_at], chunk.break_cursor
        text = shown_log(text, env=job.env, visible=False)
    return JobLog(job, attempt, text, next_cursor, chunk.truncated, finished)
