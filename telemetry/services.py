"""Writes of the telemetry app: agent tokens, batch ingest, rollups, retention, health scoring with
automatic quarantine, and idle-job flagging.

- ``samples_ingest`` stores a whole batch or nothing (validation first, then one transaction: a
  COPY on PostgreSQL, a multi-row insert elsewhere).
- ``rollup_build``, ``telemetry_prune``, ``health_evaluate`` and ``idle_evaluate`` are idempotent:
  re-running them with the same ``now`` changes nothing more. ``telemetry_tick`` runs them at most
  every ``TELEMETRY_EVALUATE_SECONDS`` (claimed through the cache, so one process does it;
  without a cache, each process at most once a period).
- Quarantine and every later step is a conditional UPDATE plus a ``NodeEvent`` published to the
  admin group after commit, like the loop's own failure quarantine (``scheduler.loop.observe``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from django.core.cache import cache
from django.db import IntegrityError, connection, transaction
from django.db.models import BooleanField, Case, Count, F, Max, Q, Sum, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import TruncMinute
from django.utils import timezone

from core import streams
from scheduler.models import Allocation, Job, JobEvent, Node, NodeEvent, NodeState
from scheduler.services import node_event_record, publish_node_status
from scheduler.states import JobState

from . import batches, conf
from .health import NodeEvidence, Verdict, evaluate
from .ingest import ParsedBatch, SampleRow, parse_batch
from .models import (
    GpuErrorEvent,
    GpuErrorKind,
    GpuRollup,
    GpuRollupPending,
    GpuSample,
    JobIdleFlag,
    NodeTelemetry,
)
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


class JobIdlePayload(TypedDict):
    """Published to the job's team group when a job is flagged idle or busy again."""

    type: Literal["job.idle"]
    job: int
    team: str
    name: str
    idle: bool
    since: str | None
    utilization: float | None
    time: str


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


# --------------------------------------------------------------------- rollups and pruning


def _minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


def rollup_build(*, now: datetime, max_minutes: int = 60) -> int:
    """Roll the minutes the ingest marked (``GpuRollupPending``) into ``GpuRollup``, per node:
    each marked node-minute is recomputed whole from its raw samples (an upsert), so a minute
    that got late samples is rolled again with them, never counted twice. Returns rows written.

    A minute is rolled once it ended ``TELEMETRY_ROLLUP_SETTLE_SECONDS`` ago, and only while it
    lies wholly within the raw retention (``TELEMETRY_RAW_RETENTION_SECONDS``): the marks of an
    older minute, whose first samples may already be pruned, are dropped and its rollup kept.
    At most ``max_minutes`` distinct minutes per call, newest first (a backlog is caught up over
    several calls, and the current minutes are never held back behind it). The raw table is read
    only in the marked minutes (its time index), for the marked nodes.

    Idempotent and safe to run concurrently with the ingest: the marks it reads are cleared in
    its transaction before it reads the samples, so a batch that marks one of those minutes
    again either committed before (its samples are read) or marks it after (rolled next call).
    """
    end = _minute(now - timedelta(seconds=conf.get("TELEMETRY_ROLLUP_SETTLE_SECONDS")))
    floor = now - timedelta(seconds=conf.get("TELEMETRY_RAW_RETENTION_SECONDS"))
    with transaction.atomic():
        GpuRollupPending.objects.filter(minute__lt=floor).delete()
        minutes = list(
            GpuRollupPending.objects.filter(minute__lt=end)
            .order_by("-minute")
            .values_list("minute", flat=True)
            .distinct()[:max_minutes]
        )
        if not minutes:
            return 0
        # Locked in (node, minute) order, the order a batch marks its minutes in: a batch and
        # the rollup wait for each other, never deadlock.
        marks = list(
            GpuRollupPending.objects.select_for_update()
            .filter(minute__in=minutes)
            .order_by("node_id", "minute")
            .values_list("pk", "node_id", "minute")
        )
        GpuRollupPending.objects.filter(pk__in=[pk for pk, _, _ in marks]).delete()
        rows = _roll_up(marks)
    return rows


