"""Checkpoint advice on portal pages (``scheduler.checkpoint_advice``): the job page's sentence
and the submit form's table of the caller's pools."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from scheduler.checkpoint_advice import job_advice, pool_advice_table
from scheduler.models import Job
from tenants.models import Membership, Team


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{max(1, minutes)} min"
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def job_advice_context(job: Job) -> dict[str, Any]:
    """``checkpoint_advice``: what the job page says, or None without observations."""
    found = job_advice(job, now=timezone.now())
    if found is None:
        return {"checkpoint_advice": None}
    a, rate = found.advice, found.rate
    mtbi = _duration(a.mtbi_s)
    where = f"{found.gpu_model} {'spot' if found.spot else 'on-demand'}"
    scope = {"team": "your team's runs", "pool": "all teams' runs", "platform": "the platform"}
    if a.user_interval_s and a.saving is not None:
        sentence = (
            f"You checkpoint every {_duration(a.user_interval_s)}; at this pool's interruption "
            f"rate (one per {mtbi} on {where}), every {_duration(a.advised_interval_s)} would "
            f"lose {a.saving:.0%} less work (lost work plus checkpoint time: "
            f"{a.advised_waste:.1%} instead of {a.user_waste:.1%} of the run)."
        )
    else:
        sentence = (
            f"At this pool's interruption rate (one per {mtbi} on {where}), checkpoint every "
            f"{_duration(a.advised_interval_s)}: it wastes {a.advised_waste:.1%} of the run in "
            "lost work plus checkpoint time."
        )
    return {
        "checkpoint_advice": {
            "sentence": sentence,
            "advised_interval_s": round(a.advised_interval_s),
            "basis": f"{rate.interruptions} interruptions in {rate.run_hours:.0f} running hours "
            f"of {scope[rate.scope]} over 30 days; checkpoint cost {a.checkpoint_cost_s:.0f} s "
            f"({found.cost_source})",
            "on_schedule": job.checkpoint_on_advice,
        }
    }


def submit_advice_context(user: User) -> dict[str, Any]:
    """``pool_advice``: advised intervals per team, GPU model and capacity type of the caller's
    teams (rows with an observed interruption rate)."""
    teams = (
        Team.objects.all()
        if user.is_superuser
        else Team.objects.filter(pk__in=Membership.objects.filter(user=user).values("team_id"))
    )
    slugs = dict(teams.values_list("pk", "slug"))
    rows = pool_advice_table(team_ids=list(slugs), now=timezone.now())
    for row in rows:
        row["team"] = slugs[row.pop("team_id")]
        row["advised"] = _duration(row["advised_interval_s"]) if row["advised_interval_s"] else "—"
        row["mtbi"] = (
            _duration(row["run_hours"] * 3600 / row["interruptions"])
            if row["interruptions"]
            else "none seen"
        )
    return {"pool_advice": rows}
