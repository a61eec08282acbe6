"""The what-if run on the real infrastructure: the API request only queues it; a real Celery
worker process (private Redis broker, PostgreSQL) takes it from the broker, replays, publishes its
progress on the Redis channel layer to the admins' what-if group, and stores the metrics that
``python -m scheduler.simulation compare`` gives on the same export. Skipped locally without
PostgreSQL / redis-server; required in CI."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model

from core import streams
from policyversions.models import WhatIfRun
from tests.integration.loop.test_celery_loop import infra, private_redis, wait_for  # noqa: F401

from .test_whatif_runs import cli_results, comparable

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def whatif_stream(infra):  # noqa: F811
    """What the admins' what-if group hears on the worker's channel layer (the private Redis)."""
    from channels_redis.core import RedisChannelLayer

    layer = RedisChannelLayer(hosts=[infra["redis"].url])
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(streams.WHATIF_GROUP, channel)

    async def take():
        out = []
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=1.0)
            except TimeoutError:
                return out
            out.append(json.loads(message["text"]))

    yield lambda: async_to_sync(take)()
    async_to_sync(layer.group_discard)(streams.WHATIF_GROUP, channel)


def test_a_worker_replays_the_run_like_the_simulation_command(
    settings,
    infra,  # noqa: F811
    whatif_stream,
    api_as,
    tmp_path,
):
    from demo.seed import seed

    settings.DEBUG = True
    seed(jobs=0, history_days=2)
    admin = get_user_model().objects.get(username="admin")
    response = api_as(admin).post(
        "/api/v1/policy/whatif",
        {"window_days": 2, "candidates": {"faster_aging": {"queue_aging_s": 3600}}},
        format="json",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    wait_for(
        lambda: WhatIfRun.objects.get(pk=run_id).status not in ("queued", "running"),
        180,
        "the worker to finish the replay",
        infra["log"],
    )
    run = WhatIfRun.objects.get(pk=run_id)
    assert run.status == "succeeded", run.error
    assert comparable(run.results) == comparable(cli_results(run, tmp_path))
    heard = [m for m in whatif_stream() if m["run"] == run_id]
    fractions = [m["fraction"] for m in heard if m["status"] == "running"]
    assert len(fractions) > 20 and fractions == sorted(fractions)
    assert heard[-1]["status"] == "succeeded"


@pytest.mark.parametrize("infra", [{"queues": "celery"}], indirect=True)
def test_the_loops_worker_never_takes_a_replay(settings, infra, api_as):  # noqa: F811
    """A replay takes minutes to hours of one worker process; on the loop's worker it would
    hold one of its processes (both, with two clusters replaying), and every team's scheduling
    cycle would wait behind it. The replay goes to the ``whatif`` queue, which the loop's worker
    (``-Q celery``, docs/deploy.md) does not read: it keeps running cycles, the run waits."""
    import redis

    from demo.seed import seed

    settings.DEBUG = True
    seed(jobs=0, history_days=2)
    admin = get_user_model().objects.get(username="admin")
    response = api_as(admin).post(
        "/api/v1/policy/whatif",
        {"window_days": 2, "candidates": {"faster_aging": {"queue_aging_s": 3600}}},
        format="json",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    log = infra["log"]
    cycles_before = log.read_text().count("scheduler.tasks.run_cycle") if log.exists() else 0
    wait_for(
        lambda: log.read_text().count("scheduler.tasks.run_cycle") >= cycles_before + 6,
        60,
        "the loop's worker to run cycles after the replay was queued",
        log,
    )
    run = WhatIfRun.objects.get(pk=run_id)
    assert (run.status, run.started_at) == ("queued", None)
    assert redis.Redis.from_url(infra["redis"].url).llen("whatif") == 1
