"""Observe: build the policy engine's snapshot from the database in a fixed number of queries.

The snapshot uses the engine's plain dataclasses (``scheduler.policy``); the returned
:class:`SnapshotIndex` maps the engine's string ids back to rows for the apply step. Times are
epoch seconds.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, overload

from django.conf import settings
from django.db import connection
from django.db.models import F, FloatField, Func, Q
from django.utils.module_loading import import_string

from core.bounds import bounds, number_error
from scheduler.policy import (
    Config,
    Elastic,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    config_from_dict,
)
from scheduler.policy.routing import team_clusters
from tenants.models import PriorityClass
from tenants.models import Quota as QuotaRow
from tenants.models import Team as TeamRow

from .models import Allocation, Cluster, Job, NodeState
from .models import Node as NodeRow
from .routing_facts import job_routing, routing_facts, routing_in_force
from .runtime_prediction import describe, predict_runtime_s
from .states import JobState

log = logging.getLogger(__name__)

# A node whose cluster's backend is unreachable gets no new work: it is shown as down.
UNREACHABLE_NODE_STATE = "down"


@dataclass
class SnapshotIndex:
    node_by_name: dict[str, NodeRow] = field(default_factory=dict)
    job_pk: dict[str, int] = field(default_factory=dict)
    # What each pending job showed before this cycle: (team id, team slug, name, why, estimate),
    # so the apply step writes and announces only reasons that changed, without a second read.
    pending_shown: dict[int, tuple[int, str, str, str, datetime | None]] = field(
        default_factory=dict
    )
    # Pending jobs confined to retired or retiring clusters (by their routing, or by their team's
    # cluster lists), kept from the engine: job id -> why (``retired_confinement``,
    # ``retired_team_clusters``), which the apply step shows as their reason.
    retired_why: dict[int, str] = field(default_factory=dict)


@overload
def _ts(value: None) -> None: ...
@overload
def _ts(value: datetime | float) -> float: ...
def _ts(value: datetime | float | None) -> float | None:
    if value is None or isinstance(value, float):
        return value
    return value.timestamp()


class EpochSeconds(Func):
    """A timestamp column as float seconds since the Unix epoch, computed by PostgreSQL."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::float8"
    output_field = FloatField()


def _seconds_of(name: str) -> Func | F:
    """``name`` as epoch seconds (or, off PostgreSQL, as a datetime ``_ts`` converts).

    On PostgreSQL every timestamp Django reads goes through its time-zone-aware loader, which is
    pure Python: ~20,000 of them per cycle were a third of the snapshot. A float8 column loads in
    C, and PostgreSQL's exact numeric epoch rounds to the same double as ``datetime.timestamp``.
    SQLite has no exact equivalent (``julianday`` keeps milliseconds), so it keeps datetimes.
    """
    return EpochSeconds(name) if connection.vendor == "postgresql" else F(name)


def policy_config_data() -> dict[str, Any]:
    """The engine configuration JSON in force: from ``settings.SCHEDULER_POLICY_SOURCE`` (a
    dotted path to a callable returning it, or None for "none stored": the policy history) when
    set, else the environment's ``SCHEDULER_POLICY``. Read every cycle."""
    source = getattr(settings, "SCHEDULER_POLICY_SOURCE", "")
    # Both are the engine configuration's JSON object (the source's contract; settings').
    stored: dict[str, Any] | None = import_string(source)() if source else None
    if stored is not None:
        return stored
    configured: dict[str, Any] = getattr(settings, "SCHEDULER_POLICY", {}) or {}
    return configured


def policy_config() -> Config:
    return config_from_dict(policy_config_data(), path="SCHEDULER_POLICY")


def _decayed_usage(now: datetime, half_life_s: float) -> dict[int, float]:
    """GPU-seconds per team id, each second weighted by 0.5 ** (age / half-life)."""
    # No job ran before the epoch: a half-life so long (any is valid, "never decay") that six of
    # them reach further back would overflow datetime, and reads nothing more.
    horizon = max(now.timestamp() - 6 * half_life_s, 0.0)
    rows = (
        Job.objects.filter(started_at__isnull=False)
        .filter(
            Q(finished_at__isnull=True)
            | Q(finished_at__gte=datetime.fromtimestamp(horizon, now.tzinfo))
        )
        .values_list(
            "team_id",
            "workers",
            "gpus_per_worker",
            _seconds_of("started_at"),
            _seconds_of("finished_at"),
            "state",
        )
    )
    usage: dict[int, float] = defaultdict(float)
    t_now = now.timestamp()
    for team_id, workers, gpw, started, finished, state in rows:
        if finished is None and state not in (JobState.RUNNING, JobState.PREEMPTED):
            continue
        start = max(_ts(started), horizon)
        end = _ts(finished) if finished is not None else t_now
        if end <= start:
            continue
        # Integral of the decay over [start, end], closed form, written with expm1: as a
        # difference of two exponentials it rounds to 0 when the half-life dwarfs the run.
        k = math.log(2) / half_life_s
        weight = math.exp(-k * (t_now - end)) * -math.expm1(-k * (end - start)) / k
        usage[team_id] += workers * gpw * weight
    return usage


