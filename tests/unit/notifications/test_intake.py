"""The stream listener's translation: which committed payloads are notifications. Pure."""

from __future__ import annotations

from notifications.intake import events_from


def _job(event, job=1, **extra):
    return {"type": "job.status", "job": job, "state": "x", "event": event, **extra}


def test_job_transitions_worth_telling():
    messages = [
        ("team.3", _job("succeeded", 1)),
        ("team.3", _job("failed", 2)),
        ("team.3", _job("preempted", 3)),
        ("team.3", _job("requeued", 4)),
        ("team.3", _job("started", 5)),
        ("team.3", _job("submitted", 6)),
        (
            "team.3",
            {"type": "jobs.status", "jobs": [_job("failed", 7), {"type": "job.status", "job": 8}]},
        ),
    ]
    got = [(e.kind, e.team_id, e.job_id) for e in events_from(messages)]
    assert got == [
        ("job.succeeded", 3, 1),
        ("job.failed", 3, 2),
        ("job.preempted", 3, 3),
        ("job.requeued", 3, 4),
        ("job.failed", 3, 7),
    ]


def test_other_events():
    messages = [
        ("team.2", {"type": "job.idle", "job": 9, "idle": True, "utilization": 1.5}),
        ("team.2", {"type": "job.idle", "job": 9, "idle": False}),
        (
            "team.2",
            {"type": "budget.alert", "threshold": 80, "hard_stop": True, "month": "2026-12"},
        ),
        ("team.2", {"type": "budget.alert", "threshold": 100, "hard_stop": True}),
        ("team.2", {"type": "budget.alert", "threshold": 100, "hard_stop": False}),
        ("team.2", {"type": "quota_request.decided", "request": 5, "status": "approved"}),
        ("admin", {"type": "node.event", "node": "n1", "kind": "quarantined", "message": "ECC"}),
        ("admin", {"type": "node.event", "node": "n1", "kind": "failed", "message": "down"}),
        ("admin", {"type": "node.event", "node": "n1", "kind": "released", "message": ""}),
        ("cluster", {"type": "node.status", "node": "n1"}),
    ]
    got = [(e.kind, e.team_id) for e in events_from(messages)]
    assert got == [
        ("job.idle", 2),
        ("budget.threshold", 2),
        ("budget.hard_stop", 2),
        ("budget.threshold", 2),
        ("quota.decided", 2),
        ("node.quarantined", None),
        ("node.released", None),
    ]


def test_job_payloads_name_the_transition_from_the_row():
    from scheduler.models import Job
    from scheduler.transitions import job_event_kind

    assert job_event_kind(Job(state="pending")) == "submitted"
    assert job_event_kind(Job(state="pending", requeued=True)) == "requeued"
    assert job_event_kind(Job(state="running"), {"n1": [0]}) == "started"
    assert job_event_kind(Job(state="running")) == "resized"
    for state in ("preempted", "succeeded", "failed", "cancelled"):
        assert job_event_kind(Job(state=state)) == state
