"""Writes of the telemetry app: batch ingest and the tick; agent tokens (``telemetry.tokens``,
re-exported here). The tick's stages live in their own modules: rollups and retention in
``telemetry.rollups``, health scoring with automatic quarantine in ``telemetry.health_scoring``,
idle-job flagging in ``telemetry.idle``.

- ``samples_ingest`` stores a whole batch or nothing (validation first, then one transaction: a
  COPY on PostgreSQL, a multi-row insert elsewhere).
- ``rollup_build``, ``telemetry_prune``, ``health_evaluate`` and ``idle_evaluate`` are idempotent:
  re-running them with the same ``now`` changes nothing more. ``telemetry_tick`` runs them at most
  every ``TELEMETRY_EVALUATE_SECONDS`` (claimed through the cache, so one process does it;
  without a cache, each process at most once a period).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from core import streams
from scheduler.models import Node

from . import batches, conf
from .health_scoring import health_evaluate
from .idle import idle_evaluate
from .ingest import ParsedBatch, SampleRow, parse_batch
from .models import GpuErrorEvent, GpuRollupPending, GpuSample, NodeTelemetry
from .rollups import rollup_build, telemetry_prune
from .tokens import (  # noqa: F401 (the tokens' services, here with the app's others)
    TOKEN_PREFIX,
    forget_cached_tokens,
    forget_node_tokens,
    node_token_for,
    node_token_issue,
    node_token_revoke,
)

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

SAMPLE_COLUMNS = (
    "node_id",
    "gpu_index",
    "time",
    "utilization",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_c",
    "power_w",
    "throttle_thermal",
)


# ---------------------------------------------------------------------------------- ingest


class NodeGone(Exception):
    """The agent's node was deleted (its tokens with it) after its token was cached."""


class BatchInFlight(Exception):
    """The same batch is being stored by another request right now (its answer decides)."""


class NodeOverBudget(Exception):
    """The node wrote its ``TELEMETRY_NODE_ROWS_PER_MINUTE`` this minute; nothing was stored."""

    def __init__(self, retry_after_s: int):
        super().__init__(retry_after_s)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int
    errors: int
    # True when the very same batch was already stored (an agent retrying after a lost answer).
    duplicate: bool = False


def samples_ingest(*, node: Node, body: Any, now: datetime | None = None) -> IngestResult:
    """Validate and store one agent batch for ``node``. All or nothing, and once: the same
    batch sent again within ``batches.DUPLICATE_WINDOW_S`` (a retry) is acknowledged and not
    stored.

    Raises ``ingest.BatchInvalid`` (nothing stored) when any sample is bad, ``NodeGone``
    (nothing stored, the node's cached tokens forgotten) when the node was deleted,
    ``NodeOverBudget`` (nothing stored) when the node already wrote its
    ``TELEMETRY_NODE_ROWS_PER_MINUTE`` this minute (a repeat of a stored batch never is),
    ``BatchInFlight`` (nothing stored) when another request is storing the same batch. After
    commit, the newest utilization of each GPU is published to the cluster group, and a batch
    carrying ECC double-bit errors or XIDs re-scores the node at once (no waiting for a tick).
    That check runs once per batch: when it fails (the error reaches the agent, a 5xx), the
    agent's retry of the batch, a duplicate otherwise, runs it again until one finishes.

    The cache (Redis) only records which batches were seen; it never decides the answer alone.
    When it is unavailable, or fails half-way through a request, the database says whether
    the batch is stored (its samples, read under a per-node lock), a repeat of an urgent batch
    re-scores the node (idempotent: without the cache, whether its check finished is unknown),
    and the row budget is not enforced (fails open, logged): no cache error reaches the agent.
    """
    now = now or timezone.now()
    parsed = parse_batch(
        body,
        gpu_count=node.gpu_count,
        now=now.timestamp(),
        max_samples=conf.get("TELEMETRY_MAX_BATCH_SAMPLES"),
        max_future_s=conf.get("TELEMETRY_MAX_FUTURE_SECONDS"),
        max_age_s=conf.get("TELEMETRY_RAW_RETENTION_SECONDS"),
    )
    urgent = any(kind != "ecc_sbe" for _, _, kind, _, _ in parsed.errors)
    # An agent that did not hear our answer sends the batch again: store it once. The claim is
    # an atomic cache "add"; it is given back when storing fails, so a retry is not lost.
    seen_key = batches.batch_key(node.pk, parsed)
    claimed = batches.batch_claim(seen_key)
    if claimed is False:
        return _seen_batch(node, parsed, now, seen_key, urgent=urgent)
    # No cache (None): no claim to mark or give back; _store_batch asks the database.
    key = seen_key if claimed else None
    try:
        rows = len(parsed.samples) + len(parsed.errors)
        _spend_budget(node, max(rows, BATCH_MIN_ROWS_CHARGED), now)
    except NodeOverBudget:
        batches.batch_release(key)  # not stored: its retry is a new batch
        raise
    try:
        stored = _store_batch(node, parsed, now, unless_stored=key is None)
    except BaseException as exc:
        batches.batch_release(key)
        # A node deleted under a cached token fails its foreign keys at commit: the token
        # went with the node, so the agent is refused as with any dead token.
        if isinstance(exc, IntegrityError) and not Node.objects.filter(pk=node.pk).exists():
            forget_node_tokens(node.pk)
            raise NodeGone(node.pk) from exc
        raise
    if not stored:  # found in the database (no cache): a retry; its check may not have run
        if urgent:
            _urgent_check(node, now, key)
        return IngestResult(accepted=0, errors=0, duplicate=True)
    if urgent:
        batches.batch_mark(key, batches.BATCH_CHECK_DUE)
        _urgent_check(node, now, key)
    else:
        batches.batch_mark(key, batches.BATCH_DONE)
    return IngestResult(accepted=len(parsed.samples), errors=len(parsed.errors))


