"""Which agent batches were seen: the ingest's record of them, so that a batch an agent sends
again (it did not hear our answer) is stored once.

The cache (Redis) keeps the record: an atomic claim while a request stores a batch, then its
state. The cache only saves the database a read: every function here survives the cache being
unavailable (logged), and ``batch_stored``, under ``lock_node_batches``, answers from the
database what the cache cannot."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime

from django.core.cache import cache
from django.db import connection

from .ingest import ParsedBatch, SampleRow
from .models import GpuSample

log = logging.getLogger(__name__)

# A batch seen within this long is a retry of the same batch, not new readings.
DUPLICATE_WINDOW_S = 3600

# What the cache says of a batch it has seen (the value under its key): claimed by a request
# that is storing it; stored, with the urgent health check it asks for not finished yet; done.
BATCH_STORING, BATCH_CHECK_DUE, BATCH_DONE = "storing", "check-due", "done"
# What ``batch_state`` answers when the cache could not be read.
BATCH_UNKNOWN = "unknown"
# How long a claim to store a batch holds: far longer than a store takes, short enough that a
# worker killed mid-store does not leave the agent's retries refused for the whole window.
STORING_CLAIM_S = 60

# With the node's id in its low half, one PostgreSQL advisory lock per node ("telm"); the
# other advisory keys of the platform are small numbers, never in this range.
BATCH_LOCK_NAMESPACE = 0x7465_6C6D << 32


def batch_key(node_id: int, parsed: ParsedBatch) -> str:
    digest = hashlib.sha256(repr((parsed.samples, parsed.errors)).encode()).hexdigest()[:32]
    return f"telemetry:batch:{node_id}:{digest}"


def batch_claim(key: str) -> bool | None:
    """Claim the batch under ``key`` for storing: True when claimed, False when it was seen
    before (claimed or stored), None when the cache is unavailable (the database decides)."""
    try:
        return bool(cache.add(key, BATCH_STORING, timeout=STORING_CLAIM_S))
    except Exception:
        log.warning("telemetry duplicate check in the database: cache unavailable")
        return None


def batch_state(key: str) -> str | None:
    """The state the cache records for a seen batch; ``BATCH_UNKNOWN`` when it cannot say."""
    try:
        state = cache.get(key)
    except Exception:
        log.warning("telemetry duplicate check in the database: cache unavailable")
        return BATCH_UNKNOWN
    return state if isinstance(state, str) else None


def batch_mark(key: str | None, state: str) -> None:
    if key is None:
        return
    try:
        cache.set(key, state, timeout=DUPLICATE_WINDOW_S)
    except Exception:  # the tick's health check is the backstop; the batch itself is stored
        log.warning("telemetry batch state not recorded: cache unavailable")


def batch_release(key: str | None) -> None:
    """Give back the claim on a batch that was not stored, so that its retry stores it."""
    if key is None:
        return
    try:
        cache.delete(key)
    except Exception:  # the claim expires after STORING_CLAIM_S; until then retries get a 409
        log.warning("telemetry batch claim not given back: cache unavailable")


def lock_node_batches(node_id: int) -> None:
    """Hold the node's batch lock until the current transaction ends (PostgreSQL; elsewhere,
    the embedded SQLite demo, writes are serialized by the database). Taken only when no
    cache claimed a batch: two attempts of one batch then wait for each other, and the second
    finds the first's rows. A lock for the rare case rather than a unique index on the hot
    samples table, which every insert would pay for."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [BATCH_LOCK_NAMESPACE + node_id])


def batch_stored(node_id: int, samples: list[SampleRow]) -> bool:
    """Whether every sample of a batch is stored for the node: a retry of a stored batch (one
    transaction stored all its rows, its error events with them). A batch that only overlaps
    stored ones is new readings. One range read on the (node, time) index."""
    wanted = {(gpu, datetime.fromtimestamp(ts, UTC)) for gpu, ts, *_ in samples}
    times = [at for _, at in wanted]
    stored = GpuSample.objects.filter(
        node_id=node_id, time__gte=min(times), time__lte=max(times)
    ).values_list("gpu_index", "time")
    return wanted <= set(stored)
