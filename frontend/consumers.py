"""The one websocket endpoint of the portal.

A signed-in user says which topics the page needs (``/ws/stream/?topics=jobs,cluster``, see
``scheduler.streams.TOPICS``; without ``topics``: ``DEFAULT_TOPICS``) and joins the matching
groups it may hear: its own teams' groups for ``jobs``, the shared (anonymised) cluster group
and, for platform admins, the admin group for ``cluster``, the cluster utilization group for
``utilization``. An unknown topic is answered with an error frame and otherwise ignored.
Anonymous connections are refused. The consumer never writes to the database and takes no
commands: it only relays what the loop, the services and ingest publish.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer

from scheduler import streams

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
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if isinstance(self.channel_layer, InMemoryChannelLayer):
            streams.register_server_loop(asyncio.get_running_loop())
        topics, unknown = parse_topics(self.scope.get("query_string", b""))
        self.joined = await _groups_for(user, topics)
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
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

    async def disconnect(self, code):
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # The stream is one-way: clients cannot send commands over it.
        await self.send_json({"type": "error", "message": "this stream is read-only"})

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except ValueError:  # not JSON (or binary): the same answer, not a crash
            await self.receive_json(None)

    async def stream_message(self, event):
        # Serialised once by the publisher, not once per socket.
        await self.send(text_data=event["text"])
