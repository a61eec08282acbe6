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
from typing import Any

from django.db import connection
from django.db.models import QuerySet

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


def key_share_skip_locked(rows: QuerySet[Any], *fields: str) -> dict[Any, tuple[Any, ...]]:
    """``{pk: (fields...)}`` of ``rows`` (a field may follow a foreign key: only the rows of
    ``rows``' own table are locked), each locked FOR KEY SHARE until the caller's transaction
    ends: nobody deletes it or takes it FOR UPDATE meanwhile, while plain UPDATEs go on. A row
    another transaction holds FOR UPDATE (an admin's action on it, or its delete, in progress)
    is left out, not waited for, so the caller never waits on such an action nor deadlocks with
    it. Elsewhere than PostgreSQL (SQLite serializes writers): a plain read."""
    values = rows.order_by("pk").values_list("pk", *fields)
    if connection.vendor != "postgresql":
        return {row[0]: tuple(row[1:]) for row in values}
    # Django's select_for_update has no KEY SHARE, the one mode that leaves plain UPDATEs alone.
    sql, params = values.query.sql_with_params()
    table = connection.ops.quote_name(rows.model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} FOR KEY SHARE OF {table} SKIP LOCKED", params)
        return {row[0]: tuple(row[1:]) for row in cursor.fetchall()}