def build_snapshot(*, now: datetime) -> tuple[Snapshot, SnapshotIndex]:
    """Read everything the engine needs. Queries: priority classes, teams, quotas, usage, nodes,
    live allocations, running jobs, pending jobs — eight, whatever the cluster's size — plus the
    run-time model's read of the jobs finished since its last one, and, when routing is in force
    (``scheduler.routing_facts``), a fixed few for the clusters' facts."""
    config = policy_config()
    index = SnapshotIndex()
    priorities = dict(PriorityClass.objects.values_list("name", "value"))

    team_rows = list(TeamRow.objects.values_list("id", "slug", "parent__slug", "fair_share_weight"))
    quotas: dict[int, dict[str, Quota]] = defaultdict(dict)
    for team_id, model, guaranteed, borrow in QuotaRow.objects.values_list(
        "team_id", "gpu_model__name", "guaranteed_gpus", "borrow_limit_gpus"
    ):
        quotas[team_id][model] = Quota(guaranteed=guaranteed, borrow_limit=borrow)
    usage = _decayed_usage(now, config.fair_share_half_life_s)
    teams = tuple(
        Team(
            name=slug,
            parent=parent,
            weight=_fair_share_weight(slug, weight),
            quota=quotas.get(pk, {}),
            usage_gpu_s=usage.get(pk, 0.0),
        )
        for pk, slug, parent, weight in team_rows
    )

    node_rows = list(NodeRow.objects.in_capacity().select_related("gpu_model", "cluster"))
    busy: dict[int, set[int]] = defaultdict(set)
    placements: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    node_name_by_id = {n.pk: n.name for n in node_rows}
    for node_id, gpu_index, job_id in Allocation.objects.filter(ended_at__isnull=True).values_list(
        "node_id", "gpu_index", "job_id"
    ):
        busy[node_id].add(gpu_index)
        if node_id in node_name_by_id:
            placements[job_id][node_name_by_id[node_id]].append(gpu_index)

    nodes = []
    for row in node_rows:
        index.node_by_name[row.name] = row
        state = row.state if row.cluster.backend_available else UNREACHABLE_NODE_STATE
        if state == NodeState.READY and row.retiring_since is not None:
            # Retiring (scheduler.retirement): it was drained; whatever put it back to ready
            # since, nothing new starts on a node that is leaving.
            state = NodeState.DRAINING
        elif state == NodeState.READY and row.cluster_hold:
            state = NodeState.DRAINING  # the backend would not start anything there
        elif state == NodeState.READY and row.avoid_until is not None and row.avoid_until > now:
            # The cluster kept a run placed here waiting for a reason about the node: a new
            # run would wait the same way (scheduler.loop.cluster_pending).
            state = NodeState.DRAINING
        nodes.append(
            Node(
                name=row.name,
                gpu_model=row.gpu_model.name,
                gpus=row.gpu_count,
                free_gpus=tuple(i for i in range(row.gpu_count) if i not in busy[row.pk]),
                zone=row.zone,
                rack=row.rack,
                nvlink_domain=row.nvlink_domain or row.name,
                fabric=row.fabric,
                spot=row.spot,
                health=row.health,
                state=state,
                datasets=_cached_datasets(row),
            )
        )

    job_fields = (
        "id",
        "team__slug",
        "priority_class__name",
        "gpu_model__name",
        "workers",
        "gpus_per_worker",
        "preemptible",
        "checkpoint_interval_s",
        "runtime_limit_s",
        "elastic_min_workers",
        "elastic_max_workers",
        "state",
        "dataset",
        "earlier_runs_s",
        "requeued",
        "name",
        "image",
        "submitter__username",
    )
    running_rows = list(
        Job.objects.filter(state__in=[JobState.RUNNING, JobState.PREEMPTED]).values(
            *job_fields,
            submitted_s=_seconds_of("submitted_at"),
            started_s=_seconds_of("started_at"),
            last_checkpoint_s=_seconds_of("last_checkpoint_at"),
            preempt_deadline_s=_seconds_of("preempt_deadline"),
        )
    )
    pending_fields = (*job_fields, "team_id", "why_pending", "estimated_start", "routing")
    pending_rows = list(
        Job.objects.filter(state=JobState.PENDING)
        # Held back after the cluster kept its last run pending for a limit of its own
        # (scheduler.loop.cluster_pending): its why says until when.
        .exclude(retry_after__gt=now)
        .values(
            *pending_fields,
            submitted_s=_seconds_of("submitted_at"),
            deadline_s=_seconds_of("deadline"),
        )
        .order_by("id")
    )
    estimates = _runtime_estimates(running_rows + pending_rows)
    t_now = now.timestamp()

    cluster_rows = list({row.cluster_id: row.cluster for row in node_rows}.values())
    routed = routing_in_force(
        enabled_clusters=len(cluster_rows),
        pending_routed=any(row["routing"] is not None for row in pending_rows),
    )
    facts = routing_facts(now=now, cluster_rows=cluster_rows) if routed else None
    if facts is not None:
        teams = tuple(
            replace(t, clusters=facts.team_clusters.get(pk))
            for t, (pk, *_) in zip(teams, team_rows, strict=True)
        )
        nodes = [
            replace(n, cluster=row.cluster.name) for n, row in zip(nodes, node_rows, strict=True)
        ]

    running = []
    for row in running_rows:
        key = str(row["id"])
        index.job_pk[key] = row["id"]
        started = _ts(row["started_s"]) or t_now
        expected_end = None
        if row["id"] in estimates:
            expected_end = started + estimates[row["id"]]
            if expected_end <= t_now and not row["runtime_limit_s"]:
                # A job that outran its prediction is expected to run as long again as it has
                # run: run times are heavy-tailed, so the longer a job ran the longer it runs.
                expected_end = t_now + max(t_now - started, 60.0)
        running.append(
            RunningJob(
                id=key,
                team=row["team__slug"],
                priority_class=row["priority_class__name"],
                gpu_model=row["gpu_model__name"],
                workers=row["workers"],
                gpus_per_worker=row["gpus_per_worker"],
                placement={n: tuple(sorted(g)) for n, g in placements.get(row["id"], {}).items()},
                started_at=started,
                expected_end=expected_end,
                preemptible=row["preemptible"],
                last_checkpoint_at=_ts(row["last_checkpoint_s"]),
                checkpoint_interval_s=row["checkpoint_interval_s"],
                # Not elastic once running: no backend changes a run's workers after submit (its
                # processes are placed then), so a shrink or growth the engine planned would be
                # written here and never happen on the cluster: GPUs billed that the job never
                # got, or handed to another job while it still holds them. An elastic job starts
                # with any worker count in its range that fits; it then keeps that count.
                elastic=None,
                releasing_at=(
                    _ts(row["preempt_deadline_s"]) if row["state"] == JobState.PREEMPTED else None
                ),
                # Run seconds of earlier attempts: least-attained-service queues count them.
                attained_service_s=row["earlier_runs_s"],
                # Submission order decides which running jobs a waiting one may move (LAS rules).
                submitted_at=_ts(row["submitted_s"]),
            )
        )

    held_to_lists = facts is not None and bool(facts.team_clusters)
    retired = (
        _retired_clusters() if held_to_lists or any(r["routing"] for r in pending_rows) else {}
    )
    teams_by_name = {t.name: t for t in teams}
    pending = []
    for row in pending_rows:
        key = str(row["id"])
        index.job_pk[key] = row["id"]
        index.pending_shown[row["id"]] = (
            row["team_id"],
            row["team__slug"],
            row["name"],
            row["why_pending"],
            row["estimated_start"],
        )
        if retired and (
            why := retired_confinement(row["routing"], retired, job_id=row["id"])
            or retired_team_clusters(teams_by_name, row["team__slug"], retired)
        ):
            index.retired_why[row["id"]] = why
            continue
        pending.append(
            PendingJob(
                id=key,
                team=row["team__slug"],
                priority_class=row["priority_class__name"],
                gpu_model=row["gpu_model__name"],
                workers=row["workers"],
                gpus_per_worker=row["gpus_per_worker"],
                submitted_at=_ts(row["submitted_s"]) or now.timestamp(),
                runtime_estimate_s=estimates.get(row["id"]),
                preemptible=row["preemptible"],
                dataset=row["dataset"] or None,
                dataset_ready=True,
                elastic=_elastic(row),
                attained_service_s=row["earlier_runs_s"],
                requeued=row["requeued"],
                deadline=_ts(row["deadline_s"]),
                routing=(
                    job_routing(row["routing"], job_id=row["id"]) if facts is not None else None
                ),
                dataset_size_gb=(
                    facts.dataset_size_gb.get(row["dataset"]) if facts is not None else None
                ),
            )
        )

    snapshot = Snapshot(
        now=now.timestamp(),
        config=config,
        priority_classes=priorities,
        teams=teams,
        nodes=tuple(nodes),
        running=tuple(running),
        pending=tuple(pending),
        clusters=facts.clusters if facts is not None else (),
        datasets=facts.datasets if facts is not None else (),
    )
    return snapshot, index


