"""The job page's log socket follows its user's session and teams as the stream socket does: a
logout, a deactivation or a removal from the job's team closes it at once (the user's control
group on the real Redis channel layer), not at its next periodic session check."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from frontend import log_consumer
from gpuplatform.asgi import application
from scheduler import services
from scheduler.loop.cycle import run_cycle
from tenants import teams as team_services
from tests.conftest import use_channel_layer

pytestmark = pytest.mark.django_db(transaction=True)

# Far beyond the test's wait: only the control group's signal can close the socket in time.
PERIODIC_CHECK_S = 120.0
CLOSED_WITHIN_S = 3.0


@pytest.fixture
def running_job(platform, sim_clock, settings, monkeypatch):
    use_channel_layer(settings, "redis")
    monkeypatch.setattr(log_consumer, "POLL_S", 0.1)
    monkeypatch.setattr(log_consumer, "SESSION_CHECK_S", PERIODIC_CHECK_S)
    job = services.job_submit(
        user=platform["alice"],
        request=services.JobRequest(
            name="live-log", team="vision", workers=1, gpus_per_worker=1, simulated_duration_s=600
        ),
    )
    run_cycle()
    return job


def _signed_in(user) -> tuple[str, Client]:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value, client


def _log_socket(job, cookie: str) -> WebsocketCommunicator:
    headers = [
        (b"host", b"testserver"),
        (b"origin", b"http://testserver"),
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
    ]
    return WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", headers=headers)


async def _close_code(socket, timeout: float) -> int | None:
    """The close code the server sends within ``timeout`` (skipping output frames), or None
    while it stays open (checked without timing out a receive: that cancels the app)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await socket.receive_nothing(timeout=0.05, interval=0.01):
            continue
        output = await socket.receive_output(timeout=1)
        if output["type"] == "websocket.close":
            return output.get("code")
    return None


def _log_out(alice, browser, teams, vera):
    browser.post("/logout/")


def _deactivate(alice, browser, teams, vera):
    alice.is_active = False
    alice.save()


def _remove_from_team(alice, browser, teams, vera):
    team_services.membership_remove(user=vera, team=teams["vision"], username="alice")


@pytest.mark.parametrize(
    ("change", "code"),
    [(_log_out, 4401), (_deactivate, 4401), (_remove_from_team, 4404)],
    ids=["logout", "deactivation", "removal"],
)
def test_the_log_socket_closes_at_once_when_its_user_loses_the_right(
    platform, teams, vera, running_job, change, code
):
    """Before: the log socket did not listen to its user's control group, and went on
    streaming the job's output until its next session check (every 5 s)."""
    alice = platform["alice"]
    cookie, browser = _signed_in(alice)
    unrelated_cookie, _ = _signed_in(platform["bob"])  # bob's socket hears none of alice's

    async def scenario():
        socket = _log_socket(running_job, cookie)
        assert (await socket.connect(timeout=5))[0]
        assert (await socket.receive_json_from(timeout=5))["type"] == "log.attempt"
        await database_sync_to_async(change)(alice, browser, teams, vera)
        closed = await _close_code(socket, CLOSED_WITHIN_S)
        await socket.disconnect()
        return closed

    assert async_to_sync(scenario)() == code
    assert log_consumer._open_by_user == {}  # noqa: SLF001  (the user's socket given back)


def test_a_membership_change_that_keeps_the_job_visible_keeps_the_log_socket(
    platform, teams, vera, running_job
):
    """A role change re-checks the socket too; the user may still read the job: it stays open
    and its output goes on."""
    alice = platform["alice"]
    cookie, _ = _signed_in(alice)

    async def scenario():
        socket = _log_socket(running_job, cookie)
        assert (await socket.connect(timeout=5))[0]
        assert (await socket.receive_json_from(timeout=5))["type"] == "log.attempt"
        await database_sync_to_async(team_services.membership_set)(
            user=vera, team=teams["vision"], username="alice", role="admin"
        )
        closed = await _close_code(socket, 1.0)
        await socket.disconnect()
        return closed

    assert async_to_sync(scenario)() is None
