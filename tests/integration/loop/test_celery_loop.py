"""The loop on real infrastructure: PostgreSQL, a private Redis server and a real Celery worker
process (two pool processes, embedded beat). Skipped locally without PostgreSQL / redis-server;
required in CI."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from scheduler.models import Allocation, Job, SimulatedRun
from tests.conftest import require_service
from tests.privateredis import PrivateRedis

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory):
    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is required in CI")
        pytest.skip("redis-server is not installed")
    redis = PrivateRedis(tmp_path_factory.mktemp("redis"))
    redis.start()
    yield redis
    redis.kill()


@pytest.fixture
def infra(request, tmp_path, settings, private_redis):
    """PostgreSQL, the private Redis as broker and channel layer, and a real Celery worker with
    beat. The worker consumes the loop's, the what-if and the notification queues, as a
    one-worker deployment does; a test parametrizes ``infra`` indirectly with ``{"queues": "celery"}`` to
    get the loop's worker alone (docs/deploy.md)."""
    queues = getattr(request, "param", {}).get("queues", "celery,whatif,notify")
    if connection.vendor != "postgresql":
        if os.environ.get("CI") == "true":
            pytest.fail("the Celery loop tests need PostgreSQL in CI (DATABASE_URL)")
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    require_service("PostgreSQL", "127.0.0.1", 5432)
    redis = private_redis
    if redis.proc is None or redis.proc.poll() is not None:
        redis.start()
    from gpuplatform.celery import app

    # Read before the settings change below: Celery loads its configuration from the settings
    # the first time it is read, and would otherwise "restore" the private broker at teardown.
    saved = (app.conf.broker_url, app.conf.task_always_eager)
    # This test process enqueues through the same broker as the worker.
    settings.REDIS_URL = redis.url
    settings.CELERY_BROKER_URL = redis.url
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis.url}
    }
    app.conf.broker_url = redis.url
    app.conf.task_always_eager = False
    saved_pools = _swap_broker_pools(app, (None, None))
    db = connection.settings_dict
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=redis.url,
        SCHEDULER_CYCLE_SECONDS="1",
        SIMULATED_TIME_SCALE="3600",
        DJANGO_DEBUG="true",
        # Notifications are dispatched by this worker's beat (tests/integration/notifications).
        NOTIFY_DISPATCH_SECONDS="1",
        NOTIFY_GROUP_WINDOW_SECONDS="1",
    )
    worker_log = open(tmp_path / "worker.log", "a")  # noqa: SIM115 - closed at teardown

    def start_worker() -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "gpuplatform",
                "worker",
                "-B",
                "-Q",
                queues,
                "-c",
                "2",
                "--pool",
                "prefork",
                "--loglevel",
                "INFO",
                "-s",
                str(tmp_path / "beat-schedule"),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=worker_log,
            start_new_session=True,
        )

    state = {"worker": start_worker()}

    def restart_worker_if_dead() -> bool:
        """What the deployment's supervisor does (compose: restart: unless-stopped)."""
        if state["worker"].poll() is None:
            return False
        state["worker"] = start_worker()
        return True

    yield {
        "redis": redis,
        "state": state,
        "app": app,
        "log": tmp_path / "worker.log",
        "restart_worker_if_dead": restart_worker_if_dead,
    }
    worker = state["worker"]
    os.killpg(worker.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(15)
    # The pool and beat processes can outlive the main one; one left mid-cycle would hold the
    # loop's lock into the next test, whose worker would then never run a cycle.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)
    worker_log.close()
    _wait_until_no_other_session_holds_an_advisory_lock()
    app.conf.broker_url, app.conf.task_always_eager = saved
    _swap_broker_pools(app, saved_pools)


def _swap_broker_pools(app, pools):
    """Put ``pools`` (connection pool, producer pool) in the app's place and return the old ones.
    Celery keeps them for the process: a test that sent a task earlier (to the session's broker)
    would otherwise keep sending there after broker_url changed, and the private worker would
    never hear of it; restoring them afterwards gives later tests their own broker back."""
    old = (app._pool, app.amqp._producer_pool)
    app._pool, app.amqp._producer_pool = pools
    return old


def wait_for(predicate, timeout: float, what: str, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    jobs = "\n".join(
        f"  job {pk} {state}: {why[:200]}"
        for pk, state, why in Job.objects.order_by("pk").values_list("pk", "state", "why_pending")[
            :20
        ]
    )
    raise AssertionError(
        f"timed out after {timeout} s waiting for {what}\njobs:\n{jobs}\n{_lock_holders()}\n{tail}"
    )


def _wait_until_no_other_session_holds_an_advisory_lock(timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"a killed worker's session still holds a lock\n{_lock_holders()}")


def _lock_holders() -> str:
    """Who holds an advisory lock on this database, and whether it is this test process: a
    worker that never runs a cycle is most often one that never gets the loop's lock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        own_pid = cursor.fetchone()[0]
        cursor.execute(
            "SELECT l.objid, l.pid, a.application_name, a.state, a.backend_start,"
            " left(a.query, 200) FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.database ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        rows = cursor.fetchall()
    if not rows:
        return "advisory locks: none held"
    lines = [f"advisory locks (this test process is backend {own_pid}):"]
    lines += [f"  key {row[0]} held by backend {row[1]}: {row[2:]!r}" for row in rows]
    return "\n".join(lines)


def test_submit_through_api_runs_to_success_on_a_real_worker(platform, submit, infra):
    job_id = submit(platform["alice"], gpus_per_worker=4, simulated_duration_s=1800).json()["id"]
    wait_for(
        lambda: Job.objects.get(pk=job_id).state == "succeeded",
        60,
        "the worker to run the job to success",
        infra["log"],
    )
    job = Job.objects.get(pk=job_id)
    assert job.attempts == 1 and job.exit_code == 0
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds[0] == "submitted" and "started" in kinds and kinds[-1] == "succeeded"


def test_concurrent_cycles_never_double_allocate_or_double_start(platform, submit, infra):
    ids = [
        submit(
            platform["alice" if i % 2 else "bob"],
            name=f"j{i}",
            team="vision" if i % 2 else "nlp",
            gpus_per_worker=(i % 4) + 1,
            simulated_duration_s=36000,
        ).json()["id"]
        for i in range(40)
    ]
    from scheduler.tasks import run_cycle

    for _ in range(30):  # a burst of cycles across the worker's two processes
        run_cycle.delay()
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, state="running").count() >= 20,
        60,
        "jobs to start",
        infra["log"],
    )
    time.sleep(3)  # let the burst drain
    live = list(
        Allocation.objects.filter(ended_at__isnull=True).values_list("node_id", "gpu_index")
    )
    assert len(live) == len(set(live)), "a GPU is held twice"
    for job in Job.objects.filter(pk__in=ids):
        assert job.attempts <= 1, f"job {job.pk} started {job.attempts} times"
        assert SimulatedRun.objects.filter(job_id=str(job.pk)).count() == (
            1 if job.state == "running" else 0
        )
        if job.state == "running":
            held = Allocation.objects.filter(job=job, ended_at__isnull=True).count()
            assert held == job.total_gpus


def test_redis_restart_during_the_loop_loses_no_job(platform, submit, infra):
    first = submit(platform["alice"], name="before", simulated_duration_s=1800).json()["id"]
    wait_for(
        lambda: Job.objects.get(pk=first).state in ("running", "succeeded"),
        60,
        "the first job to start",
        infra["log"],
    )
    infra["redis"].kill()
    time.sleep(1.5)
    # Submissions while the broker is down still land in the database (the trigger is best
    # effort); the beat of the restarted loop picks them up.
    during = submit(platform["alice"], name="during", simulated_duration_s=1800)
    assert during.status_code == 201
    infra["redis"].start()
    # Celery 5.7's worker can die on a lost broker connection ("Unrecoverable error:
    # AttributeError ... 'hostname'"); production runs it under a supervisor that restarts it,
    # and all scheduling state is in PostgreSQL, so a restarted worker carries on.
    time.sleep(3)
    infra["restart_worker_if_dead"]()
    ids = [first, during.json()["id"]]

    def recovered() -> bool:
        infra["restart_worker_if_dead"]()
        return Job.objects.filter(pk__in=ids, state="succeeded").count() == 2

    wait_for(
        recovered,
        90,
        "both jobs to succeed after the Redis restart",
        infra["log"],
    )
