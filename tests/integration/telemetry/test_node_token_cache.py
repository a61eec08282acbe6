"""The node token caches: a wrong token's repeats cost no query (a short negative cache keyed by
the token's hash), a token issued or saved live again works at once, and a revoked or deleted
token stops working at once, in every process, though its row was cached."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from telemetry.models import GpuSample, NodeAgentToken, hash_node_token
from telemetry.services import node_token_issue
from telemetry.tokens import TOKEN_MISS_CACHE_SECONDS
from tests.conftest import DEAD_CACHES

from .conftest import make_sample

ROOT = Path(__file__).resolve().parents[3]
WRONG = "gpn_" + "w" * 43  # the shape of a real token, issued to no one


def test_repeats_of_an_unknown_token_are_refused_without_a_query(db, post_batch):
    with CaptureQueriesContext(connection) as first:
        assert post_batch([make_sample()], token=WRONG).status_code == 401
    with CaptureQueriesContext(connection) as repeats:
        codes = {post_batch([make_sample()], token=WRONG).status_code for _ in range(20)}
    assert codes == {401}
    # The token table's marker (the cache was just emptied), then the lookup that found nothing.
    assert len(first.captured_queries) == 2
    assert repeats.captured_queries == []
    assert GpuSample.objects.count() == 0
    # Remembered for a bounded time, under the token's hash, never the token itself.
    key = f"telemetry:node-token:unknown:{hash_node_token(WRONG)}"
    assert cache.get(key) is not None
    if isinstance(
        caches["default"], RedisCache
    ):  # the real Redis of the run: look at what it holds
        redis = caches["default"]._cache.get_client(key)
        stored = [k.decode() for k in redis.keys("*node-token*")]
        assert any(k.endswith(key) for k in stored) and not any(WRONG[4:] in k for k in stored)
        ttl = redis.ttl(cache.make_key(key))
        assert 0 < ttl <= TOKEN_MISS_CACHE_SECONDS


def test_a_token_tried_before_it_was_issued_works_once_issued(db, node1, post_batch, monkeypatch):
    monkeypatch.setattr("telemetry.tokens.secrets.token_urlsafe", lambda n: "w" * 43)
    assert post_batch([make_sample()], token=WRONG).status_code == 401  # remembered unknown
    _, raw = node_token_issue(node=node1)
    assert raw == WRONG
    assert post_batch([make_sample()], token=WRONG).status_code == 202
    assert GpuSample.objects.filter(node=node1).count() == 1


def test_a_revoked_token_saved_live_again_works_at_once(db, node1, post_batch, agent_token):
    from telemetry.services import node_token_revoke

    token = NodeAgentToken.objects.get(node=node1)
    node_token_revoke(token=token)
    assert post_batch([make_sample()]).status_code == 401  # now remembered as unknown
    token.refresh_from_db()
    token.revoked_at = None
    token.save()
    assert post_batch([make_sample()]).status_code == 202


def test_a_deleted_token_stops_working_at_once_though_this_process_cached_it(db, node1, post_batch):
    assert post_batch([make_sample(gpu=0)]).status_code == 202  # the row is cached now
    NodeAgentToken.objects.get(node=node1).delete()  # say, from the admin's delete page
    assert post_batch([make_sample(gpu=1)]).status_code == 401
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]


REVOKE = """
import sys
import django

django.setup()
from telemetry.models import NodeAgentToken
from telemetry.services import node_token_revoke

