"""Failure causes and loss causes from the messages this codebase writes (no database)."""

from __future__ import annotations

import pytest

from scheduler.outcomes import failure_cause, interruption_limit_reason, loss_cause


@pytest.mark.parametrize(
    "message,cause",
    [
        ("exit code 1", "user_error"),
        ("worker 0: exit code 137", "user_error"),
        ("", "user_error"),
        ("time limit reached", "timeout"),  # Slurm TIMEOUT
        ("runtime limit exceeded", "timeout"),  # Kubernetes DeadlineExceeded
        (
            "preemption limit: interrupted 5 times (last: preempted); not requeued again",
            "preemption_limit",
        ),
        (
            "node failure (node lost); interrupted 5 times, the limit: not requeued again",
            "node_failure",
        ),
        ("cluster slurm-a refused the job: invalid env name", "platform"),
        ("could not be started on cluster a (ValueError: x)", "platform"),
        ("its status from cluster a could not be applied (KeyError: 'x')", "platform"),
    ],
)
def test_failure_cause(message, cause):
    assert failure_cause(message) == cause


@pytest.mark.parametrize(
    "reason,cause",
    [
        ("preempted", "preemption"),
        ("node failure (node lost)", "node_failure"),
        # what the loop writes when it sees a node down under a job (_requeue_jobs_on)
        ("node gpu-a-17 failed", "node_failure"),
        ("preempted by Slurm", "preemption"),
        ("the backend has no record of the run", "other"),
    ],
)
def test_loss_cause(reason, cause):
    assert loss_cause(reason) == cause


def test_interruption_limit(settings):
    settings.JOB_MAX_INTERRUPTIONS = 3
    assert interruption_limit_reason(attempts=2, reason="preempted") is None
    assert failure_cause(interruption_limit_reason(attempts=3, reason="preempted")) == (
        "preemption_limit"
    )
    node = interruption_limit_reason(attempts=3, reason="node failure (node lost)")
    assert failure_cause(node) == "node_failure"
    settings.JOB_MAX_INTERRUPTIONS = 0
    assert interruption_limit_reason(attempts=99, reason="preempted") is None
