"""The ingest when something fails half-way, with real failures (a PostgreSQL trigger refusing a
write, a node deleted under a cached token): the agent's retry finishes what the first attempt
could not, and nothing is left half-written."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from django.db import connection
from rest_framework.test import APIClient

from scheduler.models import NodeEvent, NodeState
from telemetry.models import GpuErrorEvent, GpuSample, NodeTelemetry
from tests.integration.concurrency import require_postgresql

from .conftest import make_sample

pytestmark = pytest.mark.django_db(transaction=True)


def _post(token: str, samples: list[dict]):
    # A 500 is an answer here (what the agent gets), not an exception raised into the test.
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post("/api/v1/telemetry/samples", {"samples": samples}, format="json")


@contextmanager
def _refused(table: str, when: str, operation: str = "INSERT OR UPDATE"):
    """PostgreSQL refuses writes to ``table`` matching ``when`` (a trigger condition) until the
    block ends: a real database error at that write, as a lost connection or a full disk is."""
    require_postgresql()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_write() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'write refused (test)'; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER test_refuse_write BEFORE {operation} ON {table} "
            f"FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION test_refuse_write()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER test_refuse_write ON {table}")
            cursor.execute("DROP FUNCTION test_refuse_write()")


# The two writes of the urgent health check: the score (NodeTelemetry's evaluation time, an
# UPDATE of the row the batch created) and the quarantine (its NodeEvent).
SCORE_WRITE = (
    NodeTelemetry._meta.db_table,
    "NEW.health_evaluated_at IS NOT NULL",
)
QUARANTINE_WRITE = (NodeEvent._meta.db_table, "NEW.kind = 'quarantined'")


@pytest.mark.parametrize("failing", [SCORE_WRITE, QUARANTINE_WRITE], ids=["score", "quarantine"])
def test_a_health_check_that_failed_after_the_batch_committed_runs_on_the_retry(
    node1, agent_token, failing
):
    """A critical XID's batch was stored, then its immediate health check failed: the agent got
    a 500, its retry of the same batch was answered "duplicate" and checked nothing, so the node
    stayed ready (taking jobs) until the next tick; a failed quarantine was not even a 500."""
    batch = [make_sample(gpu=g) for g in range(8)] + [make_sample(gpu=3, xid=[79])]
    with _refused(*failing):
        first = _post(agent_token, batch)
    assert first.status_code == 500
    assert GpuSample.objects.filter(node=node1).count() == 9  # stored before the check failed
    node1.refresh_from_db()
    assert node1.state == NodeState.READY

    retry = _post(agent_token, batch)
    assert retry.status_code == 202
    assert retry.json() == {"accepted": 0, "errors": 0, "duplicate": True}
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    assert node1.state_reason == "health rule: critical XID 79"
    assert GpuSample.objects.filter(node=node1).count() == 9
    assert GpuErrorEvent.objects.filter(node=node1).count() == 1

    # Checked once: a further repeat of the batch is only a duplicate.
    checked_at = NodeTelemetry.objects.get(node=node1).health_evaluated_at
    assert _post(agent_token, batch).json()["duplicate"] is True
    assert NodeTelemetry.objects.get(node=node1).health_evaluated_at == checked_at
    events = NodeEvent.objects.filter(node=node1).order_by("time", "id")
    assert list(events.values_list("kind", flat=True)) == ["quarantined", "probation"]


def test_a_repeat_of_a_checked_batch_checks_nothing_again(node1, agent_token):
    batch = [make_sample(gpu=0, xid=[94])]  # counted by the rules, not critical
    assert _post(agent_token, batch).status_code == 202
    checked_at = NodeTelemetry.objects.get(node=node1).health_evaluated_at
    assert checked_at is not None
    assert _post(agent_token, batch).json()["duplicate"] is True
    assert NodeTelemetry.objects.get(node=node1).health_evaluated_at == checked_at


def test_an_agent_whose_node_was_deleted_is_refused_and_nothing_is_written(
    platform, node1, agent_token
):
    """The token (with its node) stays cached for up to 30 s in the process that served the
    agent; an admin deleting the node meanwhile left that process writing samples for a node
    that was gone: a foreign-key error at commit, a 500 on every batch until the cache expired."""
    from django.test import Client

    from telemetry.models import NodeAgentToken

    assert _post(agent_token, [make_sample(gpu=0)]).status_code == 202  # cached now
    admin = Client()
    admin.force_login(platform["admin"])
    deleted = admin.post(f"/admin/scheduler/node/{node1.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not NodeAgentToken.objects.exists()  # went with its node

    for _ in range(2):
        refused = _post(agent_token, [make_sample(gpu=1, xid=[79])])
        assert refused.status_code == 401, refused.content
        assert refused.json() == {"detail": "invalid or revoked node token"}
    assert not GpuSample.objects.filter(node_id=node1.pk).exists()
    assert not GpuErrorEvent.objects.filter(node_id=node1.pk).exists()
    assert not NodeTelemetry.objects.filter(node_id=node1.pk).exists()


def test_a_repeat_while_the_first_attempt_is_still_storing_is_not_acknowledged(node1, agent_token):
    """The agent gave up waiting on a slow first attempt and sent the batch again: the repeat
    was answered "duplicate" (202) while the first was still storing, so the agent dropped the
    batch; the first then failed and rolled back, and the batch (here a critical XID) was lost.
    The repeat is now a 409, which the agent retries; once the first failed, the retry stores."""
    import threading
    import time

    from django.db import transaction

    require_postgresql()
    assert _post(agent_token, [make_sample(gpu=7)]).status_code == 202  # its bookkeeping row
    batch = [make_sample(gpu=g) for g in range(8)] + [make_sample(gpu=3, xid=[79])]
    answers: dict[str, int] = {}

    def first_attempt() -> None:
        try:
            answers["first"] = _post(agent_token, batch).status_code
        finally:
            connection.close()

    attempt = threading.Thread(target=first_attempt)
    with transaction.atomic():
        # The first attempt waits on this lock, as on a slow database.
        NodeTelemetry.objects.select_for_update().get(node=node1)
        attempt.start()
        with connection.cursor() as cursor:
            waiting = None
            deadline = time.monotonic() + 20
            while waiting is None and time.monotonic() < deadline:
                cursor.execute(
                    "SELECT pid FROM pg_locks"
                    " WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
                )
                row = cursor.fetchone()
                waiting = row[0] if row else time.sleep(0.02)
            assert waiting is not None, "the first attempt never reached the lock"
            answers["repeat"] = _post(agent_token, batch).status_code
            # The first attempt fails (a cancelled statement, as on a failover).
            cursor.execute("SELECT pg_cancel_backend(%s)", [waiting])
    attempt.join(20)
    assert answers == {"first": 500, "repeat": 409}
    assert GpuErrorEvent.objects.filter(node=node1).count() == 0  # rolled back

    retry = _post(agent_token, batch)
    assert retry.json() == {"accepted": 9, "errors": 1, "duplicate": False}
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
