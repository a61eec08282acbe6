"""The telemetry tick (``telemetry.tasks.tick``) meets an admin's action at the worst moment:
between the tick reading its rows (the nodes it scores, the jobs it judges idle) and writing
what it concluded. The admin's action runs to its commit on a second connection, right after
the tick's read (``tests.integration.concurrency.right_after``); the tick must end cleanly, its
other rows written, nothing written for the row that went."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.models import Event
from scheduler.models import Job, JobEvent, Node
from scheduler.states import JobState
from telemetry.health_scoring import health_evaluate
from telemetry.idle import idle_evaluate
from telemetry.models import JobIdleFlag, NodeTelemetry
from telemetry.rollups import rollup_build
from telemetry.services import samples_ingest
from tests.integration.concurrency import require_postgresql, right_after

from .conftest import make_sample

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


@pytest.fixture
def idle_job(running_job, now):
    """A running job of alice's holding two GPUs of n1 whose telemetry says idle for 35 min."""
    job, node = running_job("idler")
    samples = [
        make_sample(gpu=g, at=now - timedelta(minutes=m), utilization=1.0)
        for m in range(1, 36)
        for g in (0, 1)
    ]
    samples_ingest(node=node, body={"samples": samples}, now=now)
    rollup_build(now=now)
    return job, now


def test_a_job_cancelled_after_the_tick_judged_it_idle_is_not_flagged(platform, idle_job):
    """alice cancels her job just after the tick read the running jobs' utilization: the tick
    flagged the cancelled job idle, wrote an ``idle`` event after its ``cancelled`` one and told
    the team (a notification) that a job she had just stopped was wasting GPUs."""
    from scheduler.transitions import job_cancel

    require_postgresql()
    job, now = idle_job

    def cancel() -> None:
        job_cancel(user=platform["alice"], job_id=job.pk)

    def reads_utilization(sql: str, params: object) -> bool:
        return sql.lstrip().startswith("SELECT a.job_id, COUNT(DISTINCT r.bucket)")

    with right_after(reads_utilization, cancel) as moment:
        flagged, cleared = idle_evaluate(now=now)
    assert moment, "the tick's read of the jobs' utilization was not seen"
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    assert (flagged, cleared) == ([], [])
    assert not JobIdleFlag.objects.filter(job=job).exists()
    assert not JobEvent.objects.filter(job=job, kind="idle").exists()
    assert not Event.objects.filter(kind="job.idle").exists()
