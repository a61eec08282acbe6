"""From committed stream messages to ``Event`` rows: the notifications' only hook into the rest
of the platform (``core.streams.subscribe``, wired in ``apps.py``).

Runs in the publishing thread right after commit (a request, the scheduling cycle, a telemetry
tick), so it does one thing: translate the payloads it cares about and write them in one INSERT.
No recipient lookup, no rendering, no network: the dispatcher (Celery) does that later. A
failure here is logged by the stream publisher and never reaches the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from .events import EventKind
from .models import Event

# job.status "event" -> the notification it is.
_JOB_EVENTS = {
    "succeeded": EventKind.JOB_SUCCEEDED,
    "failed": EventKind.JOB_FAILED,
    "preempted": EventKind.JOB_PREEMPTED,
    "requeued": EventKind.JOB_REQUEUED,
}
_NODE_EVENTS = {"quarantined": EventKind.NODE_QUARANTINED, "released": EventKind.NODE_RELEASED}


def _team_id(group: str) -> int | None:
    prefix, _, rest = group.partition(".")
    return int(rest) if prefix == "team" and rest.isdigit() else None


def events_from(messages: Iterable[tuple[str, dict[str, Any]]]) -> list[Event]:
    """The ``Event`` rows (unsaved) that ``messages`` announce, in order. Pure translation."""
    now = timezone.now()
    out: list[Event] = []
    for group, payload in messages:
        kind = payload.get("type")
        team_id = _team_id(group)
        if kind in ("job.status", "jobs.status"):
            items = payload.get("jobs", []) if kind == "jobs.status" else [payload]
            for item in items:
                event = _JOB_EVENTS.get(item.get("event", ""))
                if event is not None and team_id is not None:
                    out.append(
                        Event(kind=event, team_id=team_id, job_id=item["job"], created_at=now)
                    )
        elif kind == "job.idle" and payload.get("idle") and team_id is not None:
            data = {"utilization": payload.get("utilization"), "since": payload.get("since")}
            out.append(
                Event(
                    kind=EventKind.JOB_IDLE,
                    team_id=team_id,
                    job_id=payload["job"],
                    data=data,
                    created_at=now,
                )
            )
        elif kind == "budget.alert" and team_id is not None:
            late = bool(payload.get("after_month_end"))
            # A hard stop refuses its own month's submissions: reached once that month is over
            # (its cost metered late), it refuses nothing, so it is told as a threshold.
            hard = bool(payload.get("hard_stop")) and payload.get("threshold", 0) >= 100
            hard = hard and not late
            data = {k: payload.get(k) for k in ("month", "threshold", "budget", "spend")}
            data["hard_stop"] = bool(payload.get("hard_stop"))
            data["after_month_end"] = late
            out.append(
                Event(
                    kind=EventKind.BUDGET_HARD_STOP if hard else EventKind.BUDGET_THRESHOLD,
                    team_id=team_id,
                    data=data,
                    created_at=now,
                )
            )
        elif kind == "quota_request.decided" and team_id is not None:
            data = {
                k: payload.get(k)
                for k in ("request", "status", "gpu_model", "guaranteed_gpus", "comment")
            }
            out.append(
                Event(kind=EventKind.QUOTA_DECIDED, team_id=team_id, data=data, created_at=now)
            )
        elif kind == "node.event" and payload.get("kind") in _NODE_EVENTS:
            data = {"node": payload.get("node"), "message": payload.get("message", "")}
            out.append(Event(kind=_NODE_EVENTS[payload["kind"]], data=data, created_at=now))
    return out


def on_committed(messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Stream listener: record the notifiable events of one committed batch (one INSERT)."""
    rows = events_from(messages)
    if rows:
        Event.objects.bulk_create(rows, batch_size=1000)