def _seen_batch(
    node: Node, parsed: ParsedBatch, now: datetime, key: str, *, urgent: bool
) -> IngestResult:
    """The answer to a batch the cache has a claim or a record of (a repeat)."""
    state = batches.batch_state(key)
    if state == batches.BATCH_UNKNOWN:
        # The claim was made, its state cannot be read: stored, or still being stored (or its
        # storer died, and the claim expires after STORING_CLAIM_S). The database tells which;
        # a stored urgent batch is re-scored, since whether its check finished is unknown.
        if not batches.batch_stored(node.pk, parsed.samples):
            raise BatchInFlight(key)
        state = batches.BATCH_CHECK_DUE
    # Not stored yet: acknowledged, the agent would drop a batch that the first attempt may
    # still fail to store; refused (409), it comes again.
    if state == batches.BATCH_STORING:
        raise BatchInFlight(key)
    # Stored, but its check failed (that attempt answered an error): this retry is the
    # only one that will come for it, and the tick may be a minute away.
    if urgent and state == batches.BATCH_CHECK_DUE:
        _urgent_check(node, now, key)
    return IngestResult(accepted=0, errors=0, duplicate=True)


# What a batch costs the platform beyond its rows (a request, a transaction, a publication:
# docs/benchmarks.md), counted as rows against the node's budget: a flood of one-sample batches
# is held to TELEMETRY_NODE_ROWS_PER_MINUTE / 40 requests a minute (500 by default), while an
# agent's urgent sends (a few a second at most in an XID storm) stay well inside it.
BATCH_MIN_ROWS_CHARGED = 40