def _retired_clusters() -> dict[str, bool]:
    """Clusters being retired or retired (``scheduler.retirement``): name -> retired yet."""
    return {
        name: retired_at is not None
        for name, retired_at in Cluster.objects.filter(retiring_since__isnull=False).values_list(
            "name", "retired_at"
        )
    }


def retired_confinement(
    stored: dict[str, Any] | None, retired: dict[str, bool], *, job_id: int
) -> str:
    """Why a pending job confined (its routing's ``clusters``) to retired or retiring clusters
    only will not start, or "" when it may run elsewhere. Such a job stays pending rather than
    being cancelled, as Slurm leaves a job pending on an inactive partition and Kueue on an
    inactive ClusterQueue: a retirement can be undone, a cancelled job cannot."""
    routing = job_routing(stored, job_id=job_id)
    names = routing.clusters if routing is not None else None
    if not names or not all(name in retired for name in names):
        return ""
    listed = ", ".join(f"{n} ({'retired' if retired[n] else 'being retired'})" for n in names)
    return (
        f"it may run only on {listed}; no new job starts there. It stays pending until an admin "
        "reinstates the cluster: cancel it and resubmit naming a cluster in service"
    )


def retired_team_clusters(teams: dict[str, Team], team: str, retired: dict[str, bool]) -> str:
    """Why a pending job of ``team`` will not start when every cluster the team may use (its
    list and its ancestors', ``scheduler.policy.routing.team_clusters``) is retired or being
    retired, or "" when one is in service or the team is held to no list. The engine, which
    sees no pool of a retired cluster, would only say that no allowed cluster holds the job.
    The job stays pending, as :func:`retired_confinement`'s do."""
    allowed = team_clusters(teams, team)
    if not allowed or not all(name in retired for name in allowed):
        return ""
    listed = ", ".join(
        f"{n} ({'retired' if retired[n] else 'being retired'})" for n in sorted(allowed)
    )
    return (
        f"every cluster team {team} may use is retired: {listed}; no new job starts there. It "
        "stays pending until an admin reinstates one of them or lets the team use another cluster"
    )


