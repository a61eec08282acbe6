"""Scoring reads each node's evidence grouped in the database, quarantined nodes too: a
quarantined node is judged on what happened since its quarantine, and that floor must not turn
its error rows into rows read one by one every tick."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.models import Node, NodeEvent, NodeState
from telemetry.health_scoring import health_evaluate
from telemetry.models import GpuErrorEvent, GpuErrorKind

pytestmark = pytest.mark.django_db


@contextmanager
def rows_read():
    """Counts the rows the database hands back to the process (every SELECT's result size)."""
    seen = {"rows": 0}

    def count(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith(("SELECT", "WITH")):
            seen["rows"] += max(0, context["cursor"].rowcount)
        return result

    with connection.execute_wrapper(count):
        yield seen


def quarantine_with_errors(nodes, now, *, errors_per_node):
    """Quarantine ``nodes`` ten minutes ago, then give each ``errors_per_node`` corrected-ECC
    rows and as many XID 79 rows since (evidence of a probation going badly)."""
    quarantined = now - timedelta(minutes=10)
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(
        state=NodeState.QUARANTINED, probation_until=now + timedelta(hours=1)
    )
    NodeEvent.objects.bulk_create(
        NodeEvent(node=n, kind=NodeEvent.Kind.QUARANTINED, time=quarantined, message="test")
        for n in nodes
    )
    rows = []
    for n in nodes:
        for i in range(errors_per_node):
            at = quarantined + timedelta(seconds=1 + i % 500)
            rows.append(
                GpuErrorEvent(node=n, gpu_index=i % 8, time=at, kind=GpuErrorKind.ECC_SBE, count=2)
            )
            rows.append(
                GpuErrorEvent(node=n, gpu_index=i % 8, time=at, kind=GpuErrorKind.XID, code=79)
            )
        # Before the quarantine: what had it quarantined, not counted during probation.
        rows.append(
            GpuErrorEvent(
                node=n,
                gpu_index=0,
                time=quarantined - timedelta(minutes=1),
                kind=GpuErrorKind.ECC_DBE,
            )
        )
    GpuErrorEvent.objects.bulk_create(rows, batch_size=2000)


def test_quarantined_nodes_evidence_is_read_grouped_whatever_the_rows(cluster, gpu_models):
    for i in range(5, 13):
        Node.objects.create(
            cluster=cluster, name=f"n{i}", gpu_model=gpu_models["h100"], gpu_count=8
        )
    nodes = list(Node.objects.order_by("pk"))
    now = timezone.now()
    health_evaluate(now=now)  # the first run creates the bookkeeping rows

    def two_ticks():
        # The first scores the new evidence (health moves: announced), the second is a steady
        # tick of a probation going badly.
        with CaptureQueriesContext(connection) as moved:
            health_evaluate(now=now)
        with CaptureQueriesContext(connection) as steady, rows_read() as rows:
            verdicts = health_evaluate(now=now)
        return len(moved.captured_queries), len(steady.captured_queries), rows["rows"], verdicts

    quarantine_with_errors(nodes[:2], now, errors_per_node=5)
    few = two_ticks()
    # Three times the quarantined nodes, with a hundred times the evidence rows each.
    quarantine_with_errors(nodes[2:8], now, errors_per_node=500)
    many = two_ticks()

    # The same verdicts as reading the rows one by one: only what happened since each node's
    # quarantine counts (its double-bit error before it does not).
    small, big = few[3], many[3]
    assert small[nodes[0].pk].reasons == ("10 ECC single-bit error(s)", "5 XID error(s) (79)")
    assert big[nodes[2].pk].reasons == ("1000 ECC single-bit error(s)", "500 XID error(s) (79)")
    assert big[nodes[0].pk] == small[nodes[0].pk]
    assert big[nodes[10].pk].score == 1.0 and big[nodes[10].pk].reasons == ()
    # Queries: a fixed number whatever the nodes and rows, announcements included.
    assert many[:2] == few[:2] and few[1] <= 10, (few[:3], many[:3])
    # Rows read: per node and error code, not per event (3 more per newly quarantined node:
    # its quarantine time and its two error codes).
    assert many[2] <= few[2] + 6 * 3, (few[:3], many[:3])
