"""One channel-layer listener per server event loop for all of its websockets.

Why: with a channel per socket, every group message is queued, woken up and dispatched once per
socket inside the channel layer (channels_redis runs a lock hand-off and two tasks per socket per
message), which made fan-out to 1,000 sockets CPU-bound. Here the loop's hub joins each group
once, receives each message once, and puts its (already serialised) text into the queue of every
local socket of that group; each socket's own writer sends it, so one slow client cannot stall
the others.

Guarantees: a socket gets the messages of exactly the groups it joined, in the order the hub
received them. A socket whose queue is full (a client that stopped reading) is closed with code
4408; the portal reconnects and re-reads its state. The hub stops (and leaves its groups) when its
last socket leaves. Group membership is refreshed hourly, well inside the layer's group expiry.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Protocol

from channels.layers import InMemoryChannelLayer, get_channel_layer

from core import streams

log = logging.getLogger(__name__)

REFRESH_GROUPS_S = 3600.0


class ChannelLayer(Protocol):
    """The part of a Channels layer the hub uses (Channels ships no type information)."""

    async def new_channel(self) -> str: ...
    async def group_add(self, group: str, channel: str) -> None: ...
    async def group_discard(self, group: str, channel: str) -> None: ...
    # A layer message is whatever its sender published: the hub reads "text" and "group".
    async def receive(self, channel: str) -> dict[str, Any]: ...


class Member(Protocol):
    """A local socket the hub delivers to: ``push`` relays text to the browser, ``control``
    handles a message meant for the socket itself."""

    def push(self, text: str) -> None: ...
    def control(self, text: str) -> None: ...


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def hub() -> Hub | None:
    """The running loop's hub (created on first use); None without a channel layer."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        layer = get_channel_layer()
        if layer is None:
            return None
        if isinstance(layer, InMemoryChannelLayer):
            # Publications from other threads (the demo's loop) are handed to this loop.
            streams.register_server_loop(loop)
        found = _hubs[loop] = Hub(layer)
    return found


class Hub:
    def __init__(self, layer: ChannelLayer) -> None:
        self.layer = layer
        self.members: dict[str, set[Member]] = {}
        self.channel: str | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.lock = asyncio.Lock()

    async def join(self, socket: Member, groups: list[str]) -> None:
        if not groups:
            return
        async with self.lock:
            if self.channel is None:
                self.channel = await self.layer.new_channel()
                loop = asyncio.get_running_loop()
                self.tasks = [
                    loop.create_task(self._receive(self.channel)),
                    loop.create_task(self._refresh(self.channel)),
                ]
            for group in groups:
                members = self.members.setdefault(group, set())
                if not members:
                    await self.layer.group_add(group, self.channel)
                members.add(socket)

    async def leave(self, socket: Member, groups: list[str]) -> None:
        async with self.lock:
            channel = self.channel
            if channel is None:  # nothing joined since the hub last emptied: no group to leave
                return
            for group in groups:
                members = self.members.get(group)
                if members is None:
                    continue
                members.discard(socket)
                if not members:
                    del self.members[group]
                    await self.layer.group_discard(group, channel)
            if not self.members:
                for task in self.tasks:
                    task.cancel()
                self.tasks, self.channel = [], None

    async def _receive(self, channel: str) -> None:
        while True:
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # a channel-layer outage: keep trying, do not kill the sockets
                log.warning("stream hub could not receive; retrying", exc_info=True)
                await asyncio.sleep(1)
                continue
            text, group = message.get("text"), message.get("group", "")
            if text is None:
                continue
            if group and group.startswith(streams.USER_GROUP_PREFIX):
                # Control for that user's sockets; never relayed to the browser.
                for socket in tuple(self.members.get(group, ())):
                    socket.control(text)
                continue
            for socket in tuple(self.members.get(group, ())):
                socket.push(text)

    async def _refresh(self, channel: str) -> None:
        while True:
            await asyncio.sleep(REFRESH_GROUPS_S)
            for group in tuple(self.members):
                try:
                    await self.layer.group_add(group, channel)
                except Exception:
                    log.warning("stream hub could not refresh group %s", group, exc_info=True)
