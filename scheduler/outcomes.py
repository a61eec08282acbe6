"""How jobs ended, and how much work was lost, per day: the success-rate view of a team or of the
platform (issue 24, item 5).

A job that ended in the window counts once, on the day it ended, as ``succeeded``, ``cancelled``
or failed by cause:

- ``timeout``: it reached its runtime limit (Slurm TIMEOUT, Kubernetes DeadlineExceeded);
- ``preemption_limit``: it was interrupted more times than the platform allows;
- ``node_failure``: the node it ran on failed and it could not be resumed;
- ``platform``: the platform could not run or observe it (a cluster refusal, a status it could
  not apply);
- ``user_error``: anything else: the program exited non-zero or the job asked for something
  impossible.

The cause is read from the job's ``failed`` event (its message is the backend's reason or the
loop's ``job_fail`` reason, both written by this codebase): :func:`failure_cause` is the one
place that maps them. Lost work is the GPU-hours since the last checkpoint that requeues threw
away (the ``requeued`` events' ``lost_gpu_s``), by what interrupted the run.

Deadlines: each job with a deadline counts once, on the day its outcome became certain. It met
its deadline when it succeeded by then (counted on the day it ended). It missed it when it failed
before its deadline (counted on the day it failed), or when the deadline passed and the job had not
succeeded: still waiting, running, or ended later in any way, cancelled included (counted on the
deadline's day, so a job still waiting past its deadline is a miss at once, not only once it ends,
and a day's count never changes afterwards). A job cancelled before its deadline counts neither
way (as for the success rate). The hit rate is met / (met + missed).

Reads are scoped like every other read: a member sees their teams, a platform admin every team;
naming a team the caller does not belong to is NotFound.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db.models import F, Q

from core.errors import FieldErrors, NotFound
from tenants.models import Membership, Team

from .models import Job, JobEvent
from .states import JobState

FAILURE_CAUSES = ("user_error", "node_failure", "preemption_limit", "timeout", "platform")
OUTCOMES = ("succeeded", *(f"failed_{c}" for c in FAILURE_CAUSES), "cancelled")
LOSS_CAUSES = ("preemption", "node_failure", "other")
MAX_DAYS = 366

_TIMEOUT = ("time limit", "runtime limit", "timeout", "deadlineexceeded", "deadline exceeded")
_PREEMPTION_LIMIT = ("preemption limit", "interruption limit")
_NODE = ("node failure", "node failed", "node lost", "node_fail", "node down")
# "node gpu-a-17 failed": the loop's reason when it sees a node down under a job
_NODE_NAMED = re.compile(r"\bnode \S+ failed\b")
_PLATFORM = (
    "refused the job",
    "could not be started",
    "could not be stopped",
    "could not report",
    "could not be applied",
    "no record of the run",
)


def failure_cause(message: str) -> str:
    """The cause of a failure from the message of the job's ``failed`` event."""
    text = (message or "").lower()
    if any(n in text for n in _TIMEOUT):
        return "timeout"
    if any(n in text for n in _PREEMPTION_LIMIT):
        return "preemption_limit"
    if any(n in text for n in _NODE):
        return "node_failure"
    if any(n in text for n in _PLATFORM):
        return "platform"
    return "user_error"


def interruption_limit_reason(*, attempts: int, reason: str) -> str | None:
    """The failure reason when a run interrupted for ``reason`` was the job's last allowed
    attempt (``JOB_MAX_INTERRUPTIONS`` interruptions, 0: no limit), else None (requeue it)."""
    from django.conf import settings

    limit = int(getattr(settings, "JOB_MAX_INTERRUPTIONS", 0) or 0)
    if limit <= 0 or attempts < limit:
        return None
    if loss_cause(reason) == "node_failure":
        return f"{reason}; interrupted {attempts} times, the limit: not requeued again"
    return f"preemption limit: interrupted {attempts} times (last: {reason}); not requeued again"


def loss_cause(reason: str) -> str:
    """What interrupted a requeued run, from the requeue's reason."""
    text = (reason or "").lower()
    if text.startswith("preempt"):
        return "preemption"
    if any(n in text for n in _NODE) or _NODE_NAMED.search(text):
        return "node_failure"
    return "other"


@dataclass
class OutcomeDay:
    day: date
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    lost_gpu_hours: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(LOSS_CAUSES, 0.0)
    )
    deadline_met: int = 0
    deadline_missed: int = 0

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    @property
    def failed(self) -> int:
        return sum(self.counts[f"failed_{c}"] for c in FAILURE_CAUSES)


