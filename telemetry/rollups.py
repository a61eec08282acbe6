"""Rollups and retention of the telemetry app: the raw samples' per-minute rollups, built from
the minutes the ingest marked, and the pruning of every telemetry table past its retention.

``rollup_build`` and ``telemetry_prune`` are idempotent: re-running them with the same ``now``
changes nothing more. ``telemetry.services.telemetry_tick`` runs them.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import BooleanField, Case, Count, Max, Q, Sum, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import TruncMinute

from . import conf
from .models import GpuErrorEvent, GpuRollup, GpuRollupPending, GpuSample


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
