"""The enforce stage's submits: what they read and write is read and written once for the batch
(``scheduler.loop.submit_batch``), so a started job costs only its backend's own queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler import checkpoint_advice
from scheduler.loop.cycle import run_cycle
from scheduler.loop.enforce import reconcile
from scheduler.models import Allocation, AttemptRecord, Job
from scheduler.transitions import job_requeue

pytestmark = pytest.mark.django_db

# The simulated backend's own check for the run (its submit is idempotent by job and attempt).
# Nothing else is per job: the placements, their nodes, the checkpoint advice's costs, the
# runs' references and the records are each a fixed number of queries for the whole batch.
QUERIES_PER_SUBMIT = 1


def _backends_own(sql: str) -> bool:
    return '"scheduler_simulatedrun"' in sql


@pytest.fixture
def interrupted(platform, submit):
    """A job of vision requeued after 30 h on H100: every pool has an interruption rate, so each
    submit's checkpoint advice reads its team's checkpoint costs."""
    cache.delete(checkpoint_advice._CACHE_KEY)
    now = timezone.now()
    job_id = submit(platform["alice"], name="history", gpu_model="h100-80gb").json()["id"]
    run_cycle()
    Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).update(
        started_at=now - timedelta(hours=30)
    )
    assert job_requeue(job=Job.objects.get(pk=job_id), now=now, reason="node failure (test)")
    cache.delete(checkpoint_advice._CACHE_KEY)
    yield
    cache.delete(checkpoint_advice._CACHE_KEY)


def _queries_to_submit(count: int, platform, submit) -> tuple[int, int]:
    """Queries of a reconcile that submits ``count`` started jobs of two teams (as after a crash
    between the apply's commit and the backend call: running, no run reference, no record):
    all of them, and those that are not the backend's own."""
    members = [(platform["alice"], "vision"), (platform["bob"], "nlp")]
    ids = []
    for i in range(count):
        user, team = members[i % 2]
        response = submit(user, team=team, name=f"q{count}-{i}", gpus_per_worker=1)
        ids.append(response.json()["id"])
    run_cycle()
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"running"}
    Job.objects.filter(pk__in=ids).update(backend_ref="")
    AttemptRecord.objects.filter(job_id__in=ids).delete()
    with CaptureQueriesContext(connection) as captured:
        reconcile(now=timezone.now())
    records = AttemptRecord.objects.filter(job_id__in=ids)
    assert len(records) == count
    assert all(checkpoint_advice.ENV_NAME in r.record["env"] for r in records)
    statements = [q["sql"] for q in captured.captured_queries]
    return len(statements), len([sql for sql in statements if not _backends_own(sql)])


def test_each_submit_costs_only_its_backends_queries(platform, submit, interrupted):
    two, two_batch = _queries_to_submit(2, platform, submit)
    six, six_batch = _queries_to_submit(6, platform, submit)
    assert (six - two) / 4 <= QUERIES_PER_SUBMIT, (two, six)
    # The batch's own queries do not grow with the number of jobs.
    assert two_batch == six_batch, (two_batch, six_batch)