def _marked_ranges(marks: list[tuple[int, int, datetime]]) -> list[Q]:
    """The raw samples of the marked node-minutes, as time ranges: consecutive minutes with the
    same nodes make one (the steady state is one range of a minute or two for every node; a
    late batch adds a range for its node). Each range is read on its own: PostgreSQL plans an OR
    of ranges as a scan of the whole table (measured: 13 s on 69 M rows, against 0.1 s for the
    two ranges read through the time index one after the other). A range of one node (a late
    backlog) is read through the (node, time) index only (``_one_node_range``)."""
    nodes_by_minute: dict[datetime, set[int]] = defaultdict(set)
    for _, node_id, minute in marks:
        nodes_by_minute[minute].add(node_id)
    ranges: list[tuple[datetime, datetime, set[int]]] = []
    for minute in sorted(nodes_by_minute):
        nodes = nodes_by_minute[minute]
        if ranges and ranges[-1][1] == minute and ranges[-1][2] == nodes:
            ranges[-1] = (ranges[-1][0], minute + timedelta(minutes=1), nodes)
        else:
            ranges.append((minute, minute + timedelta(minutes=1), nodes))
    return [
        _one_node_range(next(iter(nodes)), a, b)
        if len(nodes) == 1
        else Q(time__gte=a, time__lt=b, node_id__in=sorted(nodes))
        for a, b, nodes in ranges
    ]


def _one_node_range(node_id: int, start: datetime, end: datetime) -> Q:
    """One node's samples in ``[start, end)``, as a range of (node, time) pairs: the same rows
    as ``node_id = N AND time >= start AND time < end``, in a form only the (node, time) index
    serves. Written plainly, PostgreSQL weighed the node's rows, scattered across the table's
    pages, against the time index's sequential reads of every node's rows in the range, and on
    a 100-node table took the time index in one run of three (283 ms against 46-91 ms,
    docs/benchmarks.md "Telemetry rollups")."""
    table = GpuSample._meta.db_table
    pair = f'("{table}"."node_id", "{table}"."time")'
    at = connection.ops.adapt_datetimefield_value  # as the ORM stores them (SQLite: text)
    return Q(
        RawSQL(
            f"{pair} >= (%s, %s) AND {pair} < (%s, %s)",
            [node_id, at(start), node_id, at(end)],
            output_field=BooleanField(),
        )
    )


def _roll_up(marks: list[tuple[int, int, datetime]]) -> int:
    """Recompute the rollups of the marked node-minutes from their raw samples (upserts)."""
    hot = conf.health_rules()["thermal"]["temperature_c"]
    groups = (
        g
        for q in _marked_ranges(marks)
        for g in GpuSample.objects.filter(q)
        .annotate(bucket=TruncMinute("time"))
        .values("node_id", "gpu_index", "bucket")
        .annotate(
            n=Count("id"),
            u_avg=Sum("utilization") / Count("id"),
            u_max=Max("utilization"),
            m_max=Max("memory_used_mib"),
            m_total=Max("memory_total_mib"),
            t_max=Max("temperature_c"),
            p_sum=Sum("power_w"),
            p_n=Count("power_w"),
            hot=Sum(
                Case(When(Q(throttle_thermal=True) | Q(temperature_c__gte=hot), then=1), default=0)
            ),
        )
    )
    rows = [
        GpuRollup(
            node_id=g["node_id"],
            gpu_index=g["gpu_index"],
            bucket=g["bucket"],
            samples=g["n"],
            util_avg=round(g["u_avg"], 3),
            util_max=g["u_max"],
            memory_used_max_mib=g["m_max"],
            memory_total_mib=g["m_total"],
            temperature_max_c=g["t_max"],
            power_avg_w=(g["p_sum"] / g["p_n"]) if g["p_n"] else None,
            throttled=g["hot"] or 0,
        )
        for g in groups
    ]
    GpuRollup.objects.bulk_create(
        rows,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["node", "gpu_index", "bucket"],
        update_fields=[
            "samples",
            "util_avg",
            "util_max",
            "memory_used_max_mib",
            "memory_total_mib",
            "temperature_max_c",
            "power_avg_w",
            "throttled",
        ],
    )
    return len(rows)


