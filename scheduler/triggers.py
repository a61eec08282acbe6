"""Ask for a scheduling cycle soon (after a submission, a finish, a node event), debounced.

With Redis, one ``run_cycle`` task is enqueued per debounce window (only the first caller in the
window enqueues). Without Redis, the in-process loop is woken up. Either way the request is sent
only after the current transaction commits.
"""

from __future__ import annotations

import logging
import threading

from celery import current_app
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)
_wakeup = threading.Event()


def wakeup_event() -> threading.Event:
    """The event the in-process loop waits on between cycles."""
    return _wakeup


DEBOUNCE_KEY = "gpuplatform:scheduler:cycle-requested"
RUN_CYCLE_TASK = "scheduler.tasks.run_cycle"
_redis = None


def _first_in_window(debounce_s: float) -> bool:
    """True for the first caller of each debounce window, across every process.

    A Redis ``SET NX PX``, not Django's ``cache.add``: the cache API rounds timeouts down to whole
    seconds, so the default 0.5 s window became 0, which Django's Redis cache treats as "set and
    delete at once": every submission enqueued its own cycle task."""
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(settings.REDIS_URL)
    window_ms = max(int(debounce_s * 1000), 100)
    return bool(_redis.set(DEBOUNCE_KEY, 1, nx=True, px=window_ms))


def _enqueue() -> None:
    _wakeup.set()
    if not settings.REDIS_URL:
        return
    debounce = settings.SCHEDULER_TRIGGER_DEBOUNCE_SECONDS
    # Best effort: with Redis down the submission has still committed, and the beat schedule runs
    # the cycle once Redis is back, so no error may escape to the caller.
    try:
        if not _first_in_window(debounce):
            return
    except Exception:
        log.warning("cache unavailable; cycle trigger skipped (beat will run it)")
        return
    try:
        # By name: the task module imports the loop, which requests cycles through this module.
        current_app.signature(RUN_CYCLE_TASK).apply_async(
            countdown=debounce,
            expires=debounce + settings.SCHEDULER_CYCLE_SECONDS,
            retry=False,
        )
    except Exception:
        log.warning("broker unavailable; cycle trigger skipped (beat will run it)")


def request_cycle() -> None:
    transaction.on_commit(_enqueue)