print(node_token_revoke(token=NodeAgentToken.objects.get(pk=int(sys.argv[1]))))
"""


def _in_another_process(
    script: str, token_id: int, redis_url: str | None = None
) -> subprocess.CompletedProcess:
    """Run ``script`` with ``token_id`` in a new Python process on this test's database and
    cache (a second server process, as far as the caches are concerned), or on the Redis at
    ``redis_url``."""
    db = connection.settings_dict
    env = {
        **os.environ,
        **({"REDIS_URL": redis_url} if redis_url else {}),
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:"
        f"{db['PORT']}/{db['NAME']}",
        "DJANGO_SETTINGS_MODULE": "gpuplatform.settings",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-c", script, str(token_id)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)
def test_a_token_revoked_in_another_process_stops_working_here_at_once(node1, post_batch):
    if connection.vendor != "postgresql" or not isinstance(caches["default"], RedisCache):
        pytest.skip("two processes share a database and a cache on PostgreSQL and Redis only")
    assert post_batch([make_sample(gpu=0)]).status_code == 202  # cached in this process
    done = _in_another_process(REVOKE, NodeAgentToken.objects.get(node=node1).pk)
    assert done.stdout.strip() == "True", done.stderr
    assert post_batch([make_sample(gpu=1)]).status_code == 401
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]


def test_with_the_cache_down_tokens_are_looked_up_in_the_database(
    db, node1, post_batch, cache_down
):
    """Fail open to the database, not to the per-process cache: a live token works, an unknown
    one is refused, and a revoked one is refused at once (nothing is cached without the shared
    generation to check it against)."""
    from telemetry.services import node_token_revoke

    assert post_batch([make_sample(gpu=0)]).status_code == 202
    assert post_batch([make_sample(gpu=1)], token=WRONG).status_code == 401
    with CaptureQueriesContext(connection) as repeat:
        assert post_batch([make_sample(gpu=1)], token=WRONG).status_code == 401
    assert len(repeat.captured_queries) == 1  # no negative cache: one lookup each
    node_token_revoke(token=NodeAgentToken.objects.get(node=node1))
    assert post_batch([make_sample(gpu=2)]).status_code == 401
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]


def token_table_queries(queries):
    return [q["sql"] for q in queries.captured_queries if "telemetry_nodeagenttoken" in q["sql"]]


def test_a_known_token_costs_no_query_while_the_shared_marker_holds(db, post_batch, settings):
    settings.TELEMETRY_TOKEN_MARKER_SECONDS = 60
    assert post_batch([make_sample(gpu=0)]).status_code == 202  # looked up, marker read
    with CaptureQueriesContext(connection) as queries:
        codes = {post_batch([make_sample(gpu=g)]).status_code for g in range(1, 8)}
    assert codes == {202}
    assert token_table_queries(queries) == []


def test_a_token_revoked_by_a_bare_sql_update_is_refused_once_the_marker_expired(
    db, node1, post_batch, settings
):
    """No service, no signal: the row changed under the caches (a DBA's UPDATE)."""
    settings.TELEMETRY_TOKEN_MARKER_SECONDS = 1
    assert post_batch([make_sample(gpu=0)]).status_code == 202  # cached in this process
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE telemetry_nodeagenttoken SET revoked_at = %s WHERE node_id = %s",
            [timezone.now(), node1.pk],
        )
    time.sleep(1.2)
    with CaptureQueriesContext(connection) as queries:
        assert post_batch([make_sample(gpu=1)]).status_code == 401
    # The marker read again (one aggregate), then the token's row looked up again.
    assert len(token_table_queries(queries)) == 2
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]


BARE_REVOKE = """
import sys
import django

django.setup()
from django.db import connection

with connection.cursor() as cursor:
    cursor.execute(
        "UPDATE telemetry_nodeagenttoken SET revoked_at = now() WHERE id = %s", [int(sys.argv[1])]
    )
    print(cursor.rowcount)
"""


@pytest.mark.django_db(transaction=True)
def test_a_token_revoked_by_bare_sql_in_another_process_is_refused_here(
    node1, post_batch, settings
):
    """psql's UPDATE, say: another process, no service, no signal, no cache write. This process
    cached the token; it refuses it once the shared marker (read from the database when its
    cache entry expires) shows the token table changed."""
    if connection.vendor != "postgresql" or not isinstance(caches["default"], RedisCache):
        pytest.skip("two processes share a database and a cache on PostgreSQL and Redis only")
    settings.TELEMETRY_TOKEN_MARKER_SECONDS = 1
    assert post_batch([make_sample(gpu=0)]).status_code == 202  # cached in this process
    done = _in_another_process(BARE_REVOKE, NodeAgentToken.objects.get(node=node1).pk)
    assert done.stdout.strip() == "1", done.stderr
    time.sleep(1.2)
    assert post_batch([make_sample(gpu=1)]).status_code == 401
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("dead_cache", DEAD_CACHES.values(), ids=DEAD_CACHES.keys())
def test_a_revocation_that_could_not_be_announced_is_refused_here_within_the_marker_time(
    node1, post_batch, settings, dead_cache
):
    """The revoking process reaches the database but not Redis (a partition, a restart): its
    announcement is lost. This process cached the token; it refuses it once the shared marker
    has expired and been read again from the token table, as for a bare SQL revocation."""
    if connection.vendor != "postgresql" or not isinstance(caches["default"], RedisCache):
        pytest.skip("two processes share a database and a cache on PostgreSQL and Redis only")
    settings.TELEMETRY_TOKEN_MARKER_SECONDS = 1
    assert post_batch([make_sample(gpu=0)]).status_code == 202  # cached in this process
    token_id = NodeAgentToken.objects.get(node=node1).pk
    done = _in_another_process(REVOKE, token_id, redis_url=dead_cache())
    assert done.stdout.strip() == "True", done.stderr
    assert "revocation not announced" in done.stderr
    time.sleep(1.2)
    assert post_batch([make_sample(gpu=1)]).status_code == 401
    assert list(GpuSample.objects.values_list("gpu_index", flat=True)) == [0]
