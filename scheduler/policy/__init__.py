"""Scheduling policy engine: a snapshot in, decisions out. Pure Python, deterministic.

No Django, no clock reads, no I/O inside the engine: time comes from ``Snapshot.now``. The same
snapshot always gives the same decisions. See docs/policy.md for the rules and defaults.
"""

from scheduler.policy.codec import (
    MAX_JOB_WORKERS,
    MAX_NODE_GPUS,
    SnapshotError,
    config_deprecations,
    config_from_dict,
    config_to_dict,
    decisions_from_dict,
    decisions_to_dict,
    snapshot_from_dict,
    snapshot_to_dict,
)
from scheduler.policy.engine import decide, queue_order
from scheduler.policy.model import (
    NODE_STATES,
    QUEUE_ORDERS,
    Cluster,
    Config,
    Dataset,
    Decisions,
    Elastic,
    JobRouting,
    Las,
    Node,
    Pending,
    PendingJob,
    Preempt,
    Quota,
    Reserve,
    Resize,
    RunningJob,
    Snapshot,
    Start,
    Team,
)
from scheduler.policy.routing import start_violations
from scheduler.policy.routing_codec import routing_from_dict, routing_to_dict

__all__ = [
    "MAX_JOB_WORKERS",
    "MAX_NODE_GPUS",
    "NODE_STATES",
    "QUEUE_ORDERS",
    "Cluster",
    "Config",
    "Dataset",
    "JobRouting",
    "config_deprecations",
    "config_from_dict",
    "config_to_dict",
    "Decisions",
    "Elastic",
    "Las",
    "Node",
    "Pending",
    "PendingJob",
    "Preempt",
    "Quota",
    "Reserve",
    "Resize",
    "RunningJob",
    "Snapshot",
    "SnapshotError",
    "Start",
    "Team",
    "decide",
    "queue_order",
    "routing_from_dict",
    "routing_to_dict",
    "decisions_from_dict",
    "decisions_to_dict",
    "snapshot_from_dict",
    "snapshot_to_dict",
    "start_violations",
]