def telemetry_prune(*, now: datetime, chunk: int = 50_000) -> dict[str, int]:
    """Delete raw samples, rollups and error events older than their retention windows, in
    chunks (short transactions, no long lock on the hot table). Returns rows deleted per table.
    """
    deleted = {}
    for model, field, setting in (
        (GpuSample, "time", "TELEMETRY_RAW_RETENTION_SECONDS"),
        (GpuRollup, "bucket", "TELEMETRY_ROLLUP_RETENTION_SECONDS"),
        (GpuErrorEvent, "time", "TELEMETRY_ERROR_RETENTION_SECONDS"),
    ):
        cutoff = now - timedelta(seconds=conf.get(setting))
        total = 0
        while True:
            ids = list(
                model.objects.filter(**{f"{field}__lt": cutoff}).values_list("pk", flat=True)[
                    :chunk
                ]
            )
            if not ids:
                break
            total += model.objects.filter(pk__in=ids).delete()[0]
        # Django's model_name (its stubs type it optional: None only before the class is built).
        deleted[model.__name__.lower()] = total
    return deleted


# ------------------------------------------------------------------------------ health


def _node_event(node: Node, kind: str, message: str, now: datetime) -> None:
    node_event_record(node=node, kind=kind, message=message, now=now)


def node_quarantine_health(*, node: Node, reason: str, now: datetime) -> bool:
    """Quarantine a ready or draining node on a health rule, with a probation of
    ``SCHEDULER_PROBATION_SECONDS``; the loop releases it after probation once its health is
    back above ``SCHEDULER_RELEASE_MIN_HEALTH``. A node an admin had drained gets no probation:
    it stays out until an admin releases it (the loop's release would have put a node under
    maintenance back in service). Returns False (and does nothing) if the node was not
    ready/draining any more (another worker got there first, or it is down)."""
    from django.conf import settings

    from scheduler.backends import get_backend
    from scheduler.backends.base import BackendError

    until = now + timedelta(seconds=settings.SCHEDULER_PROBATION_SECONDS)
    message = f"health rule: {reason}"[:300]
    with transaction.atomic():
        # Locked, so the probation is decided from the state the quarantine replaces.
        was = (
            Node.objects.select_for_update(no_key=True)
            .filter(pk=node.pk, state__in=[NodeState.READY, NodeState.DRAINING])
            .values_list("state", flat=True)
            .first()
        )
        if was is None:
            return False
        probation = None if was == NodeState.DRAINING else until
        Node.objects.filter(pk=node.pk).update(
            state=NodeState.QUARANTINED, state_reason=message, probation_until=probation
        )
        node.state, node.state_reason, node.probation_until = (
            NodeState.QUARANTINED,
            message,
            probation,
        )
        _node_event(node, NodeEvent.Kind.QUARANTINED, message, now)
        if probation is None:
            _node_event(
                node,
                NodeEvent.Kind.PROBATION,
                "drained by an admin: stays out until an admin releases it",
                now,
            )
        else:
            _node_event(
                node,
                NodeEvent.Kind.PROBATION,
                f"probation until {until:%Y-%m-%d %H:%M:%S} UTC",
                now,
            )

        def drain() -> None:
            try:
                get_backend(node.cluster).drain_node(node.name, message)
            except BackendError:
                log.warning("could not drain %s on the backend; next sync retries", node.name)

        transaction.on_commit(drain)
    return True


