"""Where a job runs and why there (routing across clusters, docs/routing.md): what the job page
shows from the job's routing constraints, its cluster and the latest ``routed`` event the loop
recorded when it started the job. Reads only what the page already loaded (no query of its own
beyond the job's cluster, which the selector joins)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.models import Job, JobEvent

# The routing object's keys as the page names them (contract names in docs/routing.md).
ROUTING_LABELS = (
    ("clusters", "Allowed clusters"),
    ("regions", "Allowed regions"),
    ("prefer_clusters", "Preferred clusters"),
    ("prefer_regions", "Preferred regions"),
    ("max_price_per_gpu_h", "Max price per GPU-hour"),
    ("spot", "Spot capacity"),
    ("comm_heavy", "Communication-heavy"),
)


def routing_rows(routing: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) for each constraint the job set; the defaults it left are not listed."""
    rows = []
    for key, label in ROUTING_LABELS:
        value = (routing or {}).get(key)
        if value is None or value == []:
            continue
        if isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, list):
            text = ", ".join(str(v) for v in value)
        elif key == "max_price_per_gpu_h":
            text = f"{float(value):.2f} USD"
        else:
            text = str(value)
        rows.append((label, text))
    return rows


def latest_route(events: Sequence[JobEvent]) -> JobEvent | None:
    """The newest ``routed`` event among ``events`` (ordered oldest first), or None."""
    for event in reversed(events):
        if event.kind == "routed":
            return event
    return None


def where_context(job: Job, events: Sequence[JobEvent]) -> dict[str, Any]:
    """The job page's "Where and why" section."""
    route = latest_route(events)
    data = (route.data or {}) if route is not None else {}
    cluster = job.cluster
    region = data.get("region") or (cluster.region if cluster is not None else "")
    return {
        "where": {
            "cluster": cluster,
            "region": region,
            "routing": routing_rows(job.routing),
            "route": route,
            "route_data": data,
            "alternatives": data.get("alternatives") or [],
        }
    }
