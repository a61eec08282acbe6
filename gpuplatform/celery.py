"""The Celery application. Beat entries expire just under their period, so a backlog never
replays a pile of stale scheduling cycles after a worker restart."""

import os
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")

app = Celery("gpuplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _register_beat(sender: Celery, **_kwargs: Any) -> None:
    from django.conf import settings

    period = settings.SCHEDULER_CYCLE_SECONDS
    # The cycle observes the backends first, under the loop's single-flight lock. Nothing else
    # that takes that lock may be on the beat: an entry of the same period is sent just before
    # each cycle, holds the lock through it, and the cycle is skipped (14 of 15 were, when a
    # backend-sync task had its own entry).
    sender.add_periodic_task(
        period,
        sender.signature("scheduler.tasks.run_cycle", options={"expires": period * 0.9}),
        name="scheduling cycle",
    )
    for task_name, every in settings.PERIODIC_TASKS:
        sender.add_periodic_task(
            every,
            sender.signature(task_name, options={"expires": every * 0.9}),
            name=task_name,
        )
