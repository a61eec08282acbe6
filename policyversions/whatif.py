"""What-if replay of the cluster's own finished history: the policy in force against candidate
policies, with the metrics of ``python -m scheduler.simulation compare``.

A candidate is a whole policy, in the shape ``policy_apply`` takes: ``engine_config`` (replaces
the one in force; absent: the one in force), ``team_weights`` and ``priority_classes`` (the
named teams and classes change, the others keep what the loop reads now). The replay gives the
simulator the candidate's full engine configuration (every field, so the result does not
depend on the configuration in force) and its weights and class values; a class's
``preemptible_by_default`` and ``restricted`` act when a job is submitted, so the history's
jobs keep what they were submitted with and the result says such a change was not replayed.

The history is exported exactly as ``manage.py export_trace`` writes it (the cluster, its teams,
priority classes and the configuration in force) and replayed by the simulation's own
``replay_policies`` on the very command line ``compare_arguments`` builds, so the metrics are
those an admin gets from the two commands by hand. Beyond them, each policy gets what the result
page draws (``details``): its waiting-time quantiles, GPU utilization over time, and per team the
jobs, waits, the GPU share received while jobs were arriving and the team's fair share.

A window of more than ``WHATIF_MAX_JOBS`` finished jobs is refused before anything is exported
(the simulator holds every job of the window in memory, once per policy), never replayed in part.

This module runs the replay synchronously; the portal and API run it on Celery
(``whatif_runs.whatif_run_execute``) and pass ``watch`` to hear progress and to stop it.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from core.errors import FieldErrors
from scheduler.models import Job
from scheduler.policy import config_from_dict, config_to_dict
from scheduler.simulation import SimulationError
from scheduler.simulation.cli import replay_policies
from scheduler.simulation.history import with_policy
from scheduler.simulation.runner import POLICIES, VARIANTS
from scheduler.states import FINAL_STATES

from .services import (
    CLASS_FIELDS,
    POLICY_PARTS,
    current_tables,
    validate_classes,
    validate_engine_config,
    validate_weights,
)

MAX_WINDOW_DAYS = 90
MAX_WINDOW = timedelta(days=MAX_WINDOW_DAYS)
# What a window outside (0, MAX_WINDOW_DAYS] days is told, by the API, the portal and the service.
WINDOW_DAYS_RANGE = (
    f"must be more than 0 and at most {MAX_WINDOW_DAYS} days "
    "(a longer history is too long to replay here)"
)
MAX_CANDIDATES = 4
BASELINE = "gpuplatform"
MAX_NAME = 40
# Points kept per curve on the result page (quantiles of the wait, utilization over time).
WAIT_QUANTILES = 50
UTILIZATION_POINTS = 240


class ReplayFailed(Exception):
    """The replay could not run (no finished job in the window, an unreadable history); the
    message says why, for the admin."""


def compare_arguments(trace: Path, out: Path, candidates: dict[str, dict[str, Any]]) -> list[str]:
    """The ``scheduler.simulation`` command line that replays ``trace`` under the policy in
    force (``gpuplatform``: the trace's own configuration, weights and classes) and each
    candidate (a policy as ``whatif_candidates`` returns it)."""
    args = ["compare", "--trace", str(trace), "--out", str(out), "--quiet"]
    args += ["--policies", ",".join([BASELINE, *candidates])]
    for name, policy in candidates.items():
        if "engine_config" in policy:
            # Every field, so the candidate runs as it would be put in force (its configuration
            # replaces the one in force) rather than as a change on top of the trace's.
            full = config_to_dict(config_from_dict(policy["engine_config"]))
            args += ["--engine-config", f"{name}={json.dumps(full, sort_keys=True)}"]
        if policy.get("team_weights"):
            weights = json.dumps(policy["team_weights"], sort_keys=True)
            args += ["--team-weights", f"{name}={weights}"]
        if policy.get("priority_classes"):
            values = {c: spec["value"] for c, spec in policy["priority_classes"].items()}
            args += ["--priority-classes", f"{name}={json.dumps(values, sort_keys=True)}"]
    return args


def _candidate(name: str, raw: Any, errors: dict[str, list[str]]) -> dict[str, Any]:
    """One candidate as a policy (``engine_config`` if given, ``team_weights``,
    ``priority_classes``), its problems added to ``errors`` under ``candidates.<name>...``.
    An object with none of the three parts is read as an engine configuration alone."""
    where = f"candidates.{name}"
    if not isinstance(raw, dict):
        errors[where] = [
            "must be an object: a policy (engine_config, team_weights, priority_classes) "
            "or engine configuration fields"
        ]
        return {}
    if not set(raw) & set(POLICY_PARTS):
        raw, engine_where = {"engine_config": raw}, where
    else:
        engine_where = f"{where}.engine_config"
        for key in sorted(set(raw) - set(POLICY_PARTS)):
            errors[f"{where}.{key}"] = [f"unknown part (expected {', '.join(POLICY_PARTS)})"]
    policy: dict[str, Any] = {}
    if raw.get("engine_config") is not None:
        try:
            policy["engine_config"] = validate_engine_config(raw["engine_config"])
        except FieldErrors as exc:
            for field, problems in exc.errors.items():
                errors[field.replace("engine_config", engine_where, 1)] = problems
    found: dict[str, list[str]] = {}
    weights, classes = raw.get("team_weights"), raw.get("priority_classes")
    policy["team_weights"] = {} if weights is None else validate_weights(weights, found)
    policy["priority_classes"] = {} if classes is None else validate_classes(classes, found)
    errors.update({f"{where}.{field}": problems for field, problems in found.items()})
    return policy


def whatif_candidates(candidates: Any) -> dict[str, dict[str, Any]]:
    """``candidates`` (name -> a policy, or engine configuration fields alone) as name -> policy
    (``engine_config`` when given, ``team_weights``, ``priority_classes``: what
    ``policy_apply`` takes); FieldErrors naming every bad field (``candidates``,
    ``candidates.<name>``, ``candidates.<name>.team_weights.<slug>``, ...)."""
    errors: dict[str, list[str]] = {}
    out: dict[str, dict[str, Any]] = {}
    taken = set(POLICIES + VARIANTS)
    if not isinstance(candidates, dict) or not 1 <= len(candidates) <= MAX_CANDIDATES:
        raise FieldErrors({"candidates": [f"1 to {MAX_CANDIDATES} named candidate policies"]})
    for name, raw in candidates.items():
        if (
            not isinstance(name, str)
            or not name.isidentifier()
            or len(name) > MAX_NAME
            or name.startswith(BASELINE)
            or name in taken
        ):
            errors[f"candidates.{name}"] = [
                f"a name of letters, digits and _ (at most {MAX_NAME}, "
                f"not starting with {BASELINE}, not a baseline policy's name)"
            ]
            continue
        out[name] = _candidate(name, raw, errors)
    if errors:
        raise FieldErrors(errors)
    return out


def whatif_validate(
    *, since: datetime, until: datetime, candidates: Any
) -> dict[str, dict[str, Any]]:
    """The candidates as policies (``whatif_candidates``) if the window and they can be
    replayed; FieldErrors (``window``, ``candidates``, ``candidates.<name>.<field>``)
    otherwise."""
    errors: dict[str, list[str]] = {}
    if not since < until:
        errors["window"] = ["must end after it starts"]
    elif until - since > MAX_WINDOW:
        errors["window"] = [
            f"at most {MAX_WINDOW_DAYS} days of history per replay "
            f"(asked for {(until - since) / timedelta(days=1):.0f}); choose a shorter window"
        ]
    policies: dict[str, dict[str, Any]] = {}
    try:
        policies = whatif_candidates(candidates)
    except FieldErrors as exc:
        errors.update(exc.errors)
    if errors:
        raise FieldErrors(errors)
    return policies


def whatif_window_jobs(*, cluster: Any, since: datetime, until: datetime) -> int:
    """The jobs a replay of ``cluster`` (a Cluster or its name) over [since, until) loads: those
    submitted then that ran and ended (what ``export_trace`` writes), in one COUNT."""
    jobs = Job.objects.filter(
        submitted_at__gte=since,
        submitted_at__lt=until,
        state__in=FINAL_STATES,
        started_at__isnull=False,
        finished_at__isnull=False,
    )
    jobs = (
        jobs.filter(cluster__name=cluster)
        if isinstance(cluster, str)
        else jobs.filter(cluster=cluster)
    )
    return int(jobs.count())


def whatif_size_problem(*, cluster: Any, since: datetime, until: datetime) -> str | None:
    """Why the window is too big to replay (more jobs than ``WHATIF_MAX_JOBS``), naming the
    window and the count; None when it is not. Refused up front, never cut short: a replay of
    part of a window would answer another question than the one asked."""
    limit = int(settings.WHATIF_MAX_JOBS)
    count = whatif_window_jobs(cluster=cluster, since=since, until=until)
    if count <= limit:
        return None
    name = cluster if isinstance(cluster, str) else cluster.name
    days = (until - since) / timedelta(days=1)
    window = (
        f"the {days:g} day{'' if days == 1 else 's'} from "
        f"{since.astimezone(UTC):%Y-%m-%d %H:%M} to {until.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    )
    return (
        f"{window} hold {count:,} finished jobs of cluster {name}, more than a replay takes "
        f"(WHATIF_MAX_JOBS: {limit:,}); choose a shorter window"
    )


def not_replayed(policy: dict[str, Any], classes_now: dict[str, dict[str, Any]]) -> list[str]:
    """The candidate's changes a replay of finished jobs cannot show: a priority class's
    ``preemptible_by_default`` and ``restricted`` act when a job is submitted, and the
    history's jobs keep what they were submitted with."""
    return [
        f"priority_classes.{name}.{key}"
        for name, spec in sorted(policy.get("priority_classes", {}).items())
        for key in CLASS_FIELDS
        if key != "value" and name in classes_now and spec.get(key) != classes_now[name][key]
    ]


def _quantiles(sorted_values: list[float], count: int) -> list[float]:
    """``count + 1`` nearest-rank quantiles (0 %, ..., 100 %) of already sorted values."""
    if not sorted_values:
        return []
    n = len(sorted_values)
    return [sorted_values[min(n - 1, round(k * (n - 1) / count))] for k in range(count + 1)]


def _fair_shares(teams: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Each team's fair share of the cluster: its weight's share among its siblings, times its
    parent's share (the roots share the whole cluster)."""
    children: dict[str | None, list[str]] = {}
    for name, team in teams.items():
        children.setdefault(team.get("parent"), []).append(name)
    shares: dict[str, float] = {}

    def walk(parent: str | None, share: float) -> None:
        kids = children.get(parent, [])
        total = sum(max(0.0, float(teams[k].get("weight", 1.0))) for k in kids)
        for kid in kids:
            weight = max(0.0, float(teams[kid].get("weight", 1.0)))
            shares[kid] = share * (weight / total if total else 1.0 / len(kids))
            walk(kid, shares[kid])

    walk(None, 1.0)
    return shares


class _ShareMeter:
    """GPU-seconds each team held while jobs were still arriving, integrated from the samples
    the replay's progress gives (every 0.5 % of the jobs): a team's share of the cluster while
    the history's load was on, which is what a policy changes (by the end every job has run)."""

    def __init__(self) -> None:
        self.gpu_s: dict[str, float] = {}
        self.last_t: float | None = None
        self.last_used: dict[str, int] = {}

    def sample(self, sim: Any, now: float) -> None:
        horizon = sim.jobs[-1].submit if sim.jobs else 0.0
        t = min(now, horizon)
        if self.last_t is not None and t > self.last_t:
            for team, used in self.last_used.items():
                self.gpu_s[team] = self.gpu_s.get(team, 0.0) + used * (t - self.last_t)
        self.last_t = t
        self.last_used = dict(sim.tenant_used)


def _details(sim: Any, meter: _ShareMeter, fair: dict[str, float]) -> dict[str, Any]:
    waits = sorted(j.queue_s for j in sim.jobs)
    per_team: dict[str, list[float]] = {}
    for job in sim.jobs:
        per_team.setdefault(job.tenant, []).append(job.queue_s)
    held = sum(meter.gpu_s.values())
    teams = {}
    for team, team_waits in sorted(per_team.items()):
        team_waits.sort()
        teams[team] = {
            "jobs": len(team_waits),
            "avg_wait_s": round(sum(team_waits) / len(team_waits), 3),
            "p95_wait_s": round(_quantiles(team_waits, 20)[19], 3),
            "gpu_share": round(meter.gpu_s.get(team, 0.0) / held, 6) if held else 0.0,
            "fair_share": round(fair.get(team, 0.0), 6),
        }
    t, used = sim.series_t, sim.series_used
    hours, utilization = [], []
    if t:
        step = max(1, len(t) // UTILIZATION_POINTS)
        for i in range(0, len(t), step):
            hours.append(round(t[i] / 3600.0, 4))
            utilization.append(round(used[i] / sim.total_gpus, 4) if sim.total_gpus else 0.0)
    return {
        "wait_quantiles_s": [round(w, 3) for w in _quantiles(waits, WAIT_QUANTILES)],
        "utilization": {"hours": hours, "fraction": utilization},
        "teams": teams,
    }


Watch = Callable[[str, int, int, int, int], None]


def whatif_replay(
    *,
    cluster: str,
    since: datetime,
    until: datetime,
    candidates: Any,
    watch: Watch | None = None,
    exporting: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """``{"results": policy -> metrics, "details": policy -> chart data, "jobs": n}`` for the jobs
    submitted on ``cluster`` in [since, until). Bad input is FieldErrors; a history that cannot
    be replayed is ReplayFailed; a window of more than ``WHATIF_MAX_JOBS`` jobs is FieldErrors
    (``window``). ``watch(policy, policy_index, policies, jobs_done, jobs)`` hears
    progress (about 200 times per policy as jobs finish, and every few dozen simulator rounds
    and engine calls even while none finishes) and may raise to stop the replay.
    ``exporting(jobs_read)`` is called likewise while the history is exported, before the
    replay (every ``export_trace.PROGRESS_EVERY_ROWS`` jobs read), and may raise to stop it."""
    candidates = whatif_validate(since=since, until=until, candidates=candidates)
    # Checked again here: the run was started a while ago, and its window's jobs may have
    # finished since (the export streams, but the simulator holds every job in memory).
    too_big = whatif_size_problem(cluster=cluster, since=since, until=until)
    if too_big is not None:
        raise FieldErrors({"window": [too_big]})
    names = [BASELINE, *candidates]
    meters = {name: _ShareMeter() for name in names}

    def on_progress(policy: str, sim: Any, done: int, total: int, now: float) -> None:
        meters[policy].sample(sim, now)
        on_tick(policy, sim, done, total, now)

    def on_tick(policy: str, sim: Any, done: int, total: int, now: float) -> None:
        # Not sampled for the shares: their samples stay the 0.5 % steps the docs describe.
        if watch is not None:
            watch(policy, names.index(policy), len(names), done, total)

    with tempfile.TemporaryDirectory(prefix="whatif-") as tmp:
        trace, out = Path(tmp) / "history.json", Path(tmp) / "results.json"
        try:
            call_command(
                "export_trace",
                out=str(trace),
                since=since.isoformat(),
                until=until.isoformat(),
                cluster=cluster,
                stdout=io.StringIO(),
                stderr=io.StringIO(),
                progress=exporting,
            )
        except CommandError as exc:
            raise ReplayFailed(f"the history could not be exported: {exc}") from None
        try:
            results, sims, history = replay_policies(
                compare_arguments(trace, out, candidates), watch=on_progress, tick=on_tick
            )
        except (OSError, ValueError, KeyError, SimulationError) as exc:
            raise ReplayFailed(f"the replay failed: {exc}") from None
    if not any(m.get("jobs") for m in results.values()):
        raise ReplayFailed("no finished job was submitted in this window; choose a longer one")
    _, classes_now = current_tables()
    details = {}
    for name in names:
        policy = candidates.get(name, {})
        teams = {}
        if history is not None:
            teams = dict(with_policy(history, team_weights=policy.get("team_weights")).teams)
        details[name] = _details(sims[name], meters[name], _fair_shares(teams))
        if name != BASELINE:
            details[name]["not_replayed"] = not_replayed(policy, classes_now)
    return {"results": results, "details": details}


def whatif_compare(
    *, cluster: str, since: datetime, until: datetime, candidates: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Policy name -> metrics for the jobs submitted on ``cluster`` in [since, until). Bad input
    is FieldErrors (``window``, ``candidates``, ``candidates.<name>.<field>``)."""
    try:
        replay = whatif_replay(cluster=cluster, since=since, until=until, candidates=candidates)
    except ReplayFailed as exc:
        raise FieldErrors({"window": [str(exc)]}) from None
    results: dict[str, dict[str, Any]] = replay["results"]
    return results