def _gather_evidence(
    nodes: list[Node], rules: dict[str, Any], now: datetime
) -> dict[int, NodeEvidence]:
    window = now - timedelta(seconds=rules["window_seconds"])
    thermal_window = now - timedelta(seconds=rules["thermal"]["window_seconds"])
    ids = [n.pk for n in nodes]
    # A quarantine and a release each start a clean slate: a quarantined node is judged on what
    # happened since (the release check asks whether it stayed clean), and a node an admin or
    # the loop released is not re-quarantined for the errors that had it quarantined.
    since: dict[int, datetime] = dict(
        NodeEvent.objects.filter(
            node_id__in=ids,
            kind__in=[NodeEvent.Kind.QUARANTINED, NodeEvent.Kind.RELEASED],
            time__gte=window,
        )
        .values("node_id")
        .annotate(t=Max("time"))
        .values_list("node_id", "t")
    )

    def after(field: str, floor: datetime, *, strictly: bool = False) -> Q:
        """The rows of ``field`` that count for each node: from ``floor``, or from the node's
        quarantine or release when that came later (``strictly``: only rows after it). In SQL,
        so the database sums the evidence: reading a quarantined node's rows one by one here
        cost a row per error event, every tick."""
        q = Q(node_id__in=[i for i in ids if i not in since], **{f"{field}__gte": floor})
        for node_id, t in since.items():
            op = "gt" if strictly and t >= floor else "gte"
            q |= Q(node_id=node_id, **{f"{field}__{op}": max(t, floor)})
        return q

    sbe: dict[int, int] = defaultdict(int)
    dbe: dict[int, int] = defaultdict(int)
    xids: dict[int, list[int]] = defaultdict(list)
    # Errors at the quarantine's instant are those that caused it: only later ones count.
    for node_id, kind, code, n in (
        GpuErrorEvent.objects.filter(after("time", window, strictly=True), time__gte=window)
        .values("node_id", "kind", "code")
        .annotate(n=Sum("count"))
        .values_list("node_id", "kind", "code", "n")
        .order_by()
    ):
        if kind == GpuErrorKind.ECC_SBE:
            sbe[node_id] += n
        elif kind == GpuErrorKind.ECC_DBE:
            dbe[node_id] += n
        elif (
            code is not None
        ):  # an XID row (the ingest always sets its code): the code and its repeats
            xids[node_id].extend([code] * n)

    samples: dict[int, int] = defaultdict(int)
    throttled: dict[int, int] = defaultdict(int)
    for node_id, n, hot in (
        GpuRollup.objects.filter(after("bucket", thermal_window), bucket__gte=thermal_window)
        .values("node_id")
        .annotate(n=Sum("samples"), hot=Sum("throttled"))
        .values_list("node_id", "n", "hot")
        .order_by()
    ):
        samples[node_id], throttled[node_id] = n, hot

    submitters: dict[int, int] = dict(
        Allocation.objects.filter(
            after("job__finished_at", window),
            job__state=JobState.FAILED,
            job__finished_at__gte=window,
            attempt=F("job__attempts"),
        )
        .values("node_id")
        .annotate(n=Count("job__submitter_id", distinct=True))
        .values_list("node_id", "n")
        .order_by()
    )

    return {
        n.pk: NodeEvidence(
            ecc_sbe=sbe[n.pk],
            ecc_dbe=dbe[n.pk],
            xid_codes=tuple(xids[n.pk]),
            samples=samples[n.pk],
            throttled=throttled[n.pk],
            failed_job_submitters=submitters.get(n.pk, 0),
        )
        for n in nodes
    }