@dataclass
class OutcomeReport:
    teams: list[str]
    start: date
    end: date
    days: list[OutcomeDay]

    def totals(self) -> OutcomeDay:
        total = OutcomeDay(day=self.end)
        for day in self.days:
            for key, n in day.counts.items():
                total.counts[key] += n
            for key, hours in day.lost_gpu_hours.items():
                total.lost_gpu_hours[key] += hours
            total.deadline_met += day.deadline_met
            total.deadline_missed += day.deadline_missed
        return total

    def as_dict(self) -> dict[str, Any]:
        total = self.totals()
        ended = total.counts["succeeded"] + total.failed
        return {
            "teams": self.teams,
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "totals": _day_dict(total) | {"day": None},
            # Of the jobs that ran to an end (cancelled ones left out): the share that succeeded.
            "success_rate": round(total.counts["succeeded"] / ended, 4) if ended else None,
            "deadline_hit_rate": (
                round(total.deadline_met / due, 4)
                if (due := total.deadline_met + total.deadline_missed)
                else None
            ),
            "days": [_day_dict(d) for d in self.days],
        }


def _day_dict(day: OutcomeDay) -> dict[str, Any]:
    return {
        "day": day.day.isoformat(),
        "finished": day.finished,
        "failed": day.failed,
        **day.counts,
        "lost_gpu_hours": {k: round(v, 3) for k, v in day.lost_gpu_hours.items()},
        "deadline_met": day.deadline_met,
        "deadline_missed": day.deadline_missed,
    }


def _teams_for(user: User, team_slug: str | None) -> list[Team]:
    if user.is_superuser:
        teams = Team.objects.all()
    else:
        teams = Team.objects.filter(pk__in=Membership.objects.filter(user=user).values("team_id"))
    if team_slug:
        teams = teams.filter(slug=team_slug)
        if not teams.exists():
            raise NotFound("no such team", field="team")
    return list(teams.order_by("slug"))


def outcome_report(
    *, user: User, now: datetime, days: int = 30, team: str | None = None
) -> OutcomeReport:
    """Jobs that ended, by outcome and cause, and work lost to requeues, per UTC day over the
    last ``days`` days (1..366) for the caller's teams (one team with ``team``). A fixed number of
    queries (jobs ended, deadlines passed, failure and requeue events), whatever the window."""
    given: object = days  # from a query string: checked here whatever its type
    if not isinstance(given, int) or isinstance(given, bool) or not 1 <= given <= MAX_DAYS:
        raise FieldErrors({"days": [f"must be a whole number of days from 1 to {MAX_DAYS}"]})
    teams = _teams_for(user, team)
    end = now.date()
    start = end - timedelta(days=days - 1)
    since = datetime.combine(start, datetime.min.time(), tzinfo=now.tzinfo)
    by_day = {
        start + timedelta(days=i): OutcomeDay(day=start + timedelta(days=i)) for i in range(days)
    }
    team_ids = [t.pk for t in teams]

    ended = Job.objects.filter(
        team_id__in=team_ids,
        state__in=[JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED],
        finished_at__gte=since,
        finished_at__lte=now,
    )
    failed_ids = []
    finished_day: dict[int, date] = {}
    for job_id, state, finished_at, deadline in ended.values_list(
        "pk", "state", "finished_at", "deadline"
    ):
        assert finished_at is not None  # the query asks for finished_at__gte
        day = finished_at.astimezone(now.tzinfo).date()
        if day not in by_day:
            continue
        # Ended after its deadline: missed on the deadline's day (counted below).
        if deadline is not None and finished_at <= deadline and state != JobState.CANCELLED:
            if state == JobState.SUCCEEDED:
                by_day[day].deadline_met += 1
            else:
                by_day[day].deadline_missed += 1
        if state == JobState.FAILED:
            failed_ids.append(job_id)
            finished_day[job_id] = day
        else:
            by_day[day].counts[str(state)] += 1
    # Deadlines that passed in the window with the job not done by then, whatever it did after.
    for (deadline,) in (
        Job.objects.filter(team_id__in=team_ids, deadline__gte=since, deadline__lte=now)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=F("deadline")))
        .values_list("deadline")
    ):
        assert deadline is not None  # the query asks for deadline__gte
        day = deadline.astimezone(now.tzinfo).date()
        if day in by_day:
            by_day[day].deadline_missed += 1
    messages: dict[int, str] = defaultdict(str)
    for job_id, message in (
        JobEvent.objects.filter(job_id__in=failed_ids, kind="failed")
        .order_by("time", "id")
        .values_list("job_id", "message")
    ):
        messages[job_id] = message  # the last one wins
    for job_id in failed_ids:
        by_day[finished_day[job_id]].counts[f"failed_{failure_cause(messages[job_id])}"] += 1

    for time, data in JobEvent.objects.filter(
        job__team_id__in=team_ids, kind="requeued", time__gte=since, time__lte=now
    ).values_list("time", "data"):
        day = time.astimezone(now.tzinfo).date()
        lost = (data or {}).get("lost_gpu_s") or 0.0
        if day in by_day and isinstance(lost, int | float):
            by_day[day].lost_gpu_hours[loss_cause((data or {}).get("reason", ""))] += lost / 3600
    return OutcomeReport(
        teams=[t.slug for t in teams],
        start=start,
        end=end,
        days=[by_day[d] for d in sorted(by_day)],
    )
