"""Prometheus metrics: what the processes observe (cycle and request durations) plus gauges read
from the database at scrape time.

Registries. By default each process keeps its own registry (``REGISTRY``): right for the demo,
where the scheduling loop runs inside the web process. With several processes (gunicorn/daphne
workers, a Celery worker running the cycles) set ``PROMETHEUS_MULTIPROC_DIR`` to a directory
shared by all of them on the host, emptied at deploy: prometheus_client then keeps histogram and
counter values in per-process files and ``/metrics`` aggregates them (its multiprocess mode).

Gauges (pending jobs, GPUs by state, fragmentation, node health, idle jobs) are not stored in
any process: ``DatabaseCollector`` computes them on every scrape in a fixed number of queries
(five), so every process answers the same whatever served the scrape.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from scheduler.models import Job, Node
from scheduler.states import JobState

from .models import JobIdleFlag, NodeTelemetry

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
# In multiprocess mode the values live in files; the metric objects need no registry.
REGISTRY = CollectorRegistry(auto_describe=True)
_registry = None if MULTIPROCESS else REGISTRY

CYCLE_SECONDS = Histogram(
    "gpuplatform_scheduler_cycle_seconds",
    "Duration of one scheduling cycle (sync, snapshot, decide, apply, reconcile).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=_registry,
)
DECIDE_SECONDS = Histogram(
    "gpuplatform_scheduler_decide_seconds",
    "Duration of the policy engine's decision within a cycle.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
    registry=_registry,
)
JOBS_STARTED = Counter(
    "gpuplatform_scheduler_jobs_started",
    "Jobs started by scheduling cycles.",
    registry=_registry,
)
JOBS_PREEMPTED = Counter(
    "gpuplatform_scheduler_jobs_preempted",
    "Jobs preempted by scheduling cycles.",
    registry=_registry,
)
REQUEST_SECONDS = Histogram(
    "gpuplatform_http_request_duration_seconds",
    "HTTP request latency by route pattern, method and status class.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=_registry,
)

_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


def observe_cycle(sender: object, *, result: Any, **kwargs: Any) -> None:
    """Record one cycle (``scheduler.loop.cycle.CycleResult``, sent by ``cycle_finished``); a skipped
    cycle records nothing."""
    if not getattr(result, "ran", False):
        return
    CYCLE_SECONDS.observe(result.total_ms / 1000)
    DECIDE_SECONDS.observe(result.decide_ms / 1000)
    if result.started:
        JOBS_STARTED.inc(len(result.started))
    if result.preempted:
        JOBS_PREEMPTED.inc(len(result.preempted))


class RequestLatencyMiddleware:
    """Times every request. The route label is the URL pattern, never the concrete path (so ids
    do not explode the label set); an unresolved path is ``unmatched``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = getattr(match, "route", None) if match else None
        # Router routes are regexes ("api/v1/jobs/$"); drop the anchors for readable labels.
        route = route.lstrip("^").rstrip("$") if route else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        REQUEST_SECONDS.labels(route, method, f"{response.status_code // 100}xx").observe(
            time.perf_counter() - start
        )
        return response


