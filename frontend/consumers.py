"""The one websocket endpoint of the portal.

A signed-in user joins the groups of the teams they belong to, the shared (anonymised) cluster
group, and the admin group if they are a platform admin. Anonymous connections are refused. The
consumer never writes to the database: it only relays what the loop and ingest publish.
"""

from __future__ import annotations

import asyncio
import weakref

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer

from scheduler import streams

# How often the server's event loop is woken while it uses the in-memory layer (see below).
WAKE_INTERVAL_S = 0.2
_wakers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _keep_loop_responsive(layer) -> None:
    """With the in-memory channel layer (the embedded demo), the scheduling loop publishes from
    its own thread: the message lands in this loop's queue, but nothing wakes this loop, so it
    would be delivered only at the server's next unrelated I/O (seconds, or never when idle).
    A tick on this loop makes it pick such messages up within WAKE_INTERVAL_S. Redis layers do
    not need it. One ticker per event loop, for the life of the loop."""
    if not isinstance(layer, InMemoryChannelLayer):
        return
    loop = asyncio.get_running_loop()
    if loop in _wakers:
        return

    async def tick() -> None:
        while True:
            await asyncio.sleep(WAKE_INTERVAL_S)

    _wakers[loop] = loop.create_task(tick())


@database_sync_to_async
def _groups_for(user) -> list[str]:
    from tenants.permissions import is_platform_admin, team_ids_of

    groups = [streams.team_group(team_id) for team_id in sorted(team_ids_of(user))]
    groups.append(streams.CLUSTER_GROUP)
    if is_platform_admin(user):
        groups.append(streams.ADMIN_GROUP)
    return groups


class StreamConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        _keep_loop_responsive(self.channel_layer)
        self.joined = await _groups_for(user)
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello", "groups": len(self.joined)})

    async def disconnect(self, code):
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # The stream is one-way: clients cannot send commands over it.
        await self.send_json({"type": "error", "message": "this stream is read-only"})

    async def stream_message(self, event):
        await self.send_json(event["payload"])
