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

Sessions follow membership: the socket joins its user's control group (through the hub, as the
stream socket does), and a membership change, a logout or a deactivation announced there makes it
read its session and the job again at once, sending nothing more until that check has answered:
a logout or a deactivation closes it with 4401, a user who may no longer read the job (removed
from the team, a platform admin demoted) with 4404. Every read goes through the team-scoped
selector too, and every ``SESSION_CHECK_S`` the socket reads its user afresh from its session:
the backstop for changes no signal announces. A single sign-on session due for its check with
the provider closes it with 4440, on connect and at those checks, as the stream socket does
(``consumers.ReadOnlySocket``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal, ParamSpec, TypeAlias, TypedDict, TypeVar
from urllib.parse import parse_qs

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection

from core import streams
from core.errors import DomainError, NotFound, Unavailable
from scheduler import selectors
from scheduler.states import FINAL_STATES

from .consumers import CLOSE_PERMISSIONS_CHANGED, ReadOnlySocket, in_worker_thread
from .hub import hub

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


class LogErrorPayload(TypedDict):
    type: Literal["error"]
    field: str
    message: str


LogSocketPayload: TypeAlias = (
    LogAttemptPayload | LogPayload | LogEndPayload | LogUnavailablePayload | LogErrorPayload
)


_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def _closing(read: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
    """``read`` in a pool thread that closes its database connection afterwards: the thread may
    not serve another read for a long time, and an idle connection per pool thread adds up."""

    def run(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        try:
            return read(*args, **kwargs)
        finally:
            connection.close()

    return run


# Reads run off the event loop in a worker thread (a backend read may run a command for
# seconds; the server's one thread for sync code must not wait on it).
_read = in_worker_thread(_closing(selectors.job_log), thread_sensitive=False)
_visible = in_worker_thread(_closing(selectors.job_get), thread_sensitive=False)


_open_by_user: dict[int, int] = {}


class JobLogConsumer(ReadOnlySocket):
    async def connect(self) -> None:
        user: User | AnonymousUser | None = self.scope.get("user")
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
        self.counted: int | None = user.pk
        _open_by_user[user.pk] = _open_by_user.get(user.pk, 0) + 1
        job_id: int = self.scope["url_route"]["kwargs"]["job_id"]
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1")[:100])
        wanted = (query.get("attempt") or [""])[0]
        # ASCII digits only: str.isdigit() also says yes to "²", which int() refuses.
        if wanted and not (wanted.isascii() and wanted.isdigit() and 0 < int(wanted) < 100000):
            await self.cleanup()
            await self.refuse(4400)
            return
        self.job_id = job_id
        # Set while nothing checks the user's rights; cleared from a control group's re-check
        # request until its answer, and for good once the socket closes.
        self.may_send = asyncio.Event()
        self.may_send.set()
        self.live, self.recheck_due, self.checks_asked = False, False, 0
        # The control group before the job is read: a change committing after the read is
        # announced to this socket, one committing before is in what is read.
        self.hub = hub()
        if self.hub is not None:
            await self.hub.join(self, [streams.user_group(user.pk)])
            self.control_group = streams.user_group(user.pk)
        try:
            await _visible(user=user, job_id=job_id)
        except NotFound:
            await self.cleanup()
            await self.refuse(4404)
            return
        self.remember_session(user)
        self.user = user
        await self.accept()
        loop = asyncio.get_running_loop()
        self.follower = loop.create_task(self._follow(job_id, int(wanted) if wanted else None))
        self.live = True
        if self.recheck_due:  # announced while connecting
            self.checker = loop.create_task(self._recheck())

    def push(self, text: str) -> None:
        """The hub's call for content: this socket joins no content group, so there is none."""

    def control(self, text: str) -> None:
        """The hub's call for a message of this user's control group: re-check now, and hold
        the job's output until the check has answered."""
        if streams.RECHECK_SESSIONS not in text:
            return
        self.checks_asked += 1
        self.may_send.clear()
        if not self.live:  # still connecting: checked once connect has finished
            self.recheck_due = True
            return
        self.checker = asyncio.get_running_loop().create_task(self._recheck())

    async def _recheck(self) -> None:
        """Close when the session ended or its single sign-on check is due (4401 / 4440), or
        when the user may no longer read the job (4404); otherwise go on as the user is now,
        unless a newer check was asked for meanwhile (its answer decides). A check that cannot
        read the database closes with 4403: what was announced could not be checked, and the
        page reconnects and is checked afresh."""
        if getattr(self, "closing", False):
            return
        asked = self.checks_asked
        user, code = await self.session_user(None)
        if code is None and user is not None:
            try:
                await _visible(user=user, job_id=self.job_id)
            except NotFound:
                code = 4404
            except Exception:
                logger.warning("log socket session check failed", exc_info=True)
                user = None
        if user is None or code is not None:
            await self.close(code=CLOSE_PERMISSIONS_CHANGED if code is None else code)
            return
        self.user = user
        if self.checks_asked == asked:
            self.may_send.set()

    async def _send(self, payload: LogSocketPayload) -> None:
        """Send a frame of the job's (its output, its attempts, its end) once no check of the
        user's rights is running; never once the socket is closing (the wait lasts until the
        follower is cancelled). Only the follower waits here: the consumer's own handlers must
        not, or a closed socket could never take its disconnect."""
        await self.may_send.wait()
        await self.send_json(payload)

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        if getattr(self, "closing", False):
            return
        self.closing = True
        if hasattr(self, "may_send"):
            self.may_send.clear()
        await self._leave_hub()
        await super().close(code=code, reason=reason)

    async def _leave_hub(self) -> None:
        """Leave the user's control group. Idempotent."""
        socket_hub, self.hub = getattr(self, "hub", None), None
        group = getattr(self, "control_group", None)
        if socket_hub is not None and group is not None:
            await socket_hub.leave(self, [group])

    async def cleanup(self) -> None:
        """Stop following and checking, leave the hub and give the user's socket back.
        Idempotent."""
        for name in ("follower", "checker"):
            task = getattr(self, name, None)
            if task is not None:
                task.cancel()
        await self._leave_hub()
        counted = getattr(self, "counted", None)
        if counted is not None:
            self.counted = None
            left = _open_by_user.get(counted, 1) - 1
            if left > 0:
                _open_by_user[counted] = left
            else:
                _open_by_user.pop(counted, None)

    @staticmethod
    async def _over(user: User, job_id: int) -> bool:
        """Is the job in a final state? (False when it is no longer visible: the next read
        closes with 4404.)"""
        try:
            job = await _visible(user=user, job_id=job_id)
        except NotFound:
            return False
        return job.state in FINAL_STATES

    async def _follow(self, job_id: int, pinned: int | None) -> None:
        attempt, cursor, shown = pinned, None, None
        loop = asyncio.get_running_loop()
        session_checked = loop.time()
        while True:
            if loop.time() - session_checked >= SESSION_CHECK_S:
                session_checked = loop.time()
                fresh, code = await self.session_user(self.user)
                # Logged out, deactivated, new password; or SSO check due (never a user then).
                if code is not None or fresh is None:
                    await self.close(code=code)
                    return
                # Reads go on as the user is now, not as it was at connect: a platform admin
                # demoted since reads only its own teams' jobs (another's is closed with 4404).
                self.user = fresh
            try:
                log = await _read(
                    user=self.user,
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
                await self._send(message)
                await asyncio.sleep(UNAVAILABLE_RETRY_S)
                continue
            except DomainError as exc:  # e.g. an attempt that does not exist (yet)
                if (
                    exc.field == "attempt"
                    and pinned is not None
                    and await self._over(self.user, job_id)
                ):
                    # A finished job gains no attempt: refuse as the REST read does, not wait.
                    await self._send({"type": "error", "field": "attempt", "message": exc.message})
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
                await self._send(failed)
                await asyncio.sleep(UNAVAILABLE_RETRY_S)
                continue
            if log.attempt is not None and log.attempt != shown:
                shown = attempt = log.attempt
                head: LogAttemptPayload = {
                    "type": "log.attempt",
                    "attempt": log.attempt,
                    "attempts": log.job.attempts,
                }
                await self._send(head)
            if log.text:
                chunk: LogPayload = {
                    "type": "log",
                    "attempt": log.attempt or 0,
                    "text": log.text,
                    "truncated": log.truncated,
                }
                await self._send(chunk)
            cursor = log.cursor
            if log.finished and not log.text:
                if pinned is None and log.job.attempts > (log.attempt or 0):
                    attempt, cursor = log.job.attempts, None  # requeued and restarted
                    continue
                if log.job.state in FINAL_STATES or pinned is not None:
                    end: LogEndPayload = {"type": "log.end", "state": log.job.state}
                    await self._send(end)
                    await self.close()
                    return
            if not log.text:
                await asyncio.sleep(POLL_S)
