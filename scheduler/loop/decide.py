"""Decide: the database's snapshot in, the pure policy engine's decisions out.

Reads only: the snapshot is built in a fixed number of queries (``scheduler.snapshot``) and
``scheduler.policy.decide`` is pure and deterministic (same snapshot, same decisions). The last
cycle's snapshot and decisions are kept in the cache for ``dump_snapshot`` and the admin
endpoint.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.cache import cache

from scheduler.policy import Decisions, Snapshot, decide, decisions_to_dict, snapshot_to_dict

from ..snapshot import SnapshotIndex, build_snapshot

log = logging.getLogger(__name__)

# The last cycle's snapshot and decisions, for `dump_snapshot` and the admin endpoint.
LAST_CYCLE_CACHE_KEY = "scheduler:last-cycle"


@dataclass(frozen=True)
class Decided:
    snapshot: Snapshot
    index: SnapshotIndex
    decisions: Decisions
    decide_ms: float


def decide_now(*, now: datetime) -> Decided:
    """The engine's decisions on the database as it is at ``now`` (the engine's clock)."""
    snapshot, index = build_snapshot(now=now)
    t0 = time.perf_counter()
    decisions = decide(snapshot)
    return Decided(snapshot, index, decisions, (time.perf_counter() - t0) * 1000)


def remember_cycle(decided: Decided) -> None:
    """Keep the cycle's snapshot and decisions for a day (``last_cycle``)."""
    try:
        cache.set(
            LAST_CYCLE_CACHE_KEY,
            {
                "snapshot": snapshot_to_dict(decided.snapshot),
                "decisions": decisions_to_dict(decided.decisions),
            },
            timeout=24 * 3600,
        )
    except Exception:  # a cache outage must not stop scheduling
        log.warning("could not store the last cycle's snapshot", exc_info=True)


def last_cycle() -> dict[str, Any] | None:
    """The last cycle's snapshot and decisions as contract JSON, or None."""
    # The cache holds what ``decide`` stored there: that dict, or nothing.
    stored: dict[str, Any] | None = cache.get(LAST_CYCLE_CACHE_KEY)
    return stored