def _spend_budget(node: Node, rows: int, now: datetime) -> None:
    """Count ``rows`` against the node's budget of this clock minute; raise ``NodeOverBudget``
    when the count had already reached it. Without a cache there is no budget (logged): it
    fails open, as the platform's rate limits do, because it holds back one flooding agent,
    while refusing every node's batches for an outage would blind the health rules (ECC/XID
    quarantine) across the cluster; each batch stays bounded by ``TELEMETRY_MAX_BATCH_SAMPLES``."""
    minute = int(now.timestamp() // 60)
    key = f"telemetry:rows:{node.pk}:{minute}"
    try:
        cache.add(key, 0, timeout=120)
        spent = cache.incr(key, rows)
    except Exception:
        log.warning("telemetry write budget skipped: cache unavailable")
        return
    if spent - rows >= conf.get("TELEMETRY_NODE_ROWS_PER_MINUTE"):
        raise NodeOverBudget(retry_after_s=60 * (minute + 1) - int(now.timestamp()))


def _urgent_check(node: Node, now: datetime, key: str | None) -> None:
    """Re-score ``node`` now (quarantine on a critical error); the batch under ``key`` is done
    once it finished. Raises what failed, so the agent retries and the retry checks again."""
    health_evaluate(now=now, node_ids=[node.pk], raise_quarantine_failure=True)
    batches.batch_mark(key, batches.BATCH_DONE)


def _store_batch(node: Node, parsed: ParsedBatch, now: datetime, *, unless_stored: bool) -> bool:
    """Store the batch in one transaction; True once stored. With ``unless_stored`` (no cache
    claimed the batch), first take the node's batch lock and return False, storing nothing,
    when the batch's samples are in the database already (``batches.lock_node_batches``)."""
    with transaction.atomic():
        if unless_stored:
            batches.lock_node_batches(node.pk)
            if batches.batch_stored(node.pk, parsed.samples):
                return False
        _insert_samples(node.pk, parsed.samples, durable=bool(parsed.errors))
        if parsed.errors:
            GpuErrorEvent.objects.bulk_create(
                GpuErrorEvent(
                    node_id=node.pk,
                    gpu_index=gpu,
                    time=datetime.fromtimestamp(ts, UTC),
                    kind=kind,
                    code=code,
                    count=count,
                )
                for gpu, ts, kind, code, count in parsed.errors
            )
        _mark_unrolled(node.pk, parsed.samples, now)
        _record_batch(node, parsed, now)
        _publish_utilization(node, parsed)
    return True


def _insert_samples(node_id: int, samples: list[SampleRow], *, durable: bool) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            if not durable:
                # Routine samples: skip waiting for the WAL flush at commit. A database crash
                # may lose the last fraction of a second of utilization readings (never an
                # inconsistent row); batches carrying ECC/XID errors always commit durably.
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
            _copy_samples(cursor.cursor, node_id, samples)
        return
    GpuSample.objects.bulk_create(
        (
            GpuSample(
                node_id=node_id,
                gpu_index=gpu,
                time=datetime.fromtimestamp(ts, UTC),
                utilization=util,
                memory_used_mib=used,
                memory_total_mib=total,
                temperature_c=temp,
                power_w=power,
                throttle_thermal=thr,
            )
            for gpu, ts, util, used, total, temp, power, thr in samples
        ),
        batch_size=500,
    )


def _copy_samples(raw_cursor: psycopg.Cursor[Any], node_id: int, samples: list[SampleRow]) -> None:
    """COPY in PostgreSQL's text format, built in one string: every value is a number, a boolean
    or NULL (validated), so nothing needs escaping, and one write beats a call per row."""
    table = GpuSample._meta.db_table
    lines = []
    for gpu, ts, util, used, total, temp, power, thr in samples:
        when = datetime.fromtimestamp(ts, UTC).isoformat()
        watts = "\\N" if power is None else repr(float(power))
        lines.append(
            f"{node_id}\t{gpu}\t{when}\t{util!r}\t{used}\t{total}\t{temp}\t{watts}\t"
            f"{'t' if thr else 'f'}\n"
        )
    with raw_cursor.copy(f"COPY {table} ({', '.join(SAMPLE_COLUMNS)}) FROM STDIN") as copy:
        copy.write("".join(lines))


def _mark_unrolled(node_id: int, samples: list[SampleRow], now: datetime) -> None:
    """Mark the minutes this batch brought samples for (the rollup's work list). An upsert
    that touches an existing mark, not an insert that skips it: updating the row locks it, so a
    rollup that is clearing this very mark waits for this batch (and reads its samples) or has
    committed (and this batch marks the minute again)."""
    minutes = {int(ts // 60) * 60 for _, ts, *_ in samples}
    GpuRollupPending.objects.bulk_create(
        [
            GpuRollupPending(node_id=node_id, minute=datetime.fromtimestamp(m, UTC), marked_at=now)
            for m in sorted(minutes)
        ],
        update_conflicts=True,
        unique_fields=["node", "minute"],
        update_fields=["marked_at"],
    )


def _record_batch(node: Node, parsed: ParsedBatch, now: datetime) -> None:
    """Bump the node's bookkeeping row. Plain SQL: it runs on every batch, and compiling the
    equivalent ORM update costs more than executing it."""
    newest = datetime.fromtimestamp(max(ts for ts, _ in parsed.latest.values()), UTC)
    at = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {NodeTelemetry._meta.db_table} SET last_batch_at = %s, "
            "last_sample_at = %s, samples_received = samples_received + %s, "
            "agent_version = CASE WHEN %s <> '' THEN %s ELSE agent_version END, "
            "agent_dropped = COALESCE(%s, agent_dropped) WHERE node_id = %s",
            [
                at(now),
                at(newest),
                len(parsed.samples),
                parsed.agent_version,
                parsed.agent_version,
                parsed.agent_dropped,
                node.pk,
            ],
        )
        if cursor.rowcount:
            return
    try:
        with transaction.atomic():
            NodeTelemetry.objects.create(
                node=node,
                last_batch_at=now,
                last_sample_at=newest,
                samples_received=len(parsed.samples),
                agent_version=parsed.agent_version,
                agent_dropped=parsed.agent_dropped or 0,
            )
    except IntegrityError:  # a concurrent first batch created it: count this one too
        NodeTelemetry.objects.filter(pk=node.pk).update(
            samples_received=F("samples_received") + len(parsed.samples)
        )


def _publish_utilization(node: Node, parsed: ParsedBatch) -> None:
    # Per batch (one node), but only to the sockets showing the cluster view.
    payload: streams.ClusterUtilizationPayload = {
        "type": "cluster.utilization",
        # The stream's unit is a 0..1 fraction (the simulated backend's too).
        "nodes": {node.name: {str(g): round(u / 100, 3) for g, (_, u) in parsed.latest.items()}},
        "time": timezone.now().isoformat(),
    }
    streams.publish(streams.UTILIZATION_GROUP, dict(payload))


# ------------------------------------------------------------------------------- the tick

TICK_CACHE_KEY = "telemetry:tick"
PRUNE_CACHE_KEY = "telemetry:prune"
# key -> when this process last claimed it, used only while the cache is unavailable.
_local_claims: dict[str, datetime] = {}


def _claim_period(key: str, now: datetime, period_s: float) -> bool:
    """Claim the work under ``key`` for ``period_s`` across processes (a cache "add"). Without
    a cache, per process: each runs it at most once a period. The tick's stages are idempotent,
    so a few processes doing them is only work, while skipping them for an outage would leave
    nodes unscored and the raw table unpruned."""
    try:
        return bool(cache.add(key, now.isoformat(), timeout=period_s))
    except Exception:
        log.warning("telemetry %s claimed for this process only: cache unavailable", key)
    last = _local_claims.get(key)
    if last is not None and timedelta(0) <= now - last < timedelta(seconds=period_s):
        return False
    _local_claims[key] = now
    return True


def forget_local_claims() -> None:
    """Drop this process's claims of tick periods made without a cache (tests)."""
    _local_claims.clear()


def telemetry_tick(*, now: datetime | None = None, force: bool = False) -> bool:
    """Rollups, then health scoring, then idle flagging; pruning once per
    ``TELEMETRY_PRUNE_SECONDS``. Runs at most once per ``TELEMETRY_EVALUATE_SECONDS`` across
    processes (a cache ``add`` claims the slot); returns whether it ran. Never raises: a
    telemetry fault must not stop the scheduling loop that calls it."""
    now = now or timezone.now()
    period = conf.get("TELEMETRY_EVALUATE_SECONDS")
    if not force and not _claim_period(TICK_CACHE_KEY, now, period):
        return False
    # Each stage on its own: a fault in one (say, rollups) must not skip the others (health
    # scoring and quarantine, idle flags).
    for stage in (rollup_build, health_evaluate, idle_evaluate):
        try:
            stage(now=now)
        except Exception:
            log.exception("telemetry %s failed; the next tick retries", stage.__name__)
    try:
        if force or _claim_period(PRUNE_CACHE_KEY, now, conf.get("TELEMETRY_PRUNE_SECONDS")):
            telemetry_prune(now=now)
    except Exception:
        log.exception("telemetry pruning failed; the next tick retries")
    return True
