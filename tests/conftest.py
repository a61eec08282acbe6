"""Shared fixtures: two teams with their users (alice in vision, bob in nlp, charlie a viewer of
vision), an admin, GPU models, priority classes and a small simulated cluster, so every test can
assert isolation as well as behaviour."""

from __future__ import annotations

import os
import socket
import uuid

import pytest


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip when a service is absent locally; fail under CI, where it must be present."""
    if _reachable(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (required in CI)")
    pytest.skip(message)


def use_channel_layer(settings, kind: str) -> None:
    """Point the channel layer at a fresh in-memory one (``memory``) or at the test Redis
    (``redis``), with a key prefix of its own: other test runs on the same Redis use the same
    group names."""
    if kind == "redis":
        require_service("Redis", "127.0.0.1", 6379)
        url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [url], "prefix": f"asgi-test-{uuid.uuid4().hex[:8]}"},
            }
        }
    else:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def gpu_models(db):
    from catalogue.models import GpuModel

    return {
        "h100": GpuModel.objects.create(name="h100-80gb", memory_gib=80),
        "a100": GpuModel.objects.create(name="a100-40gb", memory_gib=40),
    }


@pytest.fixture
def priorities(db):
    from tenants.models import PriorityClass

    return {
        "production": PriorityClass.objects.create(
            name="production", value=1000, preemptible_by_default=False
        ),
        "research": PriorityClass.objects.create(name="research", value=500),
        "best-effort": PriorityClass.objects.create(name="best-effort", value=100),
    }


@pytest.fixture
def teams(db):
    from tenants.models import Team

    research = Team.objects.create(slug="research", name="Research")
    return {
        "research": research,
        "vision": Team.objects.create(
            slug="vision", name="Vision", parent=research, fair_share_weight=2.0
        ),
        "nlp": Team.objects.create(slug="nlp", name="NLP", parent=research),
    }


def _user(username: str, **extra):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(
        username=username, password="pw-" + username, **extra
    )
    return user


@pytest.fixture
def alice(teams):
    from tenants.models import Membership

    user = _user("alice")
    Membership.objects.create(user=user, team=teams["vision"], role="member")
    return user


@pytest.fixture
def bob(teams):
    from tenants.models import Membership

    user = _user("bob")
    Membership.objects.create(user=user, team=teams["nlp"], role="member")
    return user


@pytest.fixture
def charlie(teams):
    """A viewer of vision: may read its jobs, may not submit or cancel."""
    from tenants.models import Membership

    user = _user("charlie")
    Membership.objects.create(user=user, team=teams["vision"], role="viewer")
    return user


@pytest.fixture
def platform_admin(db):
    return _user("root", is_superuser=True, is_staff=True)


@pytest.fixture
def cluster(gpu_models):
    """4 nodes x 8 GPUs: two H100 nodes in rack r1, two A100 nodes in rack r2."""
    from scheduler.models import Cluster, Node

    cluster = Cluster.objects.create(
        name="test", backend_kind="simulated", backend_config={"seed": 1}
    )
    for i, (model, rack) in enumerate(
        [("h100", "r1"), ("h100", "r1"), ("a100", "r2"), ("a100", "r2")], start=1
    ):
        Node.objects.create(
            cluster=cluster,
            name=f"n{i}",
            gpu_model=gpu_models[model],
            gpu_count=8,
            rack=rack,
            nvlink_domain=f"n{i}",
            zone="z1",
        )
    return cluster


@pytest.fixture
def platform(cluster, priorities, alice, bob, charlie, platform_admin):
    """Everything at once: cluster, priority classes, the three users and an admin."""
    return {
        "cluster": cluster,
        "alice": alice,
        "bob": bob,
        "charlie": charlie,
        "admin": platform_admin,
    }


@pytest.fixture
def api_as():
    from rest_framework.test import APIClient

    def make(user=None):
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def submit(api_as):
    """Submit a job through the API as ``user``; returns the response."""

    def do(user, **fields):
        body = {"name": "train", "team": "vision", "workers": 1, "gpus_per_worker": 1}
        body.update(fields)
        return api_as(user).post("/api/v1/jobs/", body, format="json")

    return do


@pytest.fixture(autouse=True)
def _fresh_reference_cache():
    # GPU models, priority classes and node sizes are cached per process for a few seconds; rows
    # of an earlier test (rolled back, so no signal fired) must not answer for this one.
    from scheduler import reference

    reference.clear()
    yield
    reference.clear()


@pytest.fixture(autouse=True)
def _fresh_runtime_model():
    # The run-time model is per process and learns finished jobs once; jobs of an earlier test
    # were rolled back and must not shape this one's predictions.
    from scheduler import runtime_prediction

    runtime_prediction.reset()
    yield
    runtime_prediction.reset()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # Real hashing costs ~0.3 s per user; the tests check behaviour, not the hash's strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def sim_clock(settings):
    """The simulated cluster at one simulated minute per real second (tests/simclock.py)."""
    from scheduler.backends import reset_backends

    from .simclock import SimulatedClock

    settings.SIMULATED_TIME_SCALE = 60.0
    reset_backends()
    yield SimulatedClock()
    reset_backends()


_last_test_seen = {"nodeid": "(none)"}


@pytest.fixture(autouse=True)
def _no_advisory_lock_left_held(request, django_db_blocker):
    """A test that ends with this process holding a session-level advisory lock (the loop's
    single-flight lock, the notification dispatcher's) would keep every later Celery worker of the
    run from ever running a cycle. Checked before each test, when no test transaction is open (so
    a transaction-level lock, which the test's rollback frees, is never mistaken for one): the
    error names the test that left it, and the lock is freed for the rest of the run."""
    from django.db import connection

    previous, _last_test_seen["nodeid"] = _last_test_seen["nodeid"], request.node.nodeid
    if connection.vendor != "postgresql" or connection.connection is None:
        return
    from django.db import DatabaseError

    with django_db_blocker.unblock():
        if connection.in_atomic_block:
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT objid FROM pg_locks"
                    " WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                )
                held = [row[0] for row in cursor.fetchall()]
                if held:
                    cursor.execute("SELECT pg_advisory_unlock_all()")
        except DatabaseError:  # a connection the server closed holds nothing
            return
    if held:
        pytest.fail(f"{previous} left advisory locks {held} held by this process")


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete():
    """Empty the tables after each transactional test with DELETE instead of PostgreSQL's TRUNCATE.

    A TRUNCATE of the ~60 tables costs about 3 s on this machine (it replaces every table's
    files), a DELETE of the few rows a test wrote 0.1 s; with ~100 transactional tests that is
    minutes of every CI run. Foreign keys are deferred to the flush's commit, as TRUNCATE's single
    statement made them irrelevant. A flush that resets sequences keeps Django's statement."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return original(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"DELETE FROM {self.quote_name(table)};" for table in tables
        ]

    DatabaseOperations.sql_flush = sql_flush
    yield
    DatabaseOperations.sql_flush = original
