"""What a cost dashboard rolled up over sub-teams shows of the sub-teams the caller is not a
member of: their amounts, never their jobs or people.

A parent team's dashboard covers its sub-teams (its budget and statement do), so its owner or
viewer reads what each sub-team spent. But membership, not the team tree, decides whose objects a
user sees (docs/tenancy.md: another team's job is a 404), and the scheduler's reasons name another
team's job only as "a job of another team" for the same reason. So a top job of such a sub-team
reads "a job of team nlp (#2 by cost)" with no id or submitter, its egress charges carry no job
or attempt, and its submitters' spend is one "(team nlp)" row. Platform admins see everything.

Pure functions over the dashboard's dataclasses, plus ``seen_team_slugs`` (one query).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING

from tenants.permissions import Caller, is_platform_admin, visible_teams

if TYPE_CHECKING:
    from .series import EgressLine, JobCost


def seen_team_slugs(user: Caller) -> frozenset[str] | None:
    """Slugs of the teams whose jobs and people ``user`` may see; None for platform admins
    (every team)."""
    if is_platform_admin(user):
        return None
    return frozenset(visible_teams(user).values_list("slug", flat=True))


def _hidden(team_slug: str, seen: frozenset[str] | None) -> bool:
    return seen is not None and team_slug not in seen


def hide_jobs(top_jobs: list[JobCost], seen: frozenset[str] | None) -> list[JobCost]:
    """Top jobs (``JobCost``) with those of unseen teams anonymised. The rank in the name keeps
    two such jobs apart (the chart's bars are keyed by their label)."""
    return [
        replace(job, job_id=None, name=f"a job of team {job.team} (#{rank} by cost)", user="")
        if _hidden(job.team, seen)
        else job
        for rank, job in enumerate(top_jobs, start=1)
    ]


def hide_egress(lines: list[EgressLine], seen: frozenset[str] | None) -> list[EgressLine]:
    """Egress charges with the job and attempt of unseen teams' charges left out."""
    return [
        replace(line, job_id=None, attempt=None) if _hidden(line.team, seen) else line
        for line in lines
    ]


def spend_by_user(
    rows: Iterable[tuple[str, str, float | None, Decimal | None]],
    seen: frozenset[str] | None,
) -> list[tuple[str, float, Decimal]]:
    """``(username, GPU-hours, cost)``, largest cost first, from ``(username, team slug,
    GPU-seconds, cost)`` rows: one row per person across the teams the caller sees, one
    ``(team <slug>)`` row for all the submitters of each team they do not."""
    totals: dict[str, tuple[float, Decimal]] = {}
    for username, team_slug, seconds, cost in rows:
        label = f"(team {team_slug})" if _hidden(team_slug, seen) else username
        hours, spent = totals.get(label, (0.0, Decimal(0)))
        totals[label] = (hours + (seconds or 0.0) / 3600, spent + (cost or Decimal(0)))
    return sorted(
        ((label, hours, spent) for label, (hours, spent) in totals.items()),
        key=lambda row: (-row[2], row[0]),
    )
