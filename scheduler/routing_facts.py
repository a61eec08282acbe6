"""Observe, for routing across clusters (docs/routing.md): what the engine knows about each
cluster (prices in force, region, interconnect, datasets held and their egress price,
reachability, observed spot interruptions), datasets' residency, teams' clusters and jobs'
routing constraints, read from the database.

Routing is in force as soon as there is something to route: two or more enabled clusters, or a
constraint (a dataset's residency, a team's clusters, a pending job's routing). With one cluster
and no constraint the snapshot lists no clusters, and the engine decides exactly as before.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from core.caching import cache_quietly, cached_or_none
from scheduler.policy import Cluster as PolicyCluster
from scheduler.policy import Dataset as PolicyDataset
from scheduler.policy import JobRouting, SnapshotError, routing_from_dict

from .models import Allocation, Cluster, ClusterDataset, Dataset, JobEvent, TeamClusterAccess

log = logging.getLogger(__name__)

# Spot interruptions are observed over this window and cached for this long.
SPOT_OBSERVATION_DAYS = 30
SPOT_RATES_CACHE_S = 300
_SPOT_CACHE_KEY = "routing:spot-interruption-rates:v1"
# The highest rate the engine is given: the engine requires < 1 (a run would never end).
MAX_SPOT_INTERRUPTION_RATE = 0.95

# A stored routing object that no longer reads (a field renamed since) allows no cluster: the job
# waits, saying why, rather than running somewhere its owner may have forbidden.
UNREADABLE_ROUTING = JobRouting(clusters=())

PriceBook = dict[str, dict[str, dict[str, float]]]


@dataclass(frozen=True)
class RoutingFacts:
    clusters: tuple[PolicyCluster, ...]
    datasets: tuple[PolicyDataset, ...]
    team_clusters: dict[int, tuple[str, ...]]
    dataset_size_gb: dict[str, float]


def price_book_source() -> Callable[..., PriceBook] | None:
    """``settings.SCHEDULER_PRICE_BOOK_SOURCE``: a dotted path to ``f(*, at, cluster_names)``
    returning cluster -> GPU model -> capacity type -> USD per GPU-hour in force at ``at``."""
    source = getattr(settings, "SCHEDULER_PRICE_BOOK_SOURCE", "")
    return import_string(source) if source else None


def routing_in_force(*, enabled_clusters: int, pending_routed: bool) -> bool:
    return (
        enabled_clusters > 1
        or pending_routed
        or TeamClusterAccess.objects.exists()
        or Dataset.objects.filter(residency_regions__isnull=False).exists()
    )


def job_routing(stored: dict[str, Any] | None, *, job_id: int) -> JobRouting | None:
    """A job's stored routing object for the engine (validated on the way in, so this fails only
    if the contract changed under a stored row)."""
    if stored is None:
        return None
    try:
        return routing_from_dict(stored)
    except SnapshotError as exc:
        log.error("job %s: stored routing no longer reads (%s); it may use no cluster", job_id, exc)
        return UNREADABLE_ROUTING


def spot_interruption_rates(*, now: datetime) -> dict[int, float]:
    """Per cluster id, the fraction of spot GPU time of the last ``SPOT_OBSERVATION_DAYS`` that
    interruptions destroyed (the requeues' lost GPU-seconds over the spot GPU-seconds run)."""
    cached = cached_or_none(_SPOT_CACHE_KEY)
    if cached is not None:
        return dict(cached)
    since = now - timedelta(days=SPOT_OBSERVATION_DAYS)
    run_s: dict[int, float] = defaultdict(float)
    cluster_of_attempt: dict[tuple[int, int], int] = {}
    for cluster_id, job_id, attempt, started, ended in (
        Allocation.objects.filter(node__spot=True, started_at__lte=now)
        .exclude(ended_at__lt=since)
        .values_list("node__cluster_id", "job_id", "attempt", "started_at", "ended_at")
    ):
        run_s[cluster_id] += max(0.0, ((ended or now) - max(started, since)).total_seconds())
        cluster_of_attempt[(job_id, attempt)] = cluster_id
    lost_s: dict[int, float] = defaultdict(float)
    if cluster_of_attempt:
        for job_id, data in JobEvent.objects.filter(
            kind="requeued", time__gte=since, time__lte=now
        ).values_list("job_id", "data"):
            data = data or {}
            lost_attempt: int | None = data.get("attempt")
            on_cluster = (
                cluster_of_attempt.get((job_id, lost_attempt)) if lost_attempt is not None else None
            )
            if on_cluster is not None:
                lost_s[on_cluster] += float(data.get("lost_gpu_s") or 0.0)
    rates = {
        cid: min(lost_s[cid] / seconds, MAX_SPOT_INTERRUPTION_RATE)
        for cid, seconds in run_s.items()
        if seconds > 0
    }
    cache_quietly(_SPOT_CACHE_KEY, list(rates.items()), SPOT_RATES_CACHE_S)
    return rates


def routing_facts(*, now: datetime, cluster_rows: list[Cluster]) -> RoutingFacts:
    """The clusters (enabled ones, ``cluster_rows``), datasets and teams' clusters as the engine
    reads them."""
    names = [c.name for c in cluster_rows]
    source = price_book_source()
    prices: PriceBook = source(at=now, cluster_names=names) if source else {}
    held: dict[int, dict[str, float]] = defaultdict(dict)
    for cluster_id, dataset, egress in ClusterDataset.objects.values_list(
        "cluster_id", "dataset__name", "egress_price_per_gb"
    ):
        held[cluster_id][dataset] = float(egress)
    rates = spot_interruption_rates(now=now)
    clusters = tuple(
        PolicyCluster(
            name=c.name,
            region=c.region,
            interconnect=c.interconnect,
            prices=prices.get(c.name, {}),
            datasets=held.get(c.pk, {}),
            reachable=c.backend_available,
            spot_interruption_rate=rates.get(c.pk, 0.0),
        )
        for c in cluster_rows
    )
    datasets = []
    sizes = {}
    for name, size, regions in Dataset.objects.values_list("name", "size_gb", "residency_regions"):
        if size is not None:
            sizes[name] = size
        if regions is not None:
            datasets.append(PolicyDataset(name=name, regions=tuple(regions)))
    team_clusters: dict[int, list[str]] = defaultdict(list)
    for team_id, cluster in TeamClusterAccess.objects.values_list("team_id", "cluster__name"):
        team_clusters[team_id].append(cluster)
    return RoutingFacts(
        clusters=clusters,
        datasets=tuple(datasets),
        team_clusters={k: tuple(sorted(v)) for k, v in team_clusters.items()},
        dataset_size_gb=sizes,
    )