class DatabaseCollector:
    """Gauges computed from the database at scrape time, in five queries whatever the size of
    the cluster or the queue."""

    def describe(self) -> list[Metric]:
        # Without this the registry calls collect() at import to learn the names, which queries
        # the database before it may exist (manage.py migrate on a fresh machine).
        return []

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "gpuplatform_jobs_pending",
            "Pending jobs by team and priority class.",
            labels=["team", "priority"],
        )
        running = GaugeMetricFamily(
            "gpuplatform_jobs_running", "Running jobs by team.", labels=["team"]
        )
        running_by_team: dict[str, int] = defaultdict(int)
        for team, priority, state, n in (
            Job.objects.filter(state__in=[JobState.PENDING, JobState.RUNNING])
            .values_list("team__slug", "priority_class__name", "state")
            .annotate(n=Count("id"))
            .order_by()
        ):
            if state == JobState.PENDING:
                pending.add_metric([team, priority], n)
            else:
                running_by_team[team] += n
        for team, n in sorted(running_by_team.items()):
            running.add_metric([team], n)
        yield pending
        yield running

        nodes = list(
            # A retired node is no capacity: not idle GPUs, not a state of the gauge.
            Node.objects.in_capacity()
            .values_list("name", "gpu_model__name", "state", "gpu_count", "health")
            .annotate(used=Count("allocations", filter=Q(allocations__ended_at__isnull=True)))
            .order_by()
        )
        gpus = GaugeMetricFamily(
            "gpuplatform_gpus",
            "GPUs by model and state: allocated (held by a job, whatever the node's state); "
            "the free ones by their node's state (idle = free on a ready node).",
            labels=["gpu_model", "state"],
        )
        by_model: dict[str, dict[str, int]] = defaultdict(
            lambda: dict.fromkeys(("allocated", "idle", "quarantined", "draining", "down"), 0)
        )
        free_blocks: dict[str, list[int]] = defaultdict(list)
        health = GaugeMetricFamily(
            "gpuplatform_node_health", "Node health score (0..1).", labels=["node"]
        )
        for name, model, state, count, score, used in nodes:
            free = max(0, count - used)
            by_model[model]["allocated"] += min(used, count)
            by_model[model]["idle" if state == "ready" else state] += free
            if state == "ready" and free:
                free_blocks[model].append(free)
            health.add_metric([name], score)
        for model, states in sorted(by_model.items()):
            for state, n in states.items():
                gpus.add_metric([model, state], n)
        yield gpus
        yield health
        yield from self._fragmentation(by_model, free_blocks)

        idle = GaugeMetricFamily(
            "gpuplatform_jobs_idle",
            "Running jobs flagged idle (GPUs below the idle threshold for the idle window).",
            labels=["team"],
        )
        for team, n in (
            JobIdleFlag.objects.filter(cleared_at__isnull=True, job__state=JobState.RUNNING)
            .values_list("job__team__slug")
            .annotate(n=Count("job"))
            .order_by()
        ):
            idle.add_metric([team], n)
        yield idle

        dropped = GaugeMetricFamily(
            "gpuplatform_telemetry_agent_dropped_samples",
            "Samples a node agent dropped because its buffer was full (its own counter).",
            labels=["node"],
        )
        age = GaugeMetricFamily(
            "gpuplatform_telemetry_last_sample_timestamp_seconds",
            "Time of the newest sample received from each node's agent.",
            labels=["node"],
        )
        for name, n, last in NodeTelemetry.objects.values_list(
            "node__name", "agent_dropped", "last_sample_at"
        ):
            dropped.add_metric([name], n)
            if last is not None:
                age.add_metric([name], last.timestamp())
        yield dropped
        yield age

    def _fragmentation(
        self, by_model: dict[str, dict[str, int]], free_blocks: dict[str, list[int]]
    ) -> Iterator[Metric]:
        """Idle GPUs while a pending job that fits them by count waits, and the jobs that fit by
        count but not by shape (no set of nodes offers ``gpus_per_worker`` free per worker)."""
        shapes = list(
            Job.objects.filter(state=JobState.PENDING)
            .values_list("gpu_model__name", "workers", "gpus_per_worker")
            .annotate(n=Count("id"))
            .order_by()
        )
        idle_gpus = GaugeMetricFamily(
            "gpuplatform_fragmentation_idle_gpus",
            "Idle GPUs of a model while a pending job that fits in them (by count) waits.",
            labels=["gpu_model"],
        )
        blocked = GaugeMetricFamily(
            "gpuplatform_fragmentation_blocked_jobs",
            "Pending jobs that fit in a model's idle GPUs by count but not by shape.",
            labels=["gpu_model"],
        )
        waiting_fits: set[str] = set()
        blocked_by: dict[str, int] = defaultdict(int)
        models = sorted(by_model)
        for model, workers, per_worker, n in shapes:
            need = workers * per_worker
            candidates = [model] if model else models
            fits_count = [m for m in candidates if by_model[m]["idle"] >= need]
            waiting_fits.update(fits_count)
            placeable = [
                m for m in fits_count if sum(f // per_worker for f in free_blocks[m]) >= workers
            ]
            if fits_count and not placeable:
                blocked_by[model or "any"] += n
        for m in models:
            idle_gpus.add_metric([m], by_model[m]["idle"] if m in waiting_fits else 0)
            blocked.add_metric([m], blocked_by.get(m, 0))
        if "any" in blocked_by:
            blocked.add_metric(["any"], blocked_by["any"])
        yield idle_gpus
        yield blocked


_DB_COLLECTOR = DatabaseCollector()
if not MULTIPROCESS:
    REGISTRY.register(_DB_COLLECTOR)


def render_latest(accept: str = "") -> tuple[bytes, str]:
    """The exposition for a scrape: (body, content type), in the format ``accept`` asks for."""
    registry = REGISTRY
    if MULTIPROCESS:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(_DB_COLLECTOR)
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