def health_evaluate(
    *, now: datetime, node_ids: list[int] | None = None, raise_quarantine_failure: bool = False
) -> dict[int, Verdict]:
    """Score every node (or ``node_ids``) from its telemetry and job failures, write the score
    to ``Node.health`` and the reasons to ``NodeTelemetry``, quarantine a ready or draining
    node a rule condemns, and announce (once per probation) a quarantined node whose health
    check fails at the end of its probation. A fixed number of queries plus one small
    transaction per quarantined node. Idempotent for a given ``now``.

    A quarantine that fails is logged and the other nodes go on (the next tick retries it);
    with ``raise_quarantine_failure`` the first such failure is raised once all were tried (the
    ingest's check of one node, whose caller must know it did not finish)."""
    rules = conf.health_rules()
    query = Node.objects.select_related("cluster").order_by("pk")
    if node_ids is not None:
        query = query.filter(pk__in=node_ids)
    nodes = list(query)
    if not nodes:
        return {}
    evidence = _gather_evidence(nodes, rules, now)
    verdicts = {n.pk: evaluate(evidence[n.pk], rules) for n in nodes}
    telemetry = {t.pk: t for t in NodeTelemetry.objects.filter(pk__in=[n.pk for n in nodes])}

    changed = [n for n in nodes if abs(n.health - verdicts[n.pk].score) > 1e-6]
    # Announced when the score moved far; the GPUs in use of all of them in one query (not one
    # per node: a rack overheating moves many nodes in one tick).
    moved_far = [n for n in changed if abs(n.health - verdicts[n.pk].score) >= 0.05]
    in_use: dict[int, set[int]] = defaultdict(set)
    if moved_far:
        for node_id, gpu in Allocation.objects.filter(
            node_id__in=[n.pk for n in moved_far], ended_at__isnull=True
        ).values_list("node_id", "gpu_index"):
            in_use[node_id].add(gpu)
    for node in changed:
        node.health = verdicts[node.pk].score
    for node in moved_far:
        publish_node_status(node=node, now=now, in_use=in_use[node.pk])
    try:
        _scores_write(nodes, changed, verdicts, now)
    except IntegrityError:
        # A node deleted since it was read (an admin removing one added by mistake) fails its
        # telemetry row's foreign key at commit, which took every node's scores with it.
        present = set(
            Node.objects.filter(pk__in=[n.pk for n in nodes]).values_list("pk", flat=True)
        )
        if len(present) == len(nodes):
            raise
        nodes = [n for n in nodes if n.pk in present]
        _scores_write(nodes, [n for n in changed if n.pk in present], verdicts, now)

    min_health = rules["release_min_health"]
    quarantine_failure: Exception | None = None
    for node in nodes:
        verdict = verdicts[node.pk]
        if verdict.quarantine and node.state in (NodeState.READY, NodeState.DRAINING):
            try:
                node_quarantine_health(node=node, reason=verdict.quarantine, now=now)
            except Exception as exc:  # the other condemned nodes are still quarantined
                log.exception("quarantine of node %s failed; retried next tick", node.name)
                quarantine_failure = quarantine_failure or exc
        elif (
            node.state == NodeState.QUARANTINED
            and node.probation_until is not None
            and node.probation_until <= now
            and verdict.score < min_health
        ):
            seen = telemetry.get(node.pk)
            if seen is not None and seen.release_blocked_for == node.probation_until:
                continue
            with transaction.atomic():
                NodeTelemetry.objects.filter(pk=node.pk).update(
                    release_blocked_for=node.probation_until
                )
                why = "; ".join(verdict.reasons) or "low health"
                _node_event(
                    node,
                    NodeEvent.Kind.PROBATION,
                    f"health check failed ({verdict.score:.2f} < {min_health:.2f}: {why}); "
                    "stays quarantined",
                    now,
                )
    if raise_quarantine_failure and quarantine_failure is not None:
        raise quarantine_failure
    return verdicts


def _scores_write(
    nodes: list[Node], changed: list[Node], verdicts: dict[int, Verdict], now: datetime
) -> None:
    with transaction.atomic():
        if changed:
            Node.objects.bulk_update(changed, ["health"])
        NodeTelemetry.objects.bulk_create(
            [
                NodeTelemetry(
                    node=n, health_reasons=list(verdicts[n.pk].reasons), health_evaluated_at=now
                )
                for n in nodes
            ],
            update_conflicts=True,
            unique_fields=["node"],
            update_fields=["health_reasons", "health_evaluated_at"],
        )


# -------------------------------------------------------------------------------- idle jobs


def _idle_candidates(now: datetime) -> dict[int, tuple[int, float | None, float | None]]:
    """job id -> (minutes with telemetry, max per-GPU-minute utilization, average) over the idle
    window, for running jobs holding GPUs, read from the rollups in one query."""
    window = timedelta(seconds=conf.get("TELEMETRY_IDLE_WINDOW_SECONDS"))
    alloc, rollup, job = (
        Allocation._meta.db_table,
        GpuRollup._meta.db_table,
        Job._meta.db_table,
    )
    sql = f"""
        SELECT a.job_id, COUNT(DISTINCT r.bucket), MAX(r.util_avg), AVG(r.util_avg),
               MIN(a.started_at)
        FROM {alloc} a
        JOIN {job} j ON j.id = a.job_id
        LEFT JOIN {rollup} r ON r.node_id = a.node_id AND r.gpu_index = a.gpu_index
             AND r.bucket >= %s AND r.bucket < %s AND r.bucket >= a.started_at
        WHERE a.ended_at IS NULL AND j.state = %s
        GROUP BY a.job_id
    """
    with connection.cursor() as cursor:
        at = connection.ops.adapt_datetimefield_value  # as the ORM stores them (SQLite: text)
        cursor.execute(sql, [at(now - window), at(now), JobState.RUNNING.value])
        rows = cursor.fetchall()
    out = {}
    for job_id, minutes, peak, avg, started in rows:
        if isinstance(started, str):  # SQLite hands back text for an aggregate of datetimes
            started = datetime.fromisoformat(started)
            if started.tzinfo is None:
                started = started.replace(tzinfo=UTC)
        if started > now - window:
            continue  # not running long enough to judge
        out[job_id] = (minutes, peak, avg)
    return out


