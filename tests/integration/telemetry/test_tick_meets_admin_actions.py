"""The telemetry tick (``telemetry.tasks.tick``) meets an admin's action at the worst moment:
between the tick reading its rows (the nodes it scores, the jobs it judges idle) and writing
what it concluded. The admin's action runs to its commit on a second connection, right after
the tick's read (``tests.integration.concurrency.right_after``); the tick must end cleanly, its
other rows written, nothing written for the row that went."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler.models import Node
from telemetry.models import NodeTelemetry
from telemetry.services import health_evaluate
from tests.integration.concurrency import require_postgresql, right_after

pytestmark = pytest.mark.django_db(transaction=True)


def _reads(table: str):
    def matches(sql: str, params: object) -> bool:
        return sql.startswith("SELECT") and f'FROM "{table}"' in sql

    return matches


def test_a_node_deleted_after_the_tick_read_it_is_left_out_and_the_others_are_scored(
    cluster, gpu_models
):
    """An admin adds a node by mistake and deletes it (Django admin allows it: no history) just
    after the tick read the nodes: the upsert of its telemetry row failed its foreign key at
    commit, so the whole tick's scoring (every node's health, the evaluation time) was rolled
    back with a traceback."""
    require_postgresql()
    spare = Node.objects.create(
        cluster=cluster, name="spare", gpu_model=gpu_models["h100"], gpu_count=8
    )
    now = timezone.now()

    with right_after(_reads("scheduler_node"), lambda: Node.objects.get(pk=spare.pk).delete()) as (
        moment
    ):
        health_evaluate(now=now)
    assert moment, "the tick's read of the nodes was not seen"
    assert not Node.objects.filter(pk=spare.pk).exists()
    scored = NodeTelemetry.objects.filter(health_evaluated_at=now)
    assert sorted(scored.values_list("node__name", flat=True)) == ["n1", "n2", "n3", "n4"]
