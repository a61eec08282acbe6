"""Ask for a scheduling cycle soon (after a submission, a finish, a node event), debounced.

With Redis, one ``run_cycle`` task is enqueued per debounce window (a cache ``add`` is the
debounce: only the first caller in the window enqueues). Without Redis, the in-process loop is
woken up. Either way the request is sent only after the current transaction commits.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

log = logging.getLogger(__name__)
_wakeup = threading.Event()


def wakeup_event() -> threading.Event:
    """The event the in-process loop waits on between cycles."""
    return _wakeup


def _enqueue() -> None:
    _wakeup.set()
    if not settings.REDIS_URL:
        return
    debounce = settings.SCHEDULER_TRIGGER_DEBOUNCE_SECONDS
    # Best effort: with Redis down the submission has still committed, and the beat schedule runs
    # the cycle once Redis is back, so no error may escape to the caller.
    try:
        if not cache.add("scheduler:cycle-requested", 1, timeout=max(debounce, 0.1)):
            return
    except Exception:
        log.warning("cache unavailable; cycle trigger skipped (beat will run it)")
        return
    from .tasks import run_cycle

    try:
        run_cycle.apply_async(
            countdown=debounce,
            expires=debounce + settings.SCHEDULER_CYCLE_SECONDS,
            retry=False,
        )
    except Exception:
        log.warning("broker unavailable; cycle trigger skipped (beat will run it)")


def request_cycle() -> None:
    transaction.on_commit(_enqueue)
