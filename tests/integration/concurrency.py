"""Two writers at once on a real PostgreSQL: the test's own transaction makes a first change and
holds its locks while a second request runs in a thread, so a check-then-write race is shown
deterministically, without sleeping for luck.

``race(first, second)`` runs ``first`` in an open transaction, starts ``second`` in a thread,
waits until that thread either finished or is waiting for a lock the first holds, then commits
the first and joins the thread. It returns what ``second`` returned, or the exception it raised.

``right_after(matches, action)`` runs ``action`` to its end on a second connection at one exact
moment of the code under test: just after the first statement of this connection that
``matches`` (an admin's delete or cancel landing between a task's read and its write).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def require_postgresql() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row locks and concurrent transactions need PostgreSQL; SQLite serializes")


def _someone_waits_for_a_lock() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        # pg_locks is read fresh on every call (pg_stat_activity would be snapshotted for the
        # length of this test's open transaction). Only a wait for a lock this session holds
        # counts: another test run on the same server (a second pytest worker) has waits too.
        cursor.execute(
            "SELECT count(*) FROM pg_locks"
            " WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        )
        return cursor.fetchone()[0] > 0


def race(first: Callable[[], Any], second: Callable[[], Any], *, timeout: float = 20.0) -> Any:
    """Run ``first`` (in an open transaction, committed at the end) and ``second`` (in a thread,
    its own connection) so that ``second`` runs while ``first``'s changes are uncommitted."""
    from django.db import connection, transaction

    require_postgresql()
    outcome: dict[str, Any] = {}

    def other() -> None:
        try:
            outcome["value"] = second()
        except Exception as exc:
            outcome["value"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=other)
    with transaction.atomic():
        first()
        thread.start()
        deadline = time.monotonic() + timeout
        while thread.is_alive() and not _someone_waits_for_a_lock():
            if time.monotonic() > deadline:
                raise AssertionError("the second writer neither finished nor waited for a lock")
            time.sleep(0.02)
    thread.join(timeout)
    assert not thread.is_alive(), "the second writer is still blocked after the first committed"
    return outcome["value"]


@contextlib.contextmanager
def right_after(
    matches: Callable[[str, Any], bool], action: Callable[[], Any], *, timeout: float = 20.0
) -> Iterator[list[str]]:
    """While inside, run ``action`` in a thread (its own connection, committed on return) right
    after this connection's first statement for which ``matches(sql, params)`` holds, and wait
    for it. Yields the statements matched (one at most): assert it is not empty, or the moment
    never came and the test proved nothing."""
    from django.db import connection

    seen: list[str] = []
    failure: list[BaseException] = []

    def other() -> None:
        try:
            action()
        except BaseException as exc:  # re-raised in the test, not lost in the thread
            failure.append(exc)
        finally:
            connection.close()  # the thread's own connection

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        answer = execute(sql, params, many, context)
        if not seen and matches(sql, params):
            seen.append(sql)
            thread = threading.Thread(target=other)
            thread.start()
            thread.join(timeout)
            if thread.is_alive():
                raise AssertionError(
                    "the action is still waiting, for a lock this connection holds?"
                )
            if failure:
                raise failure[0]
        return answer

    with connection.execute_wrapper(wrapper):
        yield seen
