"""The enforce stage's submits: a fixed number of queries per started job, not one more for each
of its related rows (the attempt record reads the job's model, class and submitter)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.loop.enforce import reconcile
from scheduler.models import AttemptRecord, Job

pytestmark = pytest.mark.django_db

# The check for an existing record, its insert and the savepoint around it (3), the run's
# update, the simulated backend's own, the placement's nodes with their models, the checkpoint
# advice's pool and its interruptions. Nothing the submit list or the cycle already read.
QUERIES_PER_SUBMIT = 10


def _queries_to_submit(count: int, platform, submit) -> int:
    """Queries of a reconcile that submits ``count`` started jobs (as after a crash between the
    apply's commit and the backend call: running, no run reference, no record)."""
    ids = [
        submit(platform["alice"], name=f"q{count}-{i}", gpus_per_worker=1).json()["id"]
        for i in range(count)
    ]
    run_cycle()
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"running"}
    Job.objects.filter(pk__in=ids).update(backend_ref="")
    AttemptRecord.objects.filter(job_id__in=ids).delete()
    with CaptureQueriesContext(connection) as captured:
        reconcile(now=timezone.now())
    assert AttemptRecord.objects.filter(job_id__in=ids).count() == count
    return len(captured)


def test_each_submit_costs_a_fixed_number_of_queries(platform, submit):
    two = _queries_to_submit(2, platform, submit)
    six = _queries_to_submit(6, platform, submit)
    assert (six - two) / 4 <= QUERIES_PER_SUBMIT, (two, six)
