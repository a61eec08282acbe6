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
