"""Shared fixtures: two teams with their users (alice in vision, bob in nlp, charlie a viewer of
vision), an admin, GPU models, priority classes and a small simulated cluster, so every test can
assert isolation as well as behaviour.

Also the rules of a parallel run (``make test`` runs two pytest-xdist workers): what two workers
would share runs in one of them, and each worker has a Redis database of its own."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# Property tests judge what they find, not how fast the machine made examples: `make test` runs
# beside other work on two shared cores, where hypothesis' generation-time health check (and its
# per-example deadline) failed tests that were right. Every test's own settings start from this.
settings.register_profile(
    "shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared-machine")

# Parallel runs: `make test` runs `pytest -n 2` (pytest-xdist). Most of the long tests wait (on a
# real Slurm, a browser, a Celery worker, pip) rather than compute, so a second worker overlaps
# that waiting with the CPU-bound database tests. pytest-django gives each worker a test database
# of its own (test_<name>_gw0, _gw1) and pytest_configure below a Redis database of its own.
# Tests that share anything else run in one worker: the scheduler below hands out each test
# module whole (so a module-scoped fixture is built once, in one worker: the platform's wheel is
# built inside the checkout; a private Redis; a simulation's results), and these directories
# whole:
#   slurm  tests/integration/slurm: the session's real Slurm clusters (fixed directories and
#          ports, their slurmdbd on the machine's MariaDB, the fixture that cancels an earlier
#          run's jobs); two workers would start, stop and cancel on the same clusters.
#   e2e    tests/e2e: the session's seeded live server (test-artifacts/e2e-server, held under a
#          file lock for the whole session, so a second worker would wait for the first to end),
#          the OIDC provider installed into tests/e2e/oidc_provider, the screenshots.
# The two are handed out first (each worker orders its collection so), so their waiting overlaps
# the rest instead of ending the run alone.
# Not with `--dist loadgroup`: pytest 9.2's node ids dropped the group suffix it relies on, and it
# silently stopped grouping (pytest-dev/pytest-xdist#1386).
SHARED_DIRECTORIES = {"tests/integration/slurm/": "slurm", "tests/e2e/": "e2e"}
SLURM_FIXTURES = frozenset(
    {"slurm_version", "slurm_cluster", "accounting_slurm", "host_python", "slurm_platform"}
)


def shared_group(path: str) -> str | None:
    """The group of the test file at ``path`` (relative to the checkout), or None."""
    for directory, group in SHARED_DIRECTORIES.items():
        if path.startswith(directory):
            return group
    return None


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class SharedResourceScheduling(LoadFileScheduling):
        """Work units: a shared directory whole, every other test module whole; in the order of
        the workers' collection (pytest_collection_modifyitems puts the shared groups first)."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return shared_group(path) or path

    config.option.loadscopereorder = False  # not by size: the order of the collection
    return SharedResourceScheduling(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    result = yield
    paths = {item: item.path.relative_to(ROOT).as_posix() for item in items}
    for item, path in paths.items():
        # The scheduler sees node ids only: a Slurm test must live where it groups them.
        if SLURM_FIXTURES & set(item.fixturenames) and shared_group(path) != "slurm":
            raise pytest.UsageError(
                f"{item.nodeid} uses a real Slurm; it must live under tests/integration/slurm/ "
                "so a parallel run keeps it in the worker that has the clusters"
            )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # After every other plugin's order (pytest-django's database tests first); a serial run
        # keeps that order.
        first = {group: rank for rank, group in enumerate(SHARED_DIRECTORIES.values())}
        items.sort(key=lambda item: first.get(shared_group(paths[item]), len(first)))
    return result


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        _redis_database_per_worker(int(worker.removeprefix("gw")))


def _redis_database_per_worker(index: int) -> None:
    """Worker N uses Redis database (REDIS_URL's database + N): the cache (which tests empty with
    FLUSHDB), rate limits, the trigger debounce key and Celery's queues are per database, and two
    workers on one would clear and trip each other. The settings are read from the environment
    before any conftest runs (pytest-django loads them first), so every setting that names the
    run's Redis URL is pointed at the worker's, and the environment too for subprocesses."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        return
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + index
    if database > 15:
        raise pytest.UsageError(
            f"REDIS_URL {url}: worker gw{index} would use Redis database {database}; Redis has "
            "0-15. Use a lower database number or fewer workers."
        )
    worker_url = parts._replace(path=f"/{database}").geturl()
    os.environ["REDIS_URL"] = worker_url
    from django.conf import settings

    for name in dir(settings):
        if name.isupper():
            value = getattr(settings, name)
            if value == url:
                setattr(settings, name, worker_url)
            elif isinstance(value, (dict, list)):
                _replace_in(value, url, worker_url)
    from gpuplatform.celery import app

    if app.configured:  # it read the settings already
        app.conf.broker_url = settings.CELERY_BROKER_URL


def _replace_in(container: dict | list, old: str, new: str) -> None:
    keys = container.keys() if isinstance(container, dict) else range(len(container))
    for key in list(keys):
        value = container[key]
        if value == old:
            container[key] = new
        elif isinstance(value, (dict, list)):
            _replace_in(value, old, new)


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


async def refused_with(socket, timeout: float = 5) -> int | None:
    """The code a websocket refused at connect closes with, or None if it stayed open. A socket
    refuses by accepting and closing at once: a handshake refused outright reaches a browser as
    1006 (an HTTP 403), without the code."""
    connected, _ = await socket.connect(timeout=timeout)
    assert connected, "refused before the handshake: the browser would see 1006, not a code"
    if await socket.receive_nothing(timeout=0.5):
        return None
    output = await socket.receive_output(timeout=timeout)
    return output.get("code") if output["type"] == "websocket.close" else None


def _refusing_redis_url() -> str:
    """The run's Redis as a user it does not know: every connection is answered an error."""
    parts = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    return parts._replace(netloc=f"no-such-user:pw@{parts.hostname}:{parts.port or 6379}").geturl()


DEAD_CACHES = {
    "nothing listens on its port": lambda: "redis://127.0.0.1:1/0",
    "it refuses every command": _refusing_redis_url,
}


@pytest.fixture(params=DEAD_CACHES.values(), ids=DEAD_CACHES.keys())
def cache_down(request, settings):
    """The cache is Redis (the production client) and it is down: nothing listens where it
    should be, or it answers every command an error. Each cache call raises the client's error.
    Back up at teardown, before the fixtures that empty the cache then (set up before this one,
    they are torn down after it, and the ``settings`` fixture later still)."""
    working = settings.CACHES
    settings.CACHES = {
        "default": {
            "BACKEND": "gpuplatform.cache.ProcessSharedRedisCache",
            "LOCATION": request.param(),
        }
    }
    from django.core.cache import cache

    with pytest.raises(Exception):  # noqa: B017 - whatever the client raises: it is down
        cache.get("anything")
    yield
    settings.CACHES = working


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
