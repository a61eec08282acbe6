"""The in-process loop for the embedded demo (no Redis, no Celery worker): a daemon thread that
runs a cycle every ``SCHEDULER_CYCLE_SECONDS`` or sooner when woken by a trigger."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections

from .triggers import wakeup_event

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
    from .cycle import run_cycle

    wakeup = wakeup_event()
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
