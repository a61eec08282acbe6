"""The one websocket endpoint of the portal.

A signed-in user says which topics the page needs (``/ws/stream/?topics=jobs,cluster``, see
``core.streams.TOPICS``; without ``topics``: ``DEFAULT_TOPICS``) and joins the matching
groups it may hear: its own teams' groups for ``jobs``, the shared (anonymised) cluster group
and, for platform admins, the admin group for ``cluster``, the cluster utilization group for
``utilization``. An unknown topic is answered with an error frame and otherwise ignored.
Anonymous connections are refused. The consumer never writes to the database and takes no
commands: it only relays what the loop, the services and ingest publish, which reach it through
the server loop's hub (``frontend/hub.py``), not through a channel of its own.

Sessions follow membership: every socket also joins its user's control group; a membership
change, a logout or a deactivation there (``frontend/signals.py``), and a timer every
``STREAM_RECHECK_SECONDS`` otherwise, make it read its session and teams again. A socket whose
session ended closes with 4401 (the portal shows "signed out"); one whose teams changed closes
with 4403 and the portal reconnects with the groups it may now hear. From a control group's
re-check request until its answer, what the socket's groups publish is held back (relayed if
the teams are unchanged, dropped with the close otherwise): a removed member hears nothing the
team publishes after the removal. A single sign-on session whose ID token expiry has passed
closes with 4440, on connect and at those checks: only an HTTP request re-checks it with the
provider (``tenants.sso.SessionRefresh``), so the portal loads the page again.

Frames from the client go through ``core.jsonlimits`` (size- and depth-bounded): one too
large closes the socket with 1009, one nested too deep or holding text the platform cannot
store (a NUL, half of a surrogate pair) with 1007; any other frame (JSON or not) is answered
"read-only". However the socket ends, even by an error, it leaves the hub (``__call__``), so the
hub never keeps a dead socket.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import ParamSpec, TypeVar, cast
from urllib.parse import parse_qs

from asgiref.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.contrib.sessions.backends.base import SessionBase

from core import streams
from core.jsonlimits import JsonRefused, loads_bounded
from tenants.permissions import Caller, is_platform_admin, team_ids_of
from tenants.sso import sso_recheck_due

from .hub import hub

log = logging.getLogger(__name__)

MAX_TOPICS_LENGTH = 200
CLOSE_SIGNED_OUT = 4401
CLOSE_PERMISSIONS_CHANGED = 4403
CLOSE_SSO_RECHECK = 4440
CLOSE_TOO_BIG = 1009
CLOSE_BAD_PAYLOAD = 1007
CLOSE_TOO_MANY_SOCKETS = 4429

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def in_worker_thread(
    call: Callable[_Params, _Result], *, thread_sensitive: bool = True
) -> Callable[_Params, Awaitable[_Result]]:
    """``call`` made awaitable by Channels' ``database_sync_to_async`` (which closes the thread's
    stale database connections around it), typed: Channels ships no type information."""
    return cast(
        Callable[_Params, Awaitable[_Result]],
        database_sync_to_async(call, thread_sensitive=thread_sensitive),
    )


def parse_topics(query_string: bytes) -> tuple[list[str], list[str]]:
    """(known topics, unknown ones) of a ``topics=a,b`` query; the defaults when absent, none
    for an empty ``topics=`` (a page that shows nothing live)."""
    query = parse_qs(query_string.decode("latin-1")[:MAX_TOPICS_LENGTH], keep_blank_values=True)
    values = query.get("topics")
    if values is None:
        return list(streams.DEFAULT_TOPICS), []
    asked = [t.strip() for value in values for t in value.split(",") if t.strip()]
    known = [t for t in streams.TOPICS if t in asked]
    unknown = sorted({t for t in asked if t not in streams.TOPICS})
    return known, unknown


def socket_groups(user: Caller, topics: list[str]) -> list[str]:
    """The groups a socket of ``user`` joins for ``topics``: the rules of ``streams.groups_for``
    applied to the user's teams and admin standing now (nothing of any team for an anonymous
    user, whom the consumer refuses before asking)."""
    return streams.groups_for(
        topics=topics, team_ids=team_ids_of(user), is_admin=is_platform_admin(user)
    )


_groups_for = in_worker_thread(socket_groups)


async def _session_user(session_key: str | None) -> tuple[User | AnonymousUser, SessionBase]:
    """The user the session ``session_key`` belongs to now, read afresh from the session store
    (AnonymousUser when the session ended, its user was deactivated or changed password), and
    the session, loaded."""
    engine = import_module(settings.SESSION_ENGINE)
    session: SessionBase = engine.SessionStore(session_key)
    user: User | AnonymousUser = await get_user({"session": session})
    return user, session


# Channels ships no type information: its consumer base class is Any to mypy.
class ReadOnlySocket(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """What every portal websocket shares: clients send nothing useful (a frame is answered
    "read-only"), frames go through the bounded JSON reader (too large: 1009, too deep: 1007),
    :meth:`cleanup` runs however the socket ends (even when a handler raised), and
    :meth:`session_user` reads the socket's user afresh from its session."""

    # No channel-layer channel: nothing reads one (the stream socket hears its groups through
    # the hub, the log socket reads the job's backend), and the base class would open one per
    # socket and keep a receive waiting on it for the socket's life. A socket that ever takes
    # messages from the layer sets the alias back.
    channel_layer_alias = None

    async def __call__(
        self,
        scope: Scope,
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
    ) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.cleanup()

    async def cleanup(self) -> None:
        """Release what the socket holds. Idempotent; called on every way out."""

    async def disconnect(self, code: int) -> None:
        await self.cleanup()

    def remember_session(self, user: User) -> None:
        self.user_id = user.pk
        session = self.scope.get("session")
        self.session_key: str | None = getattr(session, "session_key", None)

    async def session_user(self, fallback: User | None) -> tuple[User | None, int | None]:
        """``(user, None)``: the socket's user as the session store and the database say now (so
        a platform admin unticked since the socket opened reads as one no more); or ``(None,
        code)`` to close with: 4401 when the session no longer signs that user in (logged out,
        deactivated, new password), 4440 when its single sign-on check with the provider is
        due. A database hiccup answers ``(fallback, None)``: the next check decides."""
        try:
            user, session = await _session_user(self.session_key)
        except Exception:
            log.warning("websocket session check failed", exc_info=True)
            return fallback, None
        if not user.is_authenticated or user.pk != self.user_id:
            return None, CLOSE_SIGNED_OUT
        if sso_recheck_due(session):  # no I/O: get_user has loaded the session
            return None, CLOSE_SSO_RECHECK
        return user, None

    async def refuse(self, code: int) -> None:
        """On connect: close with ``code``. Accepted first: a refused handshake shows the browser
        1006 (the server answers it with an HTTP 403), not the code, and the portal would only
        reconnect into the same refusal instead of signing in again or stopping."""
        await self.accept()
        await self.close(code=code)

    async def closed_for_sso_recheck(self) -> bool:
        """On connect: close (4440) a single sign-on session whose check with the provider is
        due, and say so."""
        if not sso_recheck_due(self.scope["session"]):
            return False
        await self.refuse(CLOSE_SSO_RECHECK)
        return True

    @classmethod
    async def decode_json(cls, text_data: str) -> object:
        return loads_bounded(text_data, max_bytes=settings.WEBSOCKET_FRAME_MAX_BYTES)

    async def receive_json(self, content: object, **kwargs: object) -> None:
        # One-way streams: clients cannot send commands over them.
        await self.send_json({"type": "error", "message": "this stream is read-only"})

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: object
    ) -> None:
        data = text_data if text_data is not None else bytes_data
        if data is not None and len(data) > settings.WEBSOCKET_FRAME_MAX_BYTES:
            await self.close(code=CLOSE_TOO_BIG)
            return
        if text_data is None:  # binary: the same answer as any other frame, not a crash
            await self.receive_json(None)
            return
        try:
            content = await self.decode_json(text_data)
        except JsonRefused as exc:
            # Plain text, or JSON with NaN or 1e400 in it: the same answer as any other frame.
            if exc.reason in ("syntax", "number"):
                await self.receive_json(None)
                return
            await self.close(code=CLOSE_TOO_BIG if exc.reason == "size" else CLOSE_BAD_PAYLOAD)
            return
        await self.receive_json(content)


