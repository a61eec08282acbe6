"""The single-flight lock of the scheduling loop: at most one cycle runs at a time, across every
worker process and machine.

On PostgreSQL a session-level advisory lock (released by the server if the worker dies, and
independent of Redis, so a Redis restart cannot let two cycles overlap). Elsewhere (the embedded
SQLite demo: one process) a process-local lock. Both are non-blocking: a cycle that finds the
lock taken is skipped, because the running cycle already covers it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from django.db import connection

ADVISORY_KEY = 0x6770_7573  # "gpus": one key for the whole loop
_local_locks: dict[int, threading.Lock] = {}
_local_locks_guard = threading.Lock()


@contextlib.contextmanager
def scheduler_lock() -> Iterator[bool]:
    """Yield True when this caller holds the lock, False when another cycle is running."""
    with advisory_lock(ADVISORY_KEY) as acquired:
        yield acquired


@contextlib.contextmanager
def advisory_lock(key: int) -> Iterator[bool]:
    """A non-blocking single-flight lock named by ``key`` (see the module docstring): True when
    this caller holds it. Other single-flight jobs (the notification dispatcher) use their own
    key."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            acquired = cursor.fetchone()[0]
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    with _local_locks_guard:
        lock = _local_locks.setdefault(key, threading.Lock())
    acquired = lock.acquire(blocking=False)
    try:
        yield acquired
    finally:
        if acquired:
            lock.release()
