"""The one websocket endpoint of the portal.

A signed-in user joins the groups of the teams they belong to, the shared (anonymised) cluster
group, and the admin group if they are a platform admin. Anonymous connections are refused. The
consumer never writes to the database: it only relays what the loop and ingest publish.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from scheduler import streams


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
