"""The in-process loop for the embedded demo (no Redis, no Celery worker): a daemon thread that
runs a cycle every ``SCHEDULER_CYCLE_SECONDS`` or sooner when woken by a trigger, and the
periodic tasks that Celery beat runs in production."""

from __future__ import annotations

import logging
import threading
import time

from celery import current_app
from django.conf import settings
from django.db import close_old_connections

from ..triggers import wakeup_event
from .cycle import run_cycle

log = logging.getLogger(__name__)
_thread: threading.Thread | None = None


def start_in_process_loop() -> threading.Thread:
    global _thread
    if _thread is not None and _thread.is_alive():
        return _thread
    _thread = threading.Thread(target=_run_forever, name="scheduler-loop", daemon=True)
    _thread.start()
    log.info("in-process scheduling loop started (every %.1f s)", settings.SCHEDULER_CYCLE_SECONDS)
    return _thread


def _run_forever() -> None:
    wakeup = wakeup_event()
    last_run: dict[str, float] = {}
    while True:
        wakeup.wait(timeout=settings.SCHEDULER_CYCLE_SECONDS)
        wakeup.clear()
        close_old_connections()
        try:
            run_cycle()
        except Exception:  # the loop must outlive any one bad cycle
            log.exception("scheduling cycle failed; retrying next period")
        finally:
            close_old_connections()
        _run_due_housekeeping(last_run)


def _run_due_housekeeping(last_run: dict[str, float]) -> None:
    """Run the periodic tasks of ``settings.PERIODIC_TASKS`` that are due, in this thread (what
    Celery beat does in production)."""
    # A worker imports every app's tasks module at start; this process must do the same, or the
    # periodic tasks' names are unknown here (idempotent, cheap after the first call).
    current_app.loader.import_default_modules()
    now = time.monotonic()
    for task_name, every in settings.PERIODIC_TASKS:
        if now - last_run.get(task_name, float("-inf")) < every:
            continue
        last_run[task_name] = now
        try:
            current_app.tasks[task_name].run()
        except Exception:
            log.exception("periodic task %s failed; retrying next period", task_name)
        finally:
            close_old_connections()