def idle_evaluate(*, now: datetime) -> tuple[list[int], list[int]]:
    """Flag running jobs whose every GPU stayed below ``TELEMETRY_IDLE_UTILIZATION_PCT`` in
    every minute of the last ``TELEMETRY_IDLE_WINDOW_SECONDS`` (with telemetry for at least
    ``TELEMETRY_IDLE_MIN_COVERAGE`` of those minutes); clear flags of jobs busy again or ended.
    Each change is a ``JobEvent`` (``idle`` / ``idle_cleared``) published to the job's team.
    Returns (flagged job ids, cleared job ids). Idempotent."""
    threshold = conf.get("TELEMETRY_IDLE_UTILIZATION_PCT")
    window_s = conf.get("TELEMETRY_IDLE_WINDOW_SECONDS")
    need = max(1, int(conf.get("TELEMETRY_IDLE_MIN_COVERAGE") * window_s / 60))
    candidates = _idle_candidates(now)
    idle = {
        job_id: avg
        for job_id, (minutes, peak, avg) in candidates.items()
        # (the average is None exactly when the peak is: no rollup in the window)
        if minutes >= need and peak is not None and avg is not None and peak < threshold
    }
    flagged_now = set(
        JobIdleFlag.objects.filter(cleared_at__isnull=True).values_list("job_id", flat=True)
    )
    new = sorted(set(idle) - flagged_now)
    gone = sorted(flagged_now - set(idle))
    jobs = Job.objects.select_related("team").in_bulk(new + gone)
    since = now - timedelta(seconds=window_s)
    flagged: list[int] = []
    for job_id in new:
        job = jobs.get(job_id)
        if job is None:
            continue
        with transaction.atomic():
            # Locked until flagged: a job cancelled or ended since its utilization was read is
            # over, not idle, and its team is not told it wastes GPUs.
            running = Job.objects.select_for_update(no_key=True).filter(
                pk=job_id, state=JobState.RUNNING
            )
            if running.values_list("pk", flat=True).first() is None:
                continue
            JobIdleFlag.objects.update_or_create(
                job=job,
                defaults={
                    "idle_since": since,
                    "flagged_at": now,
                    "utilization": round(idle[job_id], 2),
                    "cleared_at": None,
                },
            )
            message = (
                f"GPUs below {threshold:g}% utilization for {window_s / 60:.0f} min "
                f"(average {idle[job_id]:.1f}%)"
            )
            JobEvent.objects.create(
                job=job,
                kind="idle",
                time=now,
                message=message,
                data={"utilization_pct": round(idle[job_id], 2), "since": since.isoformat()},
            )
            _publish_idle(job, True, since, idle[job_id], now)
        flagged.append(job_id)
    for job_id in gone:
        job = jobs.get(job_id)
        if job is None:
            continue
        with transaction.atomic():
            if not JobIdleFlag.objects.filter(job_id=job_id, cleared_at__isnull=True).update(
                cleared_at=now
            ):
                continue
            if job.state == JobState.RUNNING and job_id in candidates:
                JobEvent.objects.create(
                    job=job,
                    kind="idle_cleared",
                    time=now,
                    message=f"GPU utilization back above {threshold:g}%",
                )
            _publish_idle(job, False, None, None, now)
    return flagged, gone


def _publish_idle(
    job: Job, idle: bool, since: datetime | None, utilization: float | None, now: datetime
) -> None:
    payload: JobIdlePayload = {
        "type": "job.idle",
        "job": job.pk,
        "team": job.team.slug,
        "name": job.name,
        "idle": idle,
        "since": since.isoformat() if since else None,
        "utilization": round(utilization, 2) if utilization is not None else None,
        "time": now.isoformat(),
    }
    # (a dict of its own: streams.publish takes a plain dict, which a TypedDict is not to mypy)
    streams.publish(streams.team_group(job.team_id), dict(payload))


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
