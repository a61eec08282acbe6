"""Live job output for the job page: ``/ws/jobs/<job id>/log/[?attempt=N]``.

A signed-in user who may read the job (the same team-scoped selector as every job read;
anything else is closed with 4404, never told whether the job exists) gets the tail of the
attempt's output, then what the job writes, as it writes it, read by cursor from the job's
backend about once a second. Without ``attempt`` the socket follows the job: when an attempt ends
and a newer one starts (a requeue), it moves on to that one. When the job is over and its last
output has been sent, the socket says so and closes. A backend that does not answer is reported
and retried, and so is a read that fails unexpectedly (a database hiccup): the socket stays open
and its reader never dies silently under it. Read-only: anything the client sends is answered
with an error frame; frames go through the bounded JSON reader (``consumers.ReadOnlySocket``).
The consumer never writes to the database. Each socket reads the backend once a second, so one user
may hold at most ``MAX_SOCKETS_PER_USER`` of them per server process (more are closed with 4429).

Sessions follow membership: every read goes through the team-scoped selector, so a member removed
from the team is closed (4404) within a second; every ``SESSION_CHECK_S`` the socket reads its
user afresh from its session, so a logout closes it (4401) within seconds, and a platform admin
demoted meanwhile reads another team's job no more (4404) within seconds. A single sign-on
session due for its check with the provider closes it with 4440, on connect and at those checks,
as the stream socket does (``consumers.ReadOnlySocket``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal, TypedDict
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.db import connection

from core.errors import DomainError, NotFound, Unavailable
from scheduler import selectors
from scheduler.states import FINAL_STATES

from .consumers import ReadOnlySocket

logger = logging.getLogger(__name__)

POLL_S = 1.0
MAX_SOCKETS_PER_USER = 8
UNAVAILABLE_RETRY_S = 5.0
CHUNK_BYTES = 64 * 1024
SESSION_CHECK_S = 5.0


class LogAttemptPayload(TypedDict):
    type: Literal["log.attempt"]
    attempt: int
    attempts: int


class LogPayload(TypedDict):
    type: Literal["log"]
    attempt: int
    text: str
    truncated: bool


class LogEndPayload(TypedDict):
    type: Literal["log.end"]
    state: str


class LogUnavailablePayload(TypedDict):
    type: Literal["log.unavailable"]
    message: str


def _closing(read):
    """``read`` in a pool thread that closes its database connection afterwards: the thread may
    not serve another read for a long time, and an idle connection per pool thread adds up."""

    def run(**kwargs):
        try:
            return read(**kwargs)
        finally:
            connection.close()

    return run


# Reads run off the event loop in a worker thread (a backend read may run a command for
# seconds; the server's one thread for sync code must not wait on it).
_read = database_sync_to_async(_closing(selectors.job_log), thread_sensitive=False)
_visible = database_sync_to_async(_closing(selectors.job_get), thread_sensitive=False)


_open_by_user: dict[int, int] = {}


class JobLogConsumer(ReadOnlySocket):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(4401)
            return
        if await self.closed_for_sso_recheck():
            return
        if _open_by_user.get(user.pk, 0) >= MAX_SOCKETS_PER_USER:
            await self.refuse(4429)
            return
        # Counted at once, before the job read below awaits (counted after it, sockets opened
        # together all passed the bound); given back by cleanup, however the socket ends.
        self.counted = user.pk
        _open_by_user[user.pk] = _open_by_user.get(user.pk, 0) + 1
        job_id = self.scope["url_route"]["kwargs"]["job_id"]
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1")[:100])
        wanted = (query.get("attempt") or [""])[0]
        # ASCII digits only: str.isdigit() also says yes to "²", which int() refuses.
        if wanted and not (wanted.isascii() and wanted.isdigit() and 0 < int(wanted) < 100000):
            await self.cleanup()
            await self.refuse(4400)
            return
        try:
            await _visible(user=user, job_id=job_id)
        except NotFound:
            await self.cleanup()
            await self.refuse(4404)
            return
        self.remember_session(user)
        await self.accept()
        self.follower = asyncio.get_running_loop().create_task(
            self._follow(user, job_id, int(wanted) if wanted else None)
        )

    async def cleanup(self) -> None:
        """Stop following and give the user's socket back. Idempotent."""
        follower = getattr(self, "follower", None)
        if follower is not None:
            follower.cancel()
        counted = getattr(self, "counted", None)
        if counted is not None:
            self.counted = None
            left = _open_by_user.get(counted, 1) - 1
            if left > 0:
                _open_by_user[counted] = left
            else:
                _open_by_user.pop(counted, None)

    @staticmethod
    async def _over(user, job_id: int) -> bool:
        """Is the job in a final state? (False when it is no longer visible: the next read
        closes with 4404.)"""
        try:
            job = await _visible(user=user, job_id=job_id)
        except NotFound:
            return False
        return job.state in FINAL_STATES

    async def _follow(self, user, job_id: int, pinned: int | None) -> None:
        attempt, cursor, shown = pinned, None, None
        loop = asyncio.get_running_loop()
        session_checked = loop.time()
        while True:
            if loop.time() - session_checked >= SESSION_CHECK_S:
                session_checked = loop.time()
                fresh, code = await self.session_user(user)
                if code is not None:  # logged out, deactivated, new password; or SSO check due
                    await self.close(code=code)
                    return
                # Reads go on as the user is now, not as it was at connect: a platform admin
                # demoted since reads only its own teams' jobs (another's is closed with 4404).
                user = fresh
            try:
                log = await _read(
                    user=user,
                    job_id=job_id,
                    attempt=attempt,
                    cursor=cursor,
                    limit_bytes=CHUNK_BYTES,
                )
            except NotFound:  # no longer visible (membership removed, job deleted)
                await self.close(code=4404)
                return
            except Unavailable as exc:
                message: LogUnavailablePayload = {"type": "log.unavailable", "message": exc.message}
                await self.send_json(message)
                await asyncio.sleep(UNAVAILABLE_RETRY_S)
                continue
            except DomainError as exc:  # e.g. an attempt that does not exist (yet)
                if exc.field == "attempt" and pinned is not None and await self._over(user, job_id):
                    # A finished job gains no attempt: refuse as the REST read does, not wait.
                    await self.send_json(
                        {"type": "error", "field": "attempt", "message": exc.message}
                    )
                    await self.close(code=4400)
                    return
                attempt, cursor = pinned, None  # start over
                await asyncio.sleep(POLL_S)
                continue
            except Exception:
                # A database hiccup or a backend's unexpected error: ending this task would
                # leave an open socket that never sends again (and that the browser, seeing no
                # close, never replaces). Say so without internals and try again.
                logger.warning(
                    "output of job %s could not be read; retrying", job_id, exc_info=True
                )
                failed: LogUnavailablePayload = {
                    "type": "log.unavailable",
                    "message": "the job's output could not be read; retrying",
                }
                await self.send_json(failed)
                await asyncio.sleep(UNAVAILABLE_RETRY_S)
                continue
            if log.attempt is not None and log.attempt != shown:
                shown = attempt = log.attempt
                head: LogAttemptPayload = {
                    "type": "log.attempt",
                    "attempt": log.attempt,
                    "attempts": log.job.attempts,
                }
                await self.send_json(head)
            if log.text:
                chunk: LogPayload = {
                    "type": "log",
                    "attempt": log.attempt or 0,
                    "text": log.text,
                    "truncated": log.truncated,
                }
                await self.send_json(chunk)
            cursor = log.cursor
            if log.finished and not log.text:
                if pinned is None and log.job.attempts > (log.attempt or 0):
                    attempt, cursor = log.job.attempts, None  # requeued and restarted
                    continue
                if log.job.state in FINAL_STATES or pinned is not None:
                    end: LogEndPayload = {"type": "log.end", "state": log.job.state}
                    await self.send_json(end)
                    await self.close()
                    return
            if not log.text:
                await asyncio.sleep(POLL_S)
