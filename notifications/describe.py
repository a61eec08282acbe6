"""What an event says: its title, detail and portal link, read from the rows it is about.

Used when a message is rendered, on the events it lists (at most ``render.MAX_LISTED``), so a
5,000-event message reads 50 jobs, not 5,000. Reads only, in a fixed number of queries; an event
whose job or team is gone keeps a plain title.
"""

from __future__ import annotations

from django.conf import settings

from tenants.models import Team

from .events import ADMIN_EVENTS, JOB_EVENTS, EventKind
from .models import Event

# By the event's kind as stored (a str; EventKind members are equal to their values).
_VERBS: dict[str, str] = {
    EventKind.JOB_SUCCEEDED: "finished",
    EventKind.JOB_FAILED: "failed",
    EventKind.JOB_PREEMPTED: "was preempted",
    EventKind.JOB_REQUEUED: "was requeued",
    EventKind.JOB_IDLE: "is idle",
}
# The job's timeline event whose message explains the notification (exit code, reason).
_TIMELINE_KIND: dict[str, str] = {
    EventKind.JOB_SUCCEEDED: "succeeded",
    EventKind.JOB_FAILED: "failed",
    EventKind.JOB_PREEMPTED: "preempted",
    EventKind.JOB_REQUEUED: "requeued",
}


def portal_url(path: str) -> str:
    base: str = settings.PORTAL_URL
    return base.rstrip("/") + path


def describe(events: list[Event]) -> None:
    """Fill ``title``, ``detail`` and ``link`` of ``events`` that have no title yet (in memory)."""
    todo = [e for e in events if not e.title]
    if not todo:
        return
    _describe_jobs([e for e in todo if e.kind in JOB_EVENTS])
    teams = Team.objects.in_bulk({e.team_id for e in todo if e.team_id})
    for event in todo:
        if event.kind in JOB_EVENTS:
            continue
        team = teams.get(event.team_id)
        slug = team.slug if team else "?"
        data = event.data
        if event.kind == EventKind.BUDGET_HARD_STOP:
            event.title = (
                f"Budget of team {slug} for {data.get('month')} is used up: new jobs are refused"
            )
        elif event.kind == EventKind.BUDGET_THRESHOLD:
            event.title = (
                f"Budget of team {slug} for {data.get('month')}: {data.get('threshold')}% reached"
            )
            if data.get("after_month_end"):
                event.title += " (metered after the month ended)"
        if event.kind in (EventKind.BUDGET_THRESHOLD, EventKind.BUDGET_HARD_STOP):
            event.detail = f"spent {data.get('spend')} of {data.get('budget')}"
            event.link = portal_url(f"/billing/teams/{slug}/")
        elif event.kind == EventKind.QUOTA_DECIDED:
            event.title = (
                f"Quota request #{data.get('request')} for team {slug} {data.get('status')}"
            )
            parts = [f"{data.get('guaranteed_gpus')} × {data.get('gpu_model')} guaranteed"]
            if data.get("comment"):
                parts.append(str(data["comment"]))
            event.detail = "; ".join(parts)[:1000]
            event.link = portal_url("/teams/requests/")
        elif event.kind in ADMIN_EVENTS:
            verb = "quarantined" if event.kind == EventKind.NODE_QUARANTINED else "released"
            event.title = f"Node {data.get('node')} {verb}"
            event.detail = str(data.get("message") or "")[:1000]
            event.link = portal_url("/cluster/")
        else:
            event.title = event.get_kind_display()


def _describe_jobs(events: list[Event]) -> None:
    from scheduler.models import Job, JobEvent

    ids = {e.job_id for e in events if e.job_id}
    if not ids:
        return
    jobs = Job.objects.select_related("team").in_bulk(ids)
    said: dict[tuple[int, str], str] = {}
    for job_id, kind, message in (
        JobEvent.objects.filter(job_id__in=ids, kind__in=list(_TIMELINE_KIND.values()))
        .order_by("job_id", "kind", "-time", "-id")
        .values_list("job_id", "kind", "message")
    ):
        said.setdefault((job_id, kind), message)
    for event in events:
        job = jobs.get(event.job_id)
        if job is None:
            event.title = f"Job #{event.job_id} {_VERBS[event.kind]}"
            continue
        event.title = f"Job {job.name} (#{job.pk}) {_VERBS[event.kind]}"[:300]
        if event.kind == EventKind.JOB_IDLE:
            util = event.data.get("utilization")
            event.detail = (
                f"its GPUs averaged {util:.1f}% utilization"
                if isinstance(util, int | float)
                else "its GPUs are unused"
            ) + f" (team {job.team.slug})"
        else:
            explained = said.get((job.pk, _TIMELINE_KIND[event.kind]), "")
            event.detail = ", ".join(x for x in (explained, f"team {job.team.slug}") if x)[:1000]
        event.link = portal_url(f"/jobs/{job.pk}/")
