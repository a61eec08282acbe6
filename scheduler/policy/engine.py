"""Scheduling policy engine (placeholder until the real engine lands: every job stays pending)."""

from __future__ import annotations

from scheduler.policy.model import Decisions, Pending, Snapshot


def decide(snapshot: Snapshot) -> Decisions:
    """Return decisions for ``snapshot``; this placeholder leaves every pending job pending."""
    return Decisions(
        pending=tuple(Pending(p.id, "engine not implemented yet") for p in snapshot.pending)
    )
