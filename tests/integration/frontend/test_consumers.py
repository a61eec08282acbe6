"""The websocket endpoint: who may connect, which groups they hear, and that one team never hears
another team's jobs (driven with Channels' WebsocketCommunicator through the real ASGI stack)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.utils import timezone

from core import streams
from gpuplatform.asgi import application
from policyversions import whatif_runs
from scheduler import services
from scheduler.models import Allocation
from tests.conftest import refused_with

pytestmark = pytest.mark.django_db(transaction=True)


def _session_cookie(user) -> str:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def _communicator(user=None, path: str = "/ws/stream/") -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    if user is not None:
        headers.append((b"cookie", _session_cookie(user).encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def _connect(communicator) -> dict:
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return await communicator.receive_json_from(timeout=5)


async def _drain(communicator) -> list[dict]:
    """Every payload that arrives within a short quiet period."""
    frames = []
    while not await communicator.receive_nothing(timeout=0.3):
        frames.append(await communicator.receive_json_from(timeout=1))
    return frames


def _submit(user, team: str, name: str):
    return services.job_submit(
        user=user,
        request=services.JobRequest(name=name, team=team, workers=1, gpus_per_worker=1),
    )


def test_anonymous_connection_is_refused(platform):
    communicator = _communicator()

    async def run():
        assert await refused_with(communicator) == 4401
        await communicator.disconnect()

    async_to_sync(run)()


def test_members_hear_their_team_and_never_another_teams_jobs(platform):
    alice, bob = platform["alice"], platform["bob"]

    alice_ws, bob_ws = _communicator(alice), _communicator(bob)

    async def run():
        assert (await _connect(alice_ws))["type"] == "hello"
        assert (await _connect(bob_ws))["type"] == "hello"

        await database_sync(lambda: _submit(alice, "vision", "alice-secret-vit"))()
        alice_frames = await _drain(alice_ws)
        bob_frames = await _drain(bob_ws)

        assert [f["name"] for f in alice_frames if f["type"] == "job.status"] == [
            "alice-secret-vit"
        ]
        assert alice_frames[0]["state"] == "pending" and alice_frames[0]["team"] == "vision"
        # Bob hears nothing at all of it: no frame mentions the job, its name or its team.
        assert all(f.get("type") != "job.status" for f in bob_frames)
        assert "alice-secret-vit" not in repr(bob_frames)

        await database_sync(lambda: _submit(bob, "nlp", "bob-llm"))()
        assert [f["name"] for f in await _drain(bob_ws) if f["type"] == "job.status"] == ["bob-llm"]
        assert await _drain(alice_ws) == []
        await alice_ws.disconnect()
        await bob_ws.disconnect()

    async_to_sync(run)()


def test_only_admins_hear_node_events_and_everyone_hears_the_cluster(platform):
    alice, admin = platform["alice"], platform["admin"]
    node = platform["cluster"].nodes.get(name="n1")

    job = _submit(alice, "vision", "alice-secret-vit")
    Allocation.objects.create(job=job, node=node, gpu_index=2, started_at=timezone.now())

    alice_ws, admin_ws = _communicator(alice), _communicator(admin)

    async def run():
        await _connect(alice_ws)
        await _connect(admin_ws)
        await database_sync(
            lambda: services.node_quarantine(user=admin, node_id=node.pk, reason="xid 79")
        )()
        admin_types = {f["type"] for f in await _drain(admin_ws)}
        alice_frames = await _drain(alice_ws)
        assert {"node.event", "node.status"} <= admin_types
        assert {f["type"] for f in alice_frames} == {"node.status"}
        assert alice_frames[0]["node"] == "n1" and alice_frames[0]["state"] == "quarantined"
        # Which GPUs are busy, never whose: another team's job name is not in the frame.
        assert alice_frames[0]["gpus"] == {str(i): "in use" if i == 2 else "free" for i in range(8)}
        assert "alice-secret-vit" not in repr(alice_frames)
        await alice_ws.disconnect()
        await admin_ws.disconnect()

    async_to_sync(run)()


def test_cluster_group_payloads_reach_everyone_but_team_payloads_only_the_team(platform):
    alice, bob = platform["alice"], platform["bob"]
    vision = platform["alice"].memberships.get().team

    alice_ws, bob_ws = _communicator(alice), _communicator(bob)

    async def run():
        await _connect(alice_ws)
        await _connect(bob_ws)
        layer_send = database_sync(
            lambda group, payload: streams._send(group, payload)  # noqa: SLF001
        )
        await layer_send(
            streams.CLUSTER_GROUP,
            {"type": "node.status", "node": "n1", "state": "ready", "gpus": {}, "time": "t"},
        )
        await layer_send(
            streams.team_group(vision.pk),
            {"type": "job.status", "job": 1, "name": "x", "state": "running"},
        )
        assert [f["type"] for f in await _drain(alice_ws)] == ["node.status", "job.status"]
        assert [f["type"] for f in await _drain(bob_ws)] == ["node.status"]
        await alice_ws.disconnect()
        await bob_ws.disconnect()

    async_to_sync(run)()


def test_the_stream_is_read_only(platform):
    ws = _communicator(platform["alice"])

    async def run():
        await _connect(ws)
        await ws.send_json_to({"type": "job.cancel", "job": 1})
        reply = await ws.receive_json_from(timeout=5)
        assert reply["type"] == "error"
        await ws.disconnect()

    async_to_sync(run)()


def database_sync(fn):
    from channels.db import database_sync_to_async

    return database_sync_to_async(fn)


def test_only_admins_hear_whatif_progress_even_when_they_ask(platform):
    """A member may ask for the ``whatif`` topic; the socket opens (the topic is known) but joins
    nothing for it, so a replay's progress reaches the admin only."""
    alice, admin = platform["alice"], platform["admin"]
    path = "/ws/stream/?topics=whatif"
    alice_ws, admin_ws = _communicator(alice, path), _communicator(admin, path)

    async def run():
        await _connect(alice_ws)
        await _connect(admin_ws)
        run = await database_sync(
            lambda: whatif_runs.whatif_run_start(user=admin, window_days=1, candidates={"a": {}})
        )()
        admin_frames = [f for f in await _drain(admin_ws) if f["type"] == "whatif.progress"]
        assert admin_frames and admin_frames[-1]["run"] == run.pk
        assert await _drain(alice_ws) == []
        await alice_ws.disconnect()
        await admin_ws.disconnect()

    async_to_sync(run)()
