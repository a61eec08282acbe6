"""The loop's single-flight lock as docs/loop.md promises it, on PostgreSQL: a cycle that finds
the lock held by another worker returns at once and changes nothing; a worker that dies holding
it (its database session ends) does not block the loop."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from scheduler.locks import ADVISORY_KEY
from scheduler.loop.cycle import run_cycle
from scheduler.models import Job
from scheduler.states import JobState

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the advisory lock is PostgreSQL's"
    ),
]


def _other_worker() -> psycopg.Connection:
    """A session of its own, as another worker process has."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def test_a_cycle_finding_the_lock_taken_returns_at_once_and_a_dead_holder_frees_it(
    platform, submit
):
    job_id = submit(platform["alice"], name="waits").json()["id"]
    other = _other_worker()
    other.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_KEY])
    holder_pid = other.info.backend_pid
    result = run_cycle()
    assert not result.ran
    assert Job.objects.get(pk=job_id).state == JobState.PENDING  # nothing applied
    # The worker dies mid-cycle: the server ends its session, and with it the lock.
    with connection.cursor() as cursor:
        # The timeout (ms) waits for the session to be gone, not only signalled.
        cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [holder_pid])
        assert cursor.fetchone()[0]
    other.close()
    result = run_cycle()
    assert result.ran and result.started == [job_id]
