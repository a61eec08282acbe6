"""The job state machine, in one place.

    pending ──start──▶ running ──finish──▶ succeeded | failed
       ▲                 │  │
       │                 │  └──preempt──▶ preempted ──released──▶ pending
       └────requeue──────┘                 (grace period for a final checkpoint)
    any live state ──cancel──▶ cancelled

Transitions are applied by services as conditional UPDATEs (``WHERE state IN allowed_from``), so
two workers racing on one job cannot both move it.
"""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    PREEMPTED = "preempted", "Preempted (stopping)"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


LIVE_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.PREEMPTED})
FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# States in which a job holds GPUs.
HOLDING_STATES = frozenset({JobState.RUNNING, JobState.PREEMPTED})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTED,
            JobState.PENDING,  # requeue after a node failure
        }
    ),
    JobState.PREEMPTED: frozenset(
        {JobState.PENDING, JobState.CANCELLED, JobState.SUCCEEDED, JobState.FAILED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalTransition(Exception):
    """A job was asked to move to a state its current state does not allow."""

    def __init__(self, current: str, target: str):
        super().__init__(f"cannot move a {current} job to {target}")
        self.current = current
        self.target = target


def sources_for(target: JobState) -> frozenset[JobState]:
    """The states from which ``target`` may be reached."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)


def check_transition(current: str, target: str) -> None:
    """Raise :class:`IllegalTransition` unless ``current → target`` is allowed."""
    if JobState(target) not in TRANSITIONS[JobState(current)]:
        raise IllegalTransition(current, target)
