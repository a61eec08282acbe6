"""Checks a new submission must pass besides its own fields, contributed by the apps above the
scheduler (billing's hard-stop budgets), so the scheduler never imports them.

An app registers a check in its ``AppConfig.ready``; ``job_submit`` and ``array_submit`` run
every check inside their transaction, before anything is written. A check raises a
``DomainError`` naming the field to refuse the submission.
"""

from __future__ import annotations

from collections.abc import Callable

from tenants.models import Team

SubmissionCheck = Callable[..., None]  # called as check(team=team)

_checks: list[SubmissionCheck] = []


def register_submission_check(check: SubmissionCheck) -> None:
    """Add ``check`` (idempotent: a check registered twice runs once)."""
    if check not in _checks:
        _checks.append(check)


def check_submission(*, team: Team) -> None:
    """Run every registered check for a submission to ``team``; the first refusal raises."""
    for check in _checks:
        check(team=team)