_stream_sockets_by_user: dict[int, int] = {}


class StreamConsumer(ReadOnlySocket):
    # No channel of its own (ReadOnlySocket): the server loop's hub listens on the channel layer
    # for every socket and pushes each message's text into this socket's queue (frontend/hub.py).
    QUEUE_MAX = 1000

    async def connect(self) -> None:
        user: User | AnonymousUser | None = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(CLOSE_SIGNED_OUT)
            return
        if await self.closed_for_sso_recheck():
            return
        # Unbounded, one signed-in user could open sockets until the server process, which
        # every team's sockets share, ran out (each costs a task, a place in the hub and a
        # database check a minute). Counted before the first await below (sockets opened
        # together must not all pass), given back by cleanup however the socket ends.
        if _stream_sockets_by_user.get(user.pk, 0) >= settings.STREAM_MAX_SOCKETS_PER_USER:
            await self.refuse(CLOSE_TOO_MANY_SOCKETS)
            return
        self.counted: int | None = user.pk
        _stream_sockets_by_user[user.pk] = _stream_sockets_by_user.get(user.pk, 0) + 1
        self.remember_session(user)
        self.topics, unknown = parse_topics(self.scope.get("query_string", b""))
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=self.QUEUE_MAX)
        self.live, self.recheck_due = False, False
        # Content heard while a check asked for by the control group runs (None: none runs),
        # and how many such checks were asked for (see control()).
        self.held: list[str] | None = None
        self.checks_asked = 0
        self.hub = hub()
        # The user's control group first, then the teams: a membership change that commits
        # after the teams are read announces itself to this socket (checked once it is live),
        # and one that committed before is in what is read. (Read first, a removal committing
        # in between was announced to a group this socket was not in yet, and it joined the
        # team's group with rights already gone.)
        self.joined = [streams.user_group(user.pk)]
        if self.hub is not None:
            await self.hub.join(self, self.joined)
        self.content_groups = await _groups_for(user, self.topics)
        self.joined += self.content_groups
        # Joined before the hello: whatever is published after it reaches this socket (the
        # portal re-reads its state on hello), queued until the writer starts below.
        if self.hub is not None:
            await self.hub.join(self, self.content_groups)
        await self.accept()
        await self.send_json(
            {"type": "hello", "groups": len(self.content_groups), "topics": self.topics}
        )
        if unknown:
            await self.send_json(
                {
                    "type": "error",
                    "field": "topics",
                    "message": f"unknown topic(s): {', '.join(unknown)[:100]}; "
                    f"known: {', '.join(streams.TOPICS)}",
                }
            )
        loop = asyncio.get_running_loop()
        self.writer = loop.create_task(self._write())
        self.rechecker = loop.create_task(self._recheck_periodically())
        self.live = True
        if self.recheck_due:  # announced while connecting
            loop.create_task(self.recheck())

    def push(self, text: str) -> None:
        """Called by the hub for each message of this socket's groups."""
        if self.held is not None:  # a check is running: its answer says whether this may go
            if len(self.held) >= self.QUEUE_MAX:
                self._close_soon(4408)
            else:
                self.held.append(text)
            return
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:  # the client stopped reading: let it reconnect and resync
            self._close_soon(4408)

    def control(self, text: str) -> None:
        """Called by the hub for a message of this user's control group.

        Content heard from now on is held until the check answers. The change that asked for
        it (a removal from a team) committed before this message was published, and anything
        the team published after it may be for members only: relayed while the check read the
        database, a removed member heard the team's next jobs before the socket closed."""
        if streams.RECHECK_SESSIONS in text:
            self.checks_asked += 1
            if self.held is None:
                self.held = []
            if not self.live:  # still connecting: checked once connect has finished
                self.recheck_due = True
                return
            asyncio.get_running_loop().create_task(self.recheck())

    def _close_soon(self, code: int) -> None:
        if not getattr(self, "closing", False):
            self.closing = True
            asyncio.get_running_loop().create_task(self.close(code=code))

    async def recheck(self) -> None:
        """Close when the session ended (4401), its single sign-on check is due (4440) or the
        teams it may hear changed (4403); otherwise relay the content held meanwhile, if no
        newer check was asked for since this one started (its reads may predate that change:
        the newer check decides)."""
        if getattr(self, "closing", False):
            return
        asked = self.checks_asked
        user, code = await self.session_user(None)
        if code is not None:
            self._close_soon(code)
            return
        if user is None:  # a database hiccup (logged)
            self._undecided()
            return
        try:
            groups = await _groups_for(user, self.topics)
        except Exception:  # a database hiccup, likewise
            log.warning("stream session check failed", exc_info=True)
            self._undecided()
            return
        if sorted(groups) != sorted(self.content_groups):
            self._close_soon(CLOSE_PERMISSIONS_CHANGED)
        elif self.checks_asked == asked:
            self._release_held()

    def _undecided(self) -> None:
        """A check that could not read the database. Without content held (a periodic check),
        keep the socket: the next check decides. With content held, a change was announced that
        could not be checked: close (4403) so the portal reconnects with the groups it may
        hear now and re-reads its state, rather than relay what may not be this user's."""
        if self.held is not None:
            self._close_soon(CLOSE_PERMISSIONS_CHANGED)

    def _release_held(self) -> None:
        held, self.held = self.held, None
        for text in held or ():
            self.push(text)

    async def _recheck_periodically(self) -> None:
        """The backstop for changes no signal announces (an expired session, a row changed in
        a database shell): check again every ``STREAM_RECHECK_SECONDS``, jittered."""
        period = settings.STREAM_RECHECK_SECONDS
        while True:
            await asyncio.sleep(period * random.uniform(0.8, 1.2))
            await self.recheck()

    async def _write(self) -> None:
        try:
            while True:
                await self.send(text_data=await self.queue.get())
        except asyncio.CancelledError:
            raise
        except Exception:  # the socket went away under us; disconnect cleans up
            return

    async def cleanup(self) -> None:
        await self._leave()
        counted, self.counted = getattr(self, "counted", None), None
        if counted is not None:
            left = _stream_sockets_by_user.get(counted, 1) - 1
            if left > 0:
                _stream_sockets_by_user[counted] = left
            else:
                _stream_sockets_by_user.pop(counted, None)

    async def _leave(self) -> None:
        """Leave the hub and stop this socket's tasks. Idempotent."""
        socket_hub, self.hub = getattr(self, "hub", None), None
        if socket_hub is not None:
            await socket_hub.leave(self, self.joined)
        for name in ("writer", "rechecker"):
            task = getattr(self, name, None)
            if task is not None:
                task.cancel()

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        # Out of the hub at once: a socket being closed is pushed nothing more.
        await self._leave()
        await super().close(code=code, reason=reason)
