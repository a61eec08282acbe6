"""Notifications on the real infrastructure: a real Celery worker (with its embedded beat) runs
the job, sees it finish, and its beat-driven dispatcher delivers the signed webhook to a local
receiver: nothing of the delivery happens in the test process, a request or the cycle."""

from __future__ import annotations

import pytest

from notifications import services
from notifications.models import DeliveryAttempt, Message
from tests.integration.loop.test_celery_loop import infra, private_redis, wait_for  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_finished_job_is_delivered_by_the_worker(platform, submit, infra, receiver):  # noqa: F811
    hook = services.webhook_create(
        user=platform["admin"],
        team="vision",
        name="worker-hook",
        url=receiver.url,
        allow_private_network=True,
    )
    receiver.secret = hook.secret
    job_id = submit(platform["alice"], gpus_per_worker=2, simulated_duration_s=600).json()["id"]
    wait_for(lambda: len(receiver.requests) >= 1, 90, "the worker to deliver", infra["log"])
    request = receiver.requests[0]
    assert request["verified"]
    assert request["json"]["events"][0]["kind"] == "job.succeeded"
    assert request["json"]["events"][0]["job"] == job_id
    wait_for(
        lambda: Message.objects.filter(status="delivered").exists(), 10, "the attempt's record"
    )
    assert DeliveryAttempt.objects.get().ok


@pytest.mark.parametrize("infra", [{"queues": "celery"}], indirect=True)
def test_the_loops_worker_never_takes_a_delivery(platform, submit, infra, receiver):  # noqa: F811
    """A delivery may wait its whole timeout on a relay or receiver that hangs, and the
    dispatcher hands out up to 200 at once: on the loop's worker they held its processes while
    the scheduling cycles expired behind them. Deliveries go to the ``notify`` queue, which the
    loop's worker (``-Q celery``, docs/deploy.md) does not read: its beat still dispatches (the
    message is claimed), the delivery waits in ``notify``, and the loop goes on."""
    import redis

    hook = services.webhook_create(
        user=platform["admin"],
        team="vision",
        name="worker-hook",
        url=receiver.url,
        allow_private_network=True,
    )
    receiver.secret = hook.secret
    submit(platform["alice"], gpus_per_worker=2, simulated_duration_s=600)
    wait_for(
        lambda: Message.objects.exclude(status__in=["collecting", "queued"]).exists(),
        90,
        "the loop's worker to finish the job and dispatch its message",
        infra["log"],
    )
    assert Message.objects.get().status == "enqueued"  # handed out, not delivered here
    log = infra["log"]
    cycles_before = log.read_text().count("scheduler.tasks.run_cycle")
    wait_for(
        lambda: log.read_text().count("scheduler.tasks.run_cycle") >= cycles_before + 3,
        60,
        "the loop's worker to run cycles after the delivery was queued",
        log,
    )
    assert redis.Redis.from_url(infra["redis"].url).llen("notify") >= 1
    assert receiver.requests == []
    assert not DeliveryAttempt.objects.exists()
