"""Checkpoint advice from observed interruptions (issue 24, item 1): the Young/Daly interval
(``scheduler.checkpoint_interval``) for a job's pool and checkpoint cost.

- **Interruption rate** of a pool (GPU model x capacity type x team): the requeues (preemptions,
  node failures, spot reclaims, runs a backend lost) of attempts that ran there in the last
  ``OBSERVATION_DAYS``, per hour of those attempts' running time. A pool with fewer than
  ``MIN_RUN_HOURS`` observed is too thin: the same GPU model and capacity type across teams is
  used, then the whole platform; nothing observed at all gives no advice.
- **Checkpoint cost** of a job: the median time from a checkpoint request (a preemption's or the
  platform's scheduled one) to the checkpoint's report, over the job's own history, else over its
  team's jobs in the window, else ``DEFAULT_CHECKPOINT_COST_S``. The report is seen when the loop
  next polls the run, so the measure is rounded up to the loop's period.
- A job gets the advised interval as ``GPUPLATFORM_CHECKPOINT_ADVICE_S`` in its environment; a job
  submitted with ``checkpoint_on_advice`` is asked by the platform to checkpoint on that schedule
  (:func:`request_due_checkpoints`, each request a ``checkpoint_requested`` event).

Rates are computed in two queries and cached for ``RATES_CACHE_S`` seconds. The enforce stage
advises a whole cycle's starts at once (:func:`placement_advice_envs`): the rates read once, the
checkpoint costs of all their teams in one query.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, IntegerField, Max, Min, Window
from django.db.models.functions import Cast, RowNumber

from core.caching import cache_quietly, cached_or_none

from .backends import backend_run_ref, get_backend
from .checkpoint_interval import CheckpointAdvice, advise
from .models import Allocation, Job, JobEvent, Node
from .states import JobState
from .transitions import event_record

log = logging.getLogger(__name__)

OBSERVATION_DAYS = 30
MIN_RUN_HOURS = 24.0
DEFAULT_CHECKPOINT_COST_S = 60.0
RATES_CACHE_S = 300
ENV_NAME = "GPUPLATFORM_CHECKPOINT_ADVICE_S"
_CACHE_KEY = "checkpoint-advice:rates:v1"
_REQUEST_KINDS = ("preempted", "checkpoint_requested")
# The checkpoint cost reads at most this many of a team's events in the window (its first ones).
_EVENTS_PER_TEAM = 20_000

# (GPU model name, spot, team id) -> [interruptions, run hours]
Rates = dict[tuple[str, bool, int], list[float]]


@dataclass(frozen=True)
class PoolRate:
    interruptions: int
    run_hours: float
    scope: str  # "team", "pool" (all teams), "platform"

    @property
    def per_hour(self) -> float:
        return self.interruptions / self.run_hours if self.run_hours > 0 else 0.0


def observed_rates(*, now: datetime) -> Rates:
    """Interruptions and running hours per (GPU model, spot, team) over the observation window
    (cached)."""
    cached = cached_or_none(_CACHE_KEY)
    if cached is not None:
        return {tuple(k): v for k, v in cached}
    since = now - timedelta(days=OBSERVATION_DAYS)
    attempts = (
        Allocation.objects.filter(started_at__lte=now)
        .exclude(ended_at__lt=since)
        .order_by()
        .values("job_id", "attempt", "job__team_id", "node__gpu_model__name")
        .annotate(
            start=Min("started_at"),
            end=Max("ended_at"),
            spot=Max(Cast("node__spot", IntegerField())),
        )
    )
    rates: Rates = {}
    pool_of: dict[tuple[int, int], tuple[str, bool, int]] = {}
    for row in attempts:
        key = (row["node__gpu_model__name"], bool(row["spot"]), row["job__team_id"])
        start = max(row["start"], since)
        end = row["end"] or now
        hours = max(0.0, (end - start).total_seconds()) / 3600
        rates.setdefault(key, [0, 0.0])[1] += hours
        pool_of[(row["job_id"], row["attempt"])] = key
    for job_id, data in JobEvent.objects.filter(
        kind="requeued", time__gte=since, time__lte=now
    ).values_list("job_id", "data"):
        attempt: int | None = (data or {}).get("attempt")
        pool = pool_of.get((job_id, attempt)) if attempt is not None else None
        if pool is not None:
            rates[pool][0] += 1
    cache_quietly(_CACHE_KEY, list(rates.items()), RATES_CACHE_S)
    return rates


def pool_rate(rates: Rates, *, gpu_model: str, spot: bool, team_id: int) -> PoolRate | None:
    """The rate of the narrowest scope with enough running hours observed."""
    own = rates.get((gpu_model, spot, team_id))
    if own and own[1] >= MIN_RUN_HOURS:
        return PoolRate(int(own[0]), own[1], "team")
    same = [v for (m, s, _), v in rates.items() if m == gpu_model and s == spot]
    hours = sum(v[1] for v in same)
    if hours >= MIN_RUN_HOURS:
        return PoolRate(int(sum(v[0] for v in same)), hours, "pool")
    hours = sum(v[1] for v in rates.values())
    if hours > 0:
        return PoolRate(int(sum(v[0] for v in rates.values())), hours, "platform")
    return None


def _delays(events: list[tuple[int, str, datetime]]) -> dict[int, list[float]]:
    """Per job: seconds from each checkpoint request to the next checkpoint report."""
    delays: dict[int, list[float]] = {}
    asked: dict[int, datetime] = {}
    for job_id, kind, time in events:
        if kind in _REQUEST_KINDS:
            asked.setdefault(job_id, time)
        elif kind == "checkpoint" and job_id in asked:
            delays.setdefault(job_id, []).append((time - asked.pop(job_id)).total_seconds())
    return delays


def _team_delays(team_ids: Iterable[int], *, now: datetime) -> dict[int, dict[int, list[float]]]:
    """Per team, then per job: the seconds from each checkpoint request to its report, over the
    team's first ``_EVENTS_PER_TEAM`` request and report events of the window. One query for
    any number of teams: the cap is counted per team (a window function), so each team's
    delays are what a query of its own would give."""
    since = now - timedelta(days=OBSERVATION_DAYS)
    rows = (
        JobEvent.objects.filter(
            job__team_id__in=set(team_ids),
            kind__in=[*_REQUEST_KINDS, "checkpoint"],
            time__gte=since,
        )
        .annotate(
            team=F("job__team_id"),
            nth=Window(
                RowNumber(),
                partition_by=F("job__team_id"),
                order_by=(F("time").asc(), F("id").asc()),
            ),
        )
        .filter(nth__lte=_EVENTS_PER_TEAM)
        .order_by("time", "id")
        .values_list("team", "job_id", "kind", "time")
    )
    events: dict[int, list[tuple[int, str, datetime]]] = {}
    for team_id, job_id, kind, time in rows:
        events.setdefault(team_id, []).append((job_id, kind, time))
    return {team_id: _delays(team_events) for team_id, team_events in events.items()}


def _cost_of(job_id: int, team_delays: Mapping[int, list[float]]) -> tuple[float, str]:
    if team_delays.get(job_id):
        return max(1.0, statistics.median(team_delays[job_id])), "measured on this job"
    team = [d for values in team_delays.values() for d in values]
    if team:
        return max(1.0, statistics.median(team)), "measured on the team's jobs"
    return DEFAULT_CHECKPOINT_COST_S, "default (no checkpoint measured yet)"


def checkpoint_cost(job: Job, *, now: datetime) -> tuple[float, str]:
    """``(seconds, source)``: the job's measured checkpoint cost, its team's, or the default."""
    return _cost_of(job.pk, _team_delays([job.team_id], now=now).get(job.team_id, {}))


@dataclass(frozen=True)
class JobAdvice:
    advice: CheckpointAdvice
    rate: PoolRate
    gpu_model: str
    spot: bool
    cost_source: str

    def as_dict(self) -> dict[str, Any]:
        a = self.advice
        return {
            "advised_interval_s": round(a.advised_interval_s),
            "user_interval_s": a.user_interval_s,
            "advised_waste": round(a.advised_waste, 4),
            "user_waste": None if a.user_waste is None else round(a.user_waste, 4),
            "saving": None if a.saving is None else round(a.saving, 3),
            "interruptions": self.rate.interruptions,
            "run_hours": round(self.rate.run_hours, 1),
            "interruptions_per_hour": round(self.rate.per_hour, 5),
            "scope": self.rate.scope,
            "gpu_model": self.gpu_model,
            "capacity": "spot" if self.spot else "on-demand",
            "checkpoint_cost_s": round(a.checkpoint_cost_s, 1),
            "checkpoint_cost_source": self.cost_source,
        }


def _job_pool(job: Job, placement_nodes: list[str] | None) -> tuple[str, bool] | None:
    # (the nodes of no cluster: none, as the filter on a null cluster_id found)
    nodes = (
        Node.objects.filter(cluster_id=job.cluster_id, name__in=placement_nodes or [])
        if job.cluster_id is not None
        else Node.objects.none()
    )
    if not placement_nodes:
        nodes = Node.objects.filter(
            allocations__job=job, allocations__ended_at__isnull=True
        ).distinct()
    return _pool_of(job, list(nodes.values_list("gpu_model__name", "spot")))


def _pool_of(job: Job, nodes: Sequence[tuple[str, bool]]) -> tuple[str, bool] | None:
    """The pool of a job placed on ``nodes`` ((GPU model, spot) in the nodes' order): the first
    node's model, spot when any node is; without nodes, its GPU model on on-demand capacity."""
    if nodes:
        return nodes[0][0], any(spot for _, spot in nodes)
    gpu_model = job.gpu_model if job.gpu_model_id else None
    if gpu_model is not None:
        return gpu_model.name, False
    return None


def _interrupting_rate(job: Job, pool: tuple[str, bool] | None, rates: Rates) -> PoolRate | None:
    """The pool's rate when it has interruptions; None otherwise, and then there is no advice
    whatever the checkpoint costs (so it is not read)."""
    if pool is None:
        return None
    rate = pool_rate(rates, gpu_model=pool[0], spot=pool[1], team_id=job.team_id)
    return rate if rate is not None and rate.per_hour > 0 else None


def _advised(
    job: Job, pool: tuple[str, bool], rate: PoolRate, cost_s: float, cost_source: str
) -> JobAdvice | None:
    advice = advise(
        interruptions_per_hour=rate.per_hour,
        checkpoint_cost_s=cost_s,
        user_interval_s=job.checkpoint_interval_s,
    )
    if advice is None:
        return None
    return JobAdvice(advice, rate, pool[0], pool[1], cost_source)


def job_advice(
    job: Job, *, now: datetime, placement_nodes: list[str] | None = None
) -> JobAdvice | None:
    """Advice for ``job``: on the pool it runs on (or the given nodes, or its GPU model on
    on-demand capacity), with its checkpoint cost. None without a pool or without any
    interruption observed there."""
    pool = _job_pool(job, placement_nodes)
    rate = _interrupting_rate(job, pool, observed_rates(now=now))
    if pool is None or rate is None:
        return None
    return _advised(job, pool, rate, *checkpoint_cost(job, now=now))


def _advice_env(found: JobAdvice | None) -> dict[str, str]:
    if found is None:
        return {}
    return {ENV_NAME: str(round(found.advice.advised_interval_s))}


def advice_env(job: Job, placement: dict[str, list[int]], *, now: datetime) -> dict[str, str]:
    """``{GPUPLATFORM_CHECKPOINT_ADVICE_S: seconds}`` for a run placed on ``placement``; empty
    when there is no advice. Never raises: advice must not keep a run from starting."""
    try:
        return _advice_env(job_advice(job, now=now, placement_nodes=sorted(placement)))
    except Exception:
        log.exception("job %s: checkpoint advice failed", job.pk)
        return {}


def placement_advice_envs(
    jobs: Sequence[Job], nodes: Mapping[int, Sequence[tuple[str, bool]]], *, now: datetime
) -> dict[int, dict[str, str]]:
    """:func:`advice_env` of many runs at once, by job id (a job without advice is left out).
    ``nodes[job.pk]``: the (GPU model, spot) of each node of the job's placement found in its
    cluster, in the nodes' order, as :func:`advice_env` reads them for one job. The same
    values, with the rates read once and the checkpoint costs of all the jobs' teams in one
    query. Never raises: a failure leaves the runs it concerns without advice."""
    try:
        rates = observed_rates(now=now)
        interrupted = []
        for job in jobs:
            pool = _pool_of(job, nodes.get(job.pk, ()))
            rate = _interrupting_rate(job, pool, rates)
            if pool is not None and rate is not None:
                interrupted.append((job, pool, rate))
        teams = {job.team_id for job, _, _ in interrupted}
        delays = _team_delays(teams, now=now) if teams else {}
    except Exception:
        log.exception("checkpoint advice failed for %d runs", len(jobs))
        return {}
    envs: dict[int, dict[str, str]] = {}
    for job, pool, rate in interrupted:
        try:
            cost = _cost_of(job.pk, delays.get(job.team_id, {}))
            found = _advice_env(_advised(job, pool, rate, *cost))
        except Exception:
            log.exception("job %s: checkpoint advice failed", job.pk)
            continue
        if found:
            envs[job.pk] = found
    return envs


def pool_advice_table(*, team_ids: list[int], now: datetime) -> list[dict[str, Any]]:
    """For the submit form: per team, GPU model and capacity type observed, the interruption
    rate and the advised interval at the default (or the team's measured) checkpoint cost."""
    rates = observed_rates(now=now)
    rows = []
    for model, spot, team_id in sorted(
        {(m, s, t) for (m, s, t) in rates if t in team_ids}, key=lambda k: (k[2], k[0], k[1])
    ):
        rate = pool_rate(rates, gpu_model=model, spot=spot, team_id=team_id)
        if rate is None or rate.interruptions == 0:
            continue
        advice = advise(
            interruptions_per_hour=rate.per_hour,
            checkpoint_cost_s=DEFAULT_CHECKPOINT_COST_S,
            user_interval_s=None,
        )
        rows.append(
            {
                "team_id": team_id,
                "gpu_model": model,
                "capacity": "spot" if spot else "on-demand",
                "interruptions": rate.interruptions,
                "run_hours": rate.run_hours,
                "scope": rate.scope,
                "advised_interval_s": round(advice.advised_interval_s) if advice else None,
            }
        )
    return rows


def request_due_checkpoints(*, now: datetime) -> int:
    """Ask every running job that opted in (``checkpoint_on_advice``) and whose advised interval
    has passed since its last checkpoint (or start, or last request) to checkpoint now. Each
    request is a ``checkpoint_requested`` event (its report measures the checkpoint cost). A
    backend error about one job is logged and the others are still asked. Returns how many were
    asked."""
    asked = 0
    jobs = Job.objects.filter(
        state=JobState.RUNNING, checkpoint_on_advice=True, cluster__isnull=False
    ).exclude(backend_ref="")
    for job in jobs.select_related("team", "cluster", "gpu_model"):
        try:
            found = job_advice(job, now=now)
            if found is None:
                continue
            last_request = (
                JobEvent.objects.filter(job=job, kind="checkpoint_requested")
                .order_by("-time")
                .values_list("time", flat=True)
                .first()
            )
            since = max(t for t in (job.started_at, job.last_checkpoint_at, last_request) if t)
            if (now - since).total_seconds() < found.advice.advised_interval_s:
                continue
            assert job.cluster is not None  # the query asks for cluster__isnull=False
            get_backend(job.cluster).checkpoint(backend_run_ref(job))
        except Exception as exc:
            log.warning("job %s: scheduled checkpoint not requested: %s", job.pk, exc)
            continue
        event_record(
            job=job,
            kind="checkpoint_requested",
            time=now,
            message=f"checkpoint asked on the advised schedule "
            f"(every {found.advice.advised_interval_s / 60:.0f} min)",
        )
        asked += 1
    return asked
