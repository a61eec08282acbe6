"""Websocket permission rules, through the real ASGI stack (origin check, session auth, the
consumer): anonymous sockets are refused; team B hears nothing of team A's jobs while team A's
members and viewers do; viewers and other teams cannot act over the socket; the groups a socket
joins follow the consumer's own rule (``socket_groups``)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.test import Client

from core import streams
from frontend.consumers import socket_groups
from gpuplatform.asgi import application
from scheduler import services
from scheduler.models import Job
from scheduler.states import JobState
from tenants import permissions

pytestmark = pytest.mark.django_db(transaction=True)


def _headers(user=None) -> list[tuple[bytes, bytes]]:
    """Handshake headers of a browser on the portal, signed in as ``user`` (sync: it writes the
    session)."""
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return headers


def _socket(headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/stream/", headers=headers)


def _submit(user, team="vision") -> Job:
    return services.job_submit(
        user=user,
        request=services.JobRequest(name="ws-secret-job", team=team, workers=1, gpus_per_worker=1),
    )


async def _connect(headers):
    socket = _socket(headers)
    connected, _ = await socket.connect()
    assert connected
    hello = await socket.receive_json_from(timeout=2)
    assert hello["type"] == "hello"
    return socket


async def _drain_for(socket, job_id: int, timeout: float = 1.0) -> list[dict]:
    """Messages about ``job_id`` that arrive within ``timeout``."""
    seen = []
    while not await socket.receive_nothing(timeout=timeout):
        message = await socket.receive_json_from(timeout=timeout)
        if message.get("job") == job_id:
            seen.append(message)
    return seen


def test_anonymous_socket_is_refused(platform):
    async def scenario():
        socket = _socket(_headers(None))
        connected, _ = await socket.connect()
        if connected:  # accepted then closed: must close at once with nothing sent
            assert (await socket.receive_output(timeout=1))["type"] == "websocket.close"
        await socket.disconnect()

    async_to_sync(scenario)()


def test_team_b_hears_nothing_of_team_a(platform):
    alice = platform["alice"]
    headers = {name: _headers(platform[name]) for name in ("alice", "bob", "charlie")}

    async def scenario():
        sockets = {name: await _connect(h) for name, h in headers.items()}
        from channels.db import database_sync_to_async

        job = await database_sync_to_async(_submit)(alice)
        heard = {name: await _drain_for(s, job.pk, timeout=0.5) for name, s in sockets.items()}
        for socket in sockets.values():
            await socket.disconnect()
        return job, heard

    job, heard = async_to_sync(scenario)()
    assert [m["state"] for m in heard["alice"]] == ["pending"]
    assert [m["team"] for m in heard["charlie"]] == ["vision"]  # viewers read
    assert heard["bob"] == []


def test_viewers_and_other_teams_cannot_send_commands(platform):
    job = _submit(platform["alice"])
    headers = {name: _headers(platform[name]) for name in ("charlie", "bob")}

    async def scenario():
        replies = {}
        for name, h in headers.items():
            socket = await _connect(h)
            for command in (
                {"type": "job.cancel", "job": job.pk},
                {"type": "cancel", "job_id": job.pk},
                {"action": "cancel", "id": job.pk, "team": "vision"},
            ):
                await socket.send_json_to(command)
                replies.setdefault(name, []).append(await socket.receive_json_from(timeout=2))
            await socket.disconnect()
        return replies

    replies = async_to_sync(scenario)()
    for name, answers in replies.items():
        for answer in answers:
            assert answer["type"] == "error", (name, answer)
            assert "ws-secret-job" not in str(answer)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.events.filter(kind="cancelled").count() == 0


def test_the_groups_a_socket_joins(platform, teams):
    """The rules the consumer applies on connect and on every re-check (``socket_groups`` ->
    ``streams.groups_for``): members and viewers join their team's group for ``jobs``, another
    team does not; the admin group only for platform admins asking for ``cluster``; the
    utilization group only when asked for."""
    alice, bob, charlie, admin = (platform[k] for k in ("alice", "bob", "charlie", "admin"))
    vision = streams.team_group(teams["vision"].pk)
    defaults = list(streams.DEFAULT_TOPICS)
    assert vision in socket_groups(alice, defaults)
    assert vision in socket_groups(charlie, defaults)  # a viewer reads
    assert vision not in socket_groups(bob, defaults)  # another team
    assert streams.ADMIN_GROUP not in socket_groups(alice, defaults)
    assert streams.ADMIN_GROUP in socket_groups(admin, defaults)
    assert streams.UTILIZATION_GROUP not in socket_groups(alice, defaults)
    assert socket_groups(alice, ["utilization"]) == [streams.UTILIZATION_GROUP]
    assert socket_groups(alice, ["jobs"]) == [
        streams.team_group(pk) for pk in sorted(permissions.team_ids_of(alice))
    ]
    assert socket_groups(admin, ["jobs"]) == []  # no team of their own: admins hear admin only
    assert socket_groups(AnonymousUser(), list(streams.TOPICS)) == [
        streams.CLUSTER_GROUP,
        streams.UTILIZATION_GROUP,
    ]
