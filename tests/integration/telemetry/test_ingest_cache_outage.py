"""The ingest when the cache (Redis) is down or answers errors, on real Redis servers: one that
nothing listens for or that refuses every command (``cache_down``), and a private one whose
agent user is refused one command, as a Redis that fails between two calls of a request is.

The agent's POST is never a 500 because of the cache. Duplicate detection falls back to the
database (the batch's samples already stored, checked under a per-node lock), so a retry is
stored once; the per-node row budget fails open (logged), as the platform's rate limits do."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from scheduler.models import NodeState
from telemetry.models import GpuErrorEvent, GpuSample, NodeTelemetry
from tests.integration.concurrency import require_postgresql
from tests.privateredis import PrivateRedis

from .conftest import make_sample
from .test_ingest_failures import SCORE_WRITE, _refused

pytestmark = pytest.mark.django_db(transaction=True)


def _post(token: str, samples: list[dict]):
    # A 500 is an answer here (what the agent gets), not an exception raised into the test.
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post("/api/v1/telemetry/samples", {"samples": samples}, format="json")


def _urgent_batch() -> list[dict]:
    return [make_sample(gpu=g) for g in range(8)] + [make_sample(gpu=3, xid=[79])]


# ------------------------------------------------------------------------- the cache is down


def test_with_the_cache_down_a_retried_batch_is_stored_once(node1, agent_token, cache_down, caplog):
    batch = _urgent_batch()
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        first = _post(agent_token, batch)
        assert first.json() == {"accepted": 9, "errors": 1, "duplicate": False}
        retry = _post(agent_token, batch)
    assert retry.status_code == 202
    assert retry.json() == {"accepted": 0, "errors": 0, "duplicate": True}
    assert GpuSample.objects.filter(node=node1).count() == 9
    # One XID, not two: the health rules count these events.
    assert GpuErrorEvent.objects.filter(node=node1).count() == 1
    assert NodeTelemetry.objects.get(node=node1).samples_received == 9
    assert "telemetry duplicate check in the database: cache unavailable" in caplog.messages

    # A batch overlapping a stored one, with a new reading, is a batch of its own.
    overlapping = [*batch[:2], make_sample(gpu=5, utilization=99.0)]
    assert _post(agent_token, overlapping).json()["accepted"] == 3


def test_with_the_cache_down_a_failed_health_check_runs_on_the_retry(
    node1, agent_token, cache_down
):
    """Without the cache, the retry cannot tell whether the batch's check finished: it runs it
    again (a health evaluation is idempotent), and stores nothing twice."""
    batch = _urgent_batch()
    with _refused(*SCORE_WRITE):
        assert _post(agent_token, batch).status_code == 500
    node1.refresh_from_db()
    assert node1.state == NodeState.READY
    retry = _post(agent_token, batch)
    assert retry.json() == {"accepted": 0, "errors": 0, "duplicate": True}
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    assert GpuSample.objects.filter(node=node1).count() == 9
    assert GpuErrorEvent.objects.filter(node=node1).count() == 1


def test_with_the_cache_down_two_attempts_at_once_store_the_batch_once(
    node1, agent_token, cache_down
):
    """The agent gave up on a slow first attempt and sent the batch again; without the cache's
    claim, the second waits for the first (a per-node lock) and then finds its rows."""
    require_postgresql()
    assert _post(agent_token, [make_sample(gpu=7)]).status_code == 202  # its bookkeeping row
    batch = _urgent_batch()
    answers: dict[str, int] = {}

    def attempt(name: str) -> None:
        try:
            answers[name] = _post(agent_token, batch).status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(n,)) for n in ("first", "second")]
    with transaction.atomic():
        # The first attempt waits on this row, as on a slow database.
        NodeTelemetry.objects.select_for_update().get(node=node1)
        threads[0].start()
        _wait_for_lock_waiters(1)
        threads[1].start()
        _wait_for_lock_waiters(2)
    for thread in threads:
        thread.join(30)
    assert answers == {"first": 202, "second": 202}
    assert GpuSample.objects.filter(node=node1).count() == 10
    assert GpuErrorEvent.objects.filter(node=node1).count() == 1


def _wait_for_lock_waiters(count: int) -> None:
    with connection.cursor() as cursor:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cursor.fetchone()[0] >= count:
                return
            time.sleep(0.02)
    raise AssertionError(f"{count} attempts never waited on a lock")


def test_with_the_cache_down_the_row_budget_fails_open(
    settings, node1, agent_token, cache_down, caplog
):
    """Fail open, as the rate limits do (tests/integration/security/test_cache_outage.py): the
    budget holds back a flooding agent, while refusing every node's telemetry for the length of
    an outage would blind the health rules (ECC/XID quarantine) across the cluster."""
    settings.TELEMETRY_NODE_ROWS_PER_MINUTE = 1
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        codes = [_post(agent_token, [make_sample(gpu=g)]).status_code for g in range(3)]
    assert codes == [202, 202, 202]
    assert GpuSample.objects.filter(node=node1).count() == 3
    assert "telemetry write budget skipped: cache unavailable" in caplog.messages


def test_with_the_cache_down_the_tick_runs_and_prunes_once_a_period_per_process(
    node1, cache_down, caplog
):
    """The tick claims its period in the cache so that one process does the work; without the
    cache it raised (and pruning, claimed the same way, never ran: the raw table grew for the
    length of the outage). Now each process claims its own periods (the stages are idempotent:
    a few processes doing them is only work)."""
    from datetime import timedelta

    from django.utils import timezone

    from telemetry.models import GpuRollup
    from telemetry.services import forget_local_claims, samples_ingest, telemetry_tick

    forget_local_claims()  # an earlier test's, in this process
    now = timezone.now().replace(second=30, microsecond=0)
    old = now - timedelta(hours=7)  # beyond the raw retention (6 h)
    GpuSample.objects.create(
        node=node1, gpu_index=1, time=old, utilization=1.0, memory_used_mib=1,
        memory_total_mib=2, temperature_c=40,
    )  # fmt: skip
    body = {"samples": [make_sample(gpu=0, at=now - timedelta(minutes=2))]}
    samples_ingest(node=node1, body=body, now=now)
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        assert telemetry_tick(now=now) is True
    assert GpuRollup.objects.count() == 1
    node1.refresh_from_db()
    assert node1.telemetry.health_evaluated_at == now
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]  # pruned
    assert telemetry_tick(now=now + timedelta(seconds=1)) is False  # this process's period
    assert telemetry_tick(now=now + timedelta(seconds=61)) is True


# --------------------------------------------------- a Redis that fails between two calls


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory):
    """A private redis-server with users who may run every command but one (``no-<command>``):
    a real Redis answering an error to one call of a request after answering the calls before."""
    import redis

    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is required in CI")
        pytest.skip("redis-server is not installed")
    server = PrivateRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    admin = redis.Redis(port=server.port)
    for command in ("get", "del"):
        admin.acl_setuser(
            f"no-{command}",
            enabled=True,
            passwords=["+pw"],
            keys=["*"],
            commands=["+@all", f"-{command}"],
        )
    yield server, admin
    admin.close()
    server.kill()


@pytest.fixture
def redis_refusing(acl_redis, settings):
    """Point the cache at the private Redis as the user refused ``command``."""
    server, admin = acl_redis
    admin.flushall()

    def use(command: str) -> None:
        settings.CACHES = {
            "default": {
                "BACKEND": "gpuplatform.cache.ProcessSharedRedisCache",
                "LOCATION": f"redis://no-{command}:pw@127.0.0.1:{server.port}/0",
            }
        }

    return use


def test_a_repeat_whose_state_the_cache_cannot_say_is_checked_in_the_database(
    node1, agent_token, redis_refusing
):
    """The claim ("add") says the batch was seen; reading its state fails: a stored batch is a
    duplicate, found in the database."""
    redis_refusing("get")
    batch = _urgent_batch()
    assert _post(agent_token, batch).json()["accepted"] == 9
    retry = _post(agent_token, batch)
    assert retry.status_code == 202, retry.content
    assert retry.json()["duplicate"] is True
    assert GpuSample.objects.filter(node=node1).count() == 9


def test_a_batch_over_budget_is_a_429_though_its_claim_cannot_be_given_back(
    settings, node1, agent_token, redis_refusing
):
    redis_refusing("del")
    settings.TELEMETRY_NODE_ROWS_PER_MINUTE = 1
    assert _post(agent_token, [make_sample(gpu=0)]).status_code == 202
    refused = _post(agent_token, [make_sample(gpu=1)])
    assert refused.status_code == 429, refused.content
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]


def test_a_failed_store_answers_its_own_error_though_its_claim_cannot_be_given_back(
    settings, node1, agent_token, redis_refusing
):
    """The node was deleted under this process's cached token (bare SQL: nothing announced it):
    the store fails at commit and the agent is refused (401), not answered the error of the
    cache's "delete" of the batch's claim (500)."""
    require_postgresql()
    redis_refusing("del")
    settings.TELEMETRY_TOKEN_MARKER_SECONDS = 600  # the cached token is not looked up again
    assert _post(agent_token, [make_sample(gpu=0)]).status_code == 202  # token cached now
    with connection.cursor() as cursor:
        # A DBA's delete of the node and its tokens, leaving its other rows (the foreign keys
        # of this session only are not checked meanwhile).
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("DELETE FROM telemetry_nodeagenttoken WHERE node_id = %s", [node1.pk])
        cursor.execute("DELETE FROM scheduler_node WHERE id = %s", [node1.pk])
        cursor.execute("SET session_replication_role = DEFAULT")
    refused = _post(agent_token, [make_sample(gpu=1)])
    assert refused.status_code == 401, refused.content
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]


# ------------------------------------------------------------------ the cache is up


def test_with_the_cache_up_a_repeat_is_found_without_reading_the_samples(node1, post_batch):
    """The database check is the fallback only: the cache's record answers a repeat."""
    batch = _urgent_batch()
    assert post_batch(batch).json()["accepted"] == 9
    with CaptureQueriesContext(connection) as queries:
        assert post_batch(batch).json()["duplicate"] is True
    sample_table = GpuSample._meta.db_table
    assert not [q for q in queries.captured_queries if sample_table in q["sql"]]