def _fair_share_weight(slug: str, weight: float) -> float:
    """A team's weight as the engine reads it. The database refuses a negative one but not an
    infinite or NaN one (written around the services: a manual UPDATE), and either made the
    engine raise in every cycle, for every team. Such a weight is read as its nearest bound
    (infinity: the highest weight), NaN as the default weight every team starts with."""
    if number_error(TeamRow, "fair_share_weight", weight) is None:
        return weight
    lo, hi = bounds(TeamRow, "fair_share_weight")
    read: float = TeamRow._meta.get_field("fair_share_weight").default  # (a FloatField's)
    if not math.isnan(weight):
        read = min(max(weight, lo), hi)
    log.error("team %s: fair-share weight %r is out of bounds; read as %r", slug, weight, read)
    return read


def _cached_datasets(row: NodeRow) -> tuple[str, ...]:
    """The dataset names a node caches: the strings of its ``datasets`` list. The field is free
    JSON edited by hand (Django admin, SQL); a number or an object there used to raise in every
    snapshot, stopping the loop for every team, so what is not a name is left out and logged."""
    value = row.datasets
    names = tuple(d for d in value if isinstance(d, str) and d) if isinstance(value, list) else ()
    if value and (not isinstance(value, list) or len(names) != len(value)):
        log.error("node %s: datasets %r is not a list of names; read as %r", row.name, value, names)
    return names


def _runtime_estimates(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Run seconds the engine plans with, by job id: the user's limit where there is one, else
    the prediction from the platform's history (``scheduler.runtime_prediction``); a job with
    neither is left out (the engine's ``default_runtime_s``)."""
    out = {row["id"]: float(row["runtime_limit_s"]) for row in rows if row["runtime_limit_s"]}
    unlimited = [row for row in rows if not row["runtime_limit_s"]]
    if unlimited:
        predicted = predict_runtime_s([describe(row) for row in unlimited])
        out.update((row["id"], p) for row, p in zip(unlimited, predicted, strict=True) if p)
    return out


def _elastic(row: dict[str, Any]) -> Elastic | None:
    if row["elastic_min_workers"] is None:
        return None
    return Elastic(min_workers=row["elastic_min_workers"], max_workers=row["elastic_max_workers"])
