"""What can be notified, through which channels, and who hears it by default.

Pure data: no queries. ``EventKind`` values are stable identifiers (they appear in webhook
bodies and in the API); their labels are what people read.
"""

from __future__ import annotations

from django.db import models


class EventKind(models.TextChoices):
    JOB_SUCCEEDED = "job.succeeded", "Job finished"
    JOB_FAILED = "job.failed", "Job failed"
    JOB_PREEMPTED = "job.preempted", "Job preempted"
    JOB_REQUEUED = "job.requeued", "Job requeued"
    JOB_IDLE = "job.idle", "Job idle (GPUs unused)"
    BUDGET_THRESHOLD = "budget.threshold", "Budget threshold reached"
    BUDGET_HARD_STOP = "budget.hard_stop", "Budget hard stop"
    QUOTA_DECIDED = "quota.decided", "Quota request decided"
    NODE_QUARANTINED = "node.quarantined", "Node quarantined"
    NODE_RELEASED = "node.released", "Node released"
    TEST = "test", "Test message"


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "My webhooks"


JOB_EVENTS = frozenset(
    {
        EventKind.JOB_SUCCEEDED,
        EventKind.JOB_FAILED,
        EventKind.JOB_PREEMPTED,
        EventKind.JOB_REQUEUED,
        EventKind.JOB_IDLE,
    }
)
# Heard by platform admins only (never sent to team webhooks).
ADMIN_EVENTS = frozenset({EventKind.NODE_QUARANTINED, EventKind.NODE_RELEASED})
# Everything a person or a team hook can subscribe to (the test message is not an event).
SUBSCRIBABLE = tuple(kind for kind in EventKind if kind != EventKind.TEST)
TEAM_HOOK_EVENTS = tuple(kind for kind in SUBSCRIBABLE if kind not in ADMIN_EVENTS)

# Defaults when a user has not chosen: email for what needs a person's attention; preemptions
# and requeues are handled by the platform (the job resumes from its checkpoint), so they are
# opt-in by email. A personal webhook hears everything until told otherwise.
DEFAULT_ON: dict[str, frozenset[str]] = {
    Channel.EMAIL: frozenset(
        {
            EventKind.JOB_SUCCEEDED,
            EventKind.JOB_FAILED,
            EventKind.JOB_IDLE,
            EventKind.BUDGET_THRESHOLD,
            EventKind.BUDGET_HARD_STOP,
            EventKind.QUOTA_DECIDED,
            EventKind.NODE_QUARANTINED,
            EventKind.NODE_RELEASED,
        }
    ),
    Channel.WEBHOOK: frozenset(SUBSCRIBABLE),
}


def events_for(*, is_platform_admin: bool) -> tuple[str, ...]:
    """The events a user may choose among (node events are for platform admins)."""
    return tuple(k for k in SUBSCRIBABLE if is_platform_admin or k not in ADMIN_EVENTS)
