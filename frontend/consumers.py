"""The one websocket endpoint of the portal.

A signed-in user says which topics the page needs (``/ws/stream/?topics=jobs,cluster``, see
``scheduler.streams.TOPICS``; without ``topics``: ``DEFAULT_TOPICS``) and joins the matching
groups it may hear: its own teams' groups for ``jobs``, the shared (anonymised) cluster group
and, for platform admins, the admin group for ``cluster``, the cluster utilization group for
``utilization``. An unknown topic is answered with an error frame and otherwise ignored.
Anonymous connections are refused. The consumer never writes to the database and takes no
commands: it only relays what the loop, the services and ingest publish, which reach it through
the server loop's hub (``frontend/hub.py``), not through a channel of its own.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from scheduler import streams

from .hub import hub

MAX_TOPICS_LENGTH = 200


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


@database_sync_to_async
def _groups_for(user, topics: list[str]) -> list[str]:
    from tenants.permissions import is_platform_admin, team_ids_of

    return streams.groups_for(
        topics=topics, team_ids=team_ids_of(user), is_admin=is_platform_admin(user)
    )


class StreamConsumer(AsyncJsonWebsocketConsumer):
    # No channel of its own: the server loop's hub listens on the channel layer for every socket
    # and pushes each message's text into this socket's queue (frontend/hub.py).
    channel_layer_alias = None
    QUEUE_MAX = 1000

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        topics, unknown = parse_topics(self.scope.get("query_string", b""))
        self.joined = await _groups_for(user, topics)
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=self.QUEUE_MAX)
        self.hub = hub()
        # Joined before the hello: whatever is published after it reaches this socket (the
        # portal re-reads its state on hello), queued until the writer starts below.
        if self.hub is not None:
            await self.hub.join(self, self.joined)
        await self.accept()
        await self.send_json({"type": "hello", "groups": len(self.joined), "topics": topics})
        if unknown:
            await self.send_json(
                {
                    "type": "error",
                    "field": "topics",
                    "message": f"unknown topic(s): {', '.join(unknown)[:100]}; "
                    f"known: {', '.join(streams.TOPICS)}",
                }
            )
        self.writer = asyncio.get_running_loop().create_task(self._write())

    def push(self, text: str) -> None:
        """Called by the hub for each message of this socket's groups."""
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:  # the client stopped reading: let it reconnect and resync
            if not getattr(self, "closing", False):
                self.closing = True
                asyncio.get_running_loop().create_task(self.close(code=4408))

    async def _write(self) -> None:
        try:
            while True:
                await self.send(text_data=await self.queue.get())
        except asyncio.CancelledError:
            raise
        except Exception:  # the socket went away under us; disconnect cleans up
            return

    async def disconnect(self, code):
        if getattr(self, "hub", None) is not None:
            await self.hub.leave(self, self.joined)
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.cancel()

    async def receive_json(self, content, **kwargs):
        # The stream is one-way: clients cannot send commands over it.
        await self.send_json({"type": "error", "message": "this stream is read-only"})

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except ValueError:  # not JSON (or binary): the same answer, not a crash
            await self.receive_json(None)
