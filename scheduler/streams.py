"""Typed live-stream payloads and their publication on the channel layer.

Groups: ``team.<id>`` (that team's job updates), ``cluster`` (node / GPU state, anonymised: no job
names), ``admin`` (quarantine and node events). Messages are sent after the surrounding transaction
commits, so a listener never hears of a change that was rolled back.
"""

from __future__ import annotations

import logging
from typing import Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

CLUSTER_GROUP = "cluster"
ADMIN_GROUP = "admin"


def team_group(team_id: int) -> str:
    return f"team.{team_id}"


class JobStatusPayload(TypedDict):
    type: Literal["job.status"]
    job: int
    team: str
    name: str
    state: str
    why: str
    estimated_start: str | None
    placement: dict[str, list[int]]
    time: str


class NodeStatusPayload(TypedDict):
    type: Literal["node.status"]
    node: str
    state: str
    health: float
    # GPU index -> "free" | "in use"; never a job's name (other teams see this group too).
    gpus: dict[str, str]
    time: str


class GpuUtilizationPayload(TypedDict):
    type: Literal["gpu.utilization"]
    node: str
    utilization: dict[str, float]
    time: str


class QuarantinePayload(TypedDict):
    type: Literal["node.event"]
    node: str
    kind: str
    message: str
    time: str


def _send(group: str, payload: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        # The consumer handler for every payload is "stream.message"; the payload rides inside.
        async_to_sync(layer.group_send)(group, {"type": "stream.message", "payload": payload})
    except Exception:  # a dead channel layer must never break scheduling
        log.warning("could not publish %s to %s", payload.get("type"), group, exc_info=True)


def publish(group: str, payload: dict) -> None:
    """Send ``payload`` to ``group`` once the current transaction (if any) has committed."""
    transaction.on_commit(lambda: _send(group, payload))
