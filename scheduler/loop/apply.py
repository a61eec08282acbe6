"""Apply: the engine's decisions written to the database in ONE transaction.

Starts and preemptions go through ``scheduler.transitions`` (conditional UPDATEs; every GPU
guarded by the database's partial unique constraint), so applying the same decisions twice
changes nothing and a racing cycle cannot double-allocate. The pending jobs' reasons and start
estimates are written here; only reasons whose text changed are written and streamed. Nothing
here talks to a backend: that is ``enforce``, after commit.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from core import streams
from scheduler.policy import Decisions, Snapshot, Start
from scheduler.policy.ranking import DEADLINE_MISS, deadline_warning
from scheduler.policy.routing import explain_starts

from ..locks import key_share_skip_locked
from ..models import Job, JobEvent
from ..models import Node as NodeRow
from ..snapshot import SnapshotIndex
from ..states import JobState
from ..transitions import JobStart, job_preempt, job_start_many

log = logging.getLogger(__name__)


@dataclass
class Applied:
    """What one application of the decisions changed: jobs started and preempted, and how many
    pending jobs had their reason refreshed."""

    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pending: int = 0


def apply_decisions(
    decisions: Decisions,
    *,
    index: SnapshotIndex,
    now: datetime,
    snapshot: Snapshot | None = None,
) -> Applied:
    """Write the decisions in one transaction. Idempotent: re-applying changes nothing.

    ``snapshot`` (the one the decisions came from) lets a job that starts too late for its
    deadline say so as it starts (``_record_late_starts``)."""
    result = Applied()
    with transaction.atomic():
        result.started = _apply_starts(decisions.start, index, now)
        if snapshot is not None:
            _record_late_starts(decisions.start, result.started, snapshot, index, now)
            _record_routes(decisions.start, result.started, snapshot, index, now)
        for preempt in decisions.preempt:
            job_pk = index.job_pk.get(preempt.job)
            if job_pk is not None and job_preempt(
                job_pk=job_pk, reason=preempt.reason, grace_s=preempt.grace_s, now=now
            ):
                result.preempted.append(job_pk)
        if decisions.resize:
            # the snapshot hands no running job as elastic (see ``snapshot``), so the engine
            # has nothing to resize; a resize no backend carries out is not written
            log.error(
                "ignored %s elastic resizes: no backend resizes a running job",
                len(decisions.resize),
            )
        result.pending = _apply_pending(decisions, index)
    return result


def _apply_starts(starts: Sequence[Start], index: SnapshotIndex, now: datetime) -> list[int]:
    """Start the engine's starts whose job and placement still resolve (one cluster each) on
    nodes still as the snapshot read them (``_nodes_as_read``)."""
    as_read = _nodes_as_read(starts, index)
    resolved = []
    for start in starts:
        job_pk = index.job_pk.get(start.job)
        if job_pk is None:
            continue
        if not as_read.issuperset(start.placement):
            log.info(
                "job %s not started: a node of its placement changed since the snapshot", job_pk
            )
            continue
        clusters = {index.node_by_name[name].cluster_id for name in start.placement}
        if len(clusters) != 1:
            log.error("engine placed job %s across clusters %s; not started", job_pk, clusters)
            continue
        resolved.append(
            JobStart(
                job_pk=job_pk,
                cluster_id=clusters.pop(),
                placement={n: list(g) for n, g in sorted(start.placement.items())},
                workers=start.workers,
            )
        )
    return job_start_many(starts=resolved, nodes=index.node_by_name, now=now)


# What the snapshot read of a node that an admin's action or delete changes (drain, quarantine,
# retirement, an edit of its shape, its cluster disabled): a start placed from the old values is
# not made. ``_as_read`` reads the same from the snapshot's row.
_NODE_AS_READ = ("name", "cluster_id", "gpu_count", "state", "retiring_since", "cluster__enabled")


def _as_read(node: NodeRow) -> tuple[Any, ...]:
    return (
        node.name,
        node.cluster_id,
        node.gpu_count,
        node.state,
        node.retiring_since,
        node.cluster.enabled,
    )


def _nodes_as_read(starts: Sequence[Start], index: SnapshotIndex) -> set[str]:
    """The names of the starts' nodes still as the snapshot read them, locked so that no
    delete or admin action on them lands before the apply commits.

    Between the snapshot and this transaction an admin may delete a node (one without history),
    drain, quarantine or retire it, or disable its cluster. A start on a deleted node failed its
    allocations' foreign key at commit, which undid every start of the cycle; on the others it
    put a job where nothing new may start. A node whose action is in progress (its row locked)
    counts as changed; an action on it after this lock waits for the commit and finds the job
    there, as if it had come a moment later. (The cluster's row is not locked: a disable
    committed after this read lets the cycle's starts there go through.)"""
    read = {index.node_by_name[name] for start in starts for name in start.placement}
    if not read:
        return set()
    by_pk = {node.pk: node for node in read}
    now_values = key_share_skip_locked(NodeRow.objects.filter(pk__in=by_pk), *_NODE_AS_READ)
    return {by_pk[pk].name for pk, values in now_values.items() if values == _as_read(by_pk[pk])}


def _record_late_starts(
    starts: Sequence[Start],
    started: list[int],
    snapshot: Snapshot,
    index: SnapshotIndex,
    now: datetime,
) -> None:
    """A ``deadline_at_risk`` event on each job started now whose planned run time (its limit,
    else the prediction, else the engine's default) ends after its deadline. A job that starts at
    once never waits, so its why never says it will miss; this is where it says so, early. A job
    whose wait already said so (and recorded the event) is not told twice."""
    due = {p.id: p for p in snapshot.pending if p.deadline is not None}
    if not due or not started:
        return
    started_pks = set(started)
    events = []
    for start in starts:
        job, pk = due.get(start.job), index.job_pk.get(start.job)
        if job is None or pk not in started_pks:
            continue
        shown = index.pending_shown.get(pk)
        if shown is not None and (shown[3] or "").startswith(DEADLINE_MISS):
            continue
        note = deadline_warning(job, snapshot.now, snapshot.now, snapshot.config.default_runtime_s)
        if note:
            events.append(JobEvent(job_id=pk, time=now, kind="deadline_at_risk", message=note))
    if events:
        JobEvent.objects.bulk_create(events)


def _record_routes(
    starts: Sequence[Start],
    started: list[int],
    snapshot: Snapshot,
    index: SnapshotIndex,
    now: datetime,
) -> None:
    """A ``routed`` event on each job started now on a routed snapshot: where it runs and why
    there (the expected total the placement weighed against the other pools), for its page."""
    if not snapshot.clusters or not started:
        return
    started_pks = set(started)
    chosen = [s for s in starts if index.job_pk.get(s.job) in started_pks]
    events = []
    for job_id, route in explain_starts(snapshot, chosen).items():
        events.append(
            JobEvent(
                job_id=index.job_pk[job_id],
                time=now,
                kind="routed",
                message=route_summary(route),
                data=route,
            )
        )
    JobEvent.objects.bulk_create(events)


def route_summary(route: dict[str, Any]) -> str:
    """One line for a ``routed`` event: the pool, its expected total and why it won."""
    usable = [a for a in route["alternatives"] if a["excluded"] is None]
    cheaper = [a for a in usable if a["expected_cost"] < route["expected_cost"]]
    if route["preferred"]:
        why = "the job prefers it"
    elif not usable:
        why = "the only pool its constraints allow"
    elif not cheaper:
        why = f"the cheapest of {len(usable) + 1} allowed pools"
    elif not route.get("confined") and all(a.get("confined") for a in cheaper):
        why = "the cheaper pools are on clusters some jobs may only use: it leaves them to those"
    else:
        why = "the cheapest allowed pool that could start it now"
    egress = f", {route['egress_cost']:.2f} of it data movement" if route["egress_cost"] else ""
    return f"runs on {route['pool']}: expected {route['expected_cost']:.2f}{egress}; {why}"


PENDING_PUBLISH_MAX = 200


def _apply_pending(decisions: Decisions, index: SnapshotIndex) -> int:
    """Store each pending job's reason and estimate; only rows whose text changed are written.

    Estimates are rounded to the minute: users read them as "about when", and exact seconds
    would rewrite thousands of rows every cycle as reservations shift slightly.
    """
    wanted: dict[int, tuple[str, datetime | None]] = {}
    # Jobs of one shape waiting for one reason share the engine's text: convert each text once.
    shown_why: dict[str, str] = {}
    for item in decisions.pending:
        job_pk = index.job_pk.get(item.job)
        if job_pk is None:
            continue
        estimate = None
        if item.estimated_start is not None:
            estimate = _estimate_datetime(item.estimated_start)
        why = shown_why.get(item.why)
        if why is None:
            why = shown_why[item.why] = _humanize_times(item.why)[:2000]
        wanted[job_pk] = (why, estimate)
    # Kept from the engine: confined to retired clusters (scheduler.snapshot), no estimate.
    wanted.update((pk, (why, None)) for pk, why in index.retired_why.items())
    if not wanted:
        return 0
    changed: list[tuple[int, str, datetime | None, int, str, str]] = []
    for job_pk, (why, estimate) in wanted.items():
        shown = index.pending_shown.get(job_pk)
        if shown is None:
            continue
        team_id, team_slug, name, old_why, old_estimate = shown
        if old_why != why or old_estimate != estimate:
            changed.append((job_pk, why, estimate, team_id, team_slug, name))
    _write_pending_reasons([(pk, why, estimate) for pk, why, estimate, *_ in changed])
    _record_deadline_risks(changed, index)
    # One jobs.status batch per team per cycle, not one message per job (capped: a backlog's
    # first cycle can change thousands of reasons; the pages re-read on connect anyway).
    now = timezone.now().isoformat()
    batches: dict[int, list[streams.JobStatusPayload]] = {}
    for job_pk, why, estimate, team_id, team_slug, name in changed[:PENDING_PUBLISH_MAX]:
        batches.setdefault(team_id, []).append(
            {
                "type": "job.status",
                "job": job_pk,
                "team": team_slug,
                "name": name,
                "state": JobState.PENDING.value,
                "why": why,
                "estimated_start": estimate.isoformat() if estimate else None,
                "placement": {},
                "time": now,
            }
        )
    for team_id, jobs in batches.items():
        batch: streams.JobsStatusPayload = {"type": "jobs.status", "jobs": jobs, "time": now}
        # (a dict of its own: streams.publish takes a plain dict, which a TypedDict is not to mypy)
        streams.publish(streams.team_group(team_id), dict(batch))
    return len(wanted)


def _record_deadline_risks(
    changed: list[tuple[int, str, datetime | None, int, str, str]], index: SnapshotIndex
) -> None:
    """A ``deadline_at_risk`` event on each job whose why now says it will miss its deadline and
    did not before, so the timeline (and whoever watches it) hears it once, early."""
    now = timezone.now()
    events = [
        JobEvent(job_id=pk, time=now, kind="deadline_at_risk", message=why.split(";", 1)[0])
        for pk, why, *_ in changed
        if why.startswith(DEADLINE_MISS)
        and not (index.pending_shown[pk][3] or "").startswith(DEADLINE_MISS)
    ]
    if events:
        JobEvent.objects.bulk_create(events)


_ENGINE_TIME = re.compile(r"\bt=(\d+(?:\.\d+)?)")
# Estimates past this are shown as unknown: a queue of year-long jobs can put the last
# reservation beyond the calendar ``datetime`` can hold (year 9999).
LATEST_ESTIMATE = datetime(9000, 1, 1, tzinfo=UTC)


def _estimate_datetime(epoch_s: float) -> datetime | None:
    """An engine time (epoch seconds) rounded to the minute, or None when it is not a date."""
    try:
        if not epoch_s < LATEST_ESTIMATE.timestamp():
            return None
        return datetime.fromtimestamp(round(epoch_s / 60) * 60, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _humanize_times(why: str) -> str:
    """The engine speaks in clock seconds (``t=1764685234``); people read ``14:05 UTC``."""

    def shown(match: re.Match[str]) -> str:
        at = _estimate_datetime(float(match.group(1)))
        return "an unknown time" if at is None else at.strftime("%Y-%m-%d %H:%M UTC")

    return _ENGINE_TIME.sub(shown, why)


def _write_pending_reasons(rows: list[tuple[int, str, datetime | None]]) -> None:
    """One UPDATE … FROM unnest(arrays) on PostgreSQL (bulk_update's CASE chains dominated the
    cycle at 10,000 pending jobs); bulk_update elsewhere."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        Job.objects.bulk_update(
            [Job(pk=pk, why_pending=why, estimated_start=est) for pk, why, est in rows],
            ["why_pending", "estimated_start"],
            batch_size=500,
        )
        return
    table = Job._meta.db_table
    ids, whys, estimates = zip(*rows, strict=True)
    # Three array parameters whatever the row count: cheap to bind and to plan.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS j SET why_pending = v.why, estimated_start = v.est "
            "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS v(id, why, est) "
            "WHERE j.id = v.id AND j.state = 'pending'",
            [list(ids), list(whys), list(estimates)],
        )
