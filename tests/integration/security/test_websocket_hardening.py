"""The websocket against hostile clients and changing rights (issue 26, findings 4, 5 and 11),
through the real ASGI stack (origin check, sessions, the consumer, the hub, the channel layer):

- a frame nested 5,000 deep or larger than the frame limit closes the socket cleanly, and the
  socket leaves the per-process hub (no leak however often it is tried);
- the Origin must be the portal's own scheme, host and port (or a trusted origin);
- removing a member, logging out or deactivating a user closes that user's sockets within
  seconds, and a removed member hears nothing more of the team.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from frontend import hub as hubs
from gpuplatform.asgi import application
from scheduler import services
from tenants import teams as team_services

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = b"http://testserver"


def _cookie(user) -> tuple[str, Client]:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value, client


def _socket(cookie=None, origin=ORIGIN, host=b"testserver") -> WebsocketCommunicator:
    headers = [(b"host", host)]
    if origin is not None:
        headers.append((b"origin", origin))
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(application, "/ws/stream/?topics=jobs", headers=headers)


async def _open(socket) -> None:
    connected, _ = await socket.connect(timeout=5)
    assert connected
    assert (await socket.receive_json_from(timeout=5))["type"] == "hello"


async def _closed_with(socket, timeout: float = 5.0) -> int:
    """The close code the server sends within ``timeout`` (skipping data frames)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, "the socket was not closed"
        output = await socket.receive_output(timeout=left)
        if output["type"] == "websocket.close":
            return output.get("code")


def _members_of_hub() -> int:
    found = hubs._hubs.get(asyncio.get_running_loop())  # noqa: SLF001
    if found is None:
        return 0
    return len({socket for members in found.members.values() for socket in members})


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("[" * 5000 + "]" * 5000, 1007),
        ('{"a":' * 100 + "1" + "}" * 100, 1007),
        ("x" * 70_000, 1009),
        # A lone surrogate is no UTF-8 (only a harness can send one): counting the frame's
        # bytes raised UnicodeEncodeError and killed the consumer.
        ("\ud800", 1007),
        ('{"a": "\udc00"}', 1007),
    ],
)
def test_hostile_frames_close_the_socket_and_leave_the_hub(platform, frame, code):
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        for _attempt in range(5):  # before the fix each attempt left a dead socket in the hub
            socket = _socket(cookie)
            await _open(socket)
            assert _members_of_hub() == 1
            await socket.send_to(text_data=frame)
            assert await _closed_with(socket) == code
            await asyncio.sleep(0.05)
            assert _members_of_hub() == 0
        # The hub still serves the next socket.
        socket = _socket(cookie)
        await _open(socket)
        await socket.send_to(text_data="hello?")
        assert (await socket.receive_json_from(timeout=5))["type"] == "error"
        await socket.disconnect()

    async_to_sync(scenario)()


def test_one_user_holds_a_bounded_number_of_stream_sockets(platform, settings):
    """Stream sockets had no bound: one signed-in user could open them until the server process
    that every team's sockets share gave out. Over the bound: 4429; another user is not
    affected, and a socket closed (however it ends) frees its place."""
    settings.STREAM_MAX_SOCKETS_PER_USER = 3
    alice_cookie, _ = _cookie(platform["alice"])
    bob_cookie, _ = _cookie(platform["bob"])

    async def scenario():
        opened = []
        for _ in range(settings.STREAM_MAX_SOCKETS_PER_USER):
            socket = _socket(alice_cookie)
            await _open(socket)
            opened.append(socket)
        over = _socket(alice_cookie)
        assert (await over.connect(timeout=5))[0]  # refusals accept, then close with a code
        first = await over.receive_output(timeout=5)
        refused = first.get("code") if first["type"] == "websocket.close" else first
        bob = _socket(bob_cookie)
        await _open(bob)
        await opened.pop().disconnect()
        await asyncio.sleep(0.05)
        again = _socket(alice_cookie)
        await _open(again)
        for socket in [*opened, bob, again]:
            await socket.disconnect()
        return refused

    assert async_to_sync(scenario)() == 4429


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (b"http://testserver", True),
        (b"http://testserver:9999", False),  # another port
        (b"https://testserver", False),  # another scheme (the socket is plain ws)
        (b"http://evil.example", False),
        (None, False),
        (b"https://portal.example.com", True),  # a trusted origin (behind a TLS proxy)
    ],
)
def test_the_origin_must_match_scheme_host_and_port(platform, settings, origin, allowed):
    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example.com"]
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = _socket(cookie, origin=origin)
        connected, _ = await socket.connect(timeout=5)
        await socket.disconnect()
        return connected

    assert async_to_sync(scenario)() is allowed


def test_a_host_outside_allowed_hosts_is_refused(platform):
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = _socket(cookie, origin=b"http://evil.example", host=b"evil.example")
        connected, _ = await socket.connect(timeout=5)
        return connected

    assert async_to_sync(scenario)() is False


def test_a_removed_member_is_cut_off_within_seconds(platform, teams, vera):
    alice = platform["alice"]
    cookie, _ = _cookie(alice)

    async def scenario():
        socket = _socket(cookie)
        await _open(socket)
        await database_sync_to_async(team_services.membership_remove)(
            user=vera, team=teams["vision"], username="alice"
        )
        code = await _closed_with(socket, timeout=5)
        # Reconnecting (as the portal does) joins no group of vision any more.
        again = _socket(cookie)
        connected, _ = await again.connect(timeout=5)
        assert connected
        hello = await again.receive_json_from(timeout=5)
        await database_sync_to_async(services.job_submit)(
            user=vera,
            request=services.JobRequest(
                name="vision-secret", team="vision", workers=1, gpus_per_worker=1
            ),
        )
        heard = []
        while not await again.receive_nothing(timeout=0.5):
            heard.append(await again.receive_json_from(timeout=1))
        await again.disconnect()
        return code, hello, heard

    code, hello, heard = async_to_sync(scenario)()
    assert code == 4403
    assert hello["groups"] == 0
    assert "vision-secret" not in repr(heard)


def test_a_removed_member_hears_nothing_of_the_team_before_the_socket_closes(platform, teams, vera):
    """The removal's session.recheck reaches the socket first, the team's next job update right
    after it. The socket went on relaying the team's messages while it re-read its session and
    teams from the database, so the removed member heard the job submitted after the removal
    before the close (4403) came."""
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = _socket(cookie)
        await _open(socket)

        def remove_then_submit():
            team_services.membership_remove(user=vera, team=teams["vision"], username="alice")
            services.job_submit(
                user=vera,
                request=services.JobRequest(
                    name="vision-after-removal", team="vision", workers=1, gpus_per_worker=1
                ),
            )

        await database_sync_to_async(remove_then_submit)()
        heard = []
        while True:
            output = await socket.receive_output(timeout=5)
            if output["type"] == "websocket.close":
                return output.get("code"), heard
            heard.append(output.get("text"))

    code, heard = async_to_sync(scenario)()
    assert code == 4403
    assert "vision-after-removal" not in repr(heard)


def test_a_membership_change_that_keeps_the_teams_holds_nothing_back(platform, teams, vera):
    """The content held while the check runs goes out once it finds the same teams: a role
    change loses no job update and keeps the socket open."""
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = _socket(cookie)
        await _open(socket)

        def promote_then_submit():
            team_services.membership_set(
                user=vera, team=teams["vision"], username="alice", role="admin"
            )
            services.job_submit(
                user=vera,
                request=services.JobRequest(
                    name="vision-after-promotion", team="vision", workers=1, gpus_per_worker=1
                ),
            )

        await database_sync_to_async(promote_then_submit)()
        heard = await socket.receive_json_from(timeout=5)
        still_open = await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return heard, still_open

    heard, still_open = async_to_sync(scenario)()
    assert heard["name"] == "vision-after-promotion"
    assert still_open


def test_a_member_removed_while_the_socket_connects_is_cut_off(platform, teams, vera, monkeypatch):
    """The removal commits after the connecting socket read alice's teams and before it joined
    its groups: the session.recheck it publishes reached alice's control group while this socket
    was not in it yet, so the socket joined vision's group with rights she no longer had and
    heard vision's jobs until the periodic check (about a minute later)."""
    from frontend import consumers

    real_team_ids_of = consumers.team_ids_of
    removed = []

    def teams_then_removed(user):
        ids = real_team_ids_of(user)
        if user.username == "alice" and not removed:
            removed.append(True)
            team_services.membership_remove(user=vera, team=teams["vision"], username="alice")
        return ids

    monkeypatch.setattr(consumers, "team_ids_of", teams_then_removed)
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = _socket(cookie)
        await _open(socket)
        return await _closed_with(socket, timeout=5)

    assert async_to_sync(scenario)() == 4403
    assert removed


def test_logging_out_closes_that_sessions_sockets_only(platform):
    alice = platform["alice"]
    cookie, browser = _cookie(alice)
    other_cookie, _ = _cookie(alice)  # alice signed in elsewhere too

    async def scenario():
        socket, other = _socket(cookie), _socket(other_cookie)
        await _open(socket)
        await _open(other)
        await database_sync_to_async(browser.post)("/logout/")
        code = await _closed_with(socket, timeout=5)
        still_open = await other.receive_nothing(timeout=1)
        await other.disconnect()
        return code, still_open

    code, still_open = async_to_sync(scenario)()
    assert code == 4401 and still_open


def test_a_change_no_signal_announces_is_caught_by_the_periodic_check(platform, settings):
    settings.STREAM_RECHECK_SECONDS = 0.5
    alice = platform["alice"]
    cookie, _ = _cookie(alice)
    from django.contrib.auth import get_user_model

    async def scenario():
        socket = _socket(cookie)
        await _open(socket)
        # A database shell deactivates her: no save(), no signal.
        await database_sync_to_async(
            lambda: get_user_model().objects.filter(pk=alice.pk).update(is_active=False)
        )()
        return await _closed_with(socket, timeout=5)

    assert async_to_sync(scenario)() == 4401


@pytest.fixture
def sso(settings):
    """Single sign-on turned on as settings.py does it (no request goes to the provider here:
    what these sockets do is read the session the provider's callback left)."""
    settings.SSO_ENABLED = True
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = "https://idp.example.com/auth"
    settings.OIDC_OP_JWKS_ENDPOINT = "https://idp.example.com/jwks"
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "tenants.sso.SsoBackend"]


def _sso_cookie(user, *, recheck_in: float) -> str:
    """A single sign-on session of ``user`` as the callback view leaves it, due for its re-check
    with the provider in ``recheck_in`` seconds (negative: overdue)."""
    client = Client()
    client.force_login(user, backend="tenants.sso.SsoBackend")
    session = client.session
    session["oidc_id_token_expiration"] = time.time() + recheck_in
    session.save()
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def test_a_single_sign_on_session_due_for_its_recheck_closes_its_stream(platform, sso, settings):
    """The HTTP middleware sends a page load back to the provider once the session's ID token
    expiry passes; a tab holding only a socket never made one, so a user disabled at the
    provider kept hearing their teams until the Django session ended. The socket closes with
    4440 (the portal reloads the page, which re-checks); a password session is not touched."""
    settings.STREAM_RECHECK_SECONDS = 0.5
    sso_cookie = _sso_cookie(platform["alice"], recheck_in=1.5)
    password_cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket, local = _socket(sso_cookie), _socket(password_cookie)
        await _open(socket)
        await _open(local)
        code = await _closed_with(socket, timeout=5)
        still_open = await local.receive_nothing(timeout=1)
        await local.disconnect()
        return code, still_open

    code, still_open = async_to_sync(scenario)()
    assert code == 4440 and still_open


@pytest.mark.parametrize("path", ["stream", "log"])
def test_a_socket_opened_on_an_overdue_single_sign_on_session_is_closed_at_once(
    platform, sso, log_job, path
):
    """Accepted, so that the browser sees 4440 rather than a failed handshake, then closed
    before a frame is sent."""
    from frontend import log_consumer

    cookie = _sso_cookie(platform["alice"], recheck_in=-1)

    async def scenario():
        socket = _socket(cookie) if path == "stream" else _log_socket(log_job, cookie)
        connected, _ = await socket.connect(timeout=5)
        first = await socket.receive_output(timeout=5)
        await socket.disconnect()
        return connected, first, _members_of_hub()

    closed = {"type": "websocket.close", "code": 4440}
    assert async_to_sync(scenario)() == (True, closed, 0)
    assert log_consumer._open_by_user == {}  # noqa: SLF001


def test_a_socket_whose_handler_raises_still_leaves_the_hub(platform, monkeypatch):
    """Whatever ends a socket, even a bug in a handler, takes it out of the hub."""
    from frontend.consumers import StreamConsumer

    async def broken(self, content, **kwargs):
        raise RuntimeError("a bug in a handler")

    monkeypatch.setattr(StreamConsumer, "receive_json", broken)
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = _socket(cookie)
        await _open(socket)
        await socket.send_to(text_data='{"type": "ping"}')
        with pytest.raises(RuntimeError):
            await socket.wait(timeout=5)
        return _members_of_hub()

    assert async_to_sync(scenario)() == 0


# --- the job page's log socket holds to the same rules --------------------------------------


@pytest.fixture
def log_job(platform, sim_clock, monkeypatch):
    from frontend import log_consumer
    from scheduler.loop.cycle import run_cycle

    monkeypatch.setattr(log_consumer, "POLL_S", 0.1)
    monkeypatch.setattr(log_consumer, "SESSION_CHECK_S", 0.3)
    job = services.job_submit(
        user=platform["alice"],
        request=services.JobRequest(
            name="live-log", team="vision", workers=1, gpus_per_worker=1, simulated_duration_s=600
        ),
    )
    run_cycle()
    return job


def _log_socket(job, cookie) -> WebsocketCommunicator:
    headers = [(b"host", b"testserver"), (b"origin", ORIGIN)]
    headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", headers=headers)


@pytest.mark.parametrize(
    ("frame", "code"), [("[" * 5000 + "]" * 5000, 1007), ("x" * 70_000, 1009), ("\ud800", 1007)]
)
def test_hostile_frames_close_the_log_socket_and_free_its_place(platform, log_job, frame, code):
    from frontend import log_consumer

    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = _log_socket(log_job, cookie)
        connected, _ = await socket.connect(timeout=5)
        assert connected
        await socket.send_to(text_data=frame)
        closed = await _closed_with(socket)
        await socket.disconnect()  # the client's side of the close handshake
        return closed

    assert async_to_sync(scenario)() == code
    assert log_consumer._open_by_user == {}  # noqa: SLF001  (the user's socket given back)


def test_logging_out_closes_the_log_socket_within_seconds(platform, log_job):
    cookie, browser = _cookie(platform["alice"])

    async def scenario():
        socket = _log_socket(log_job, cookie)
        connected, _ = await socket.connect(timeout=5)
        assert connected
        await database_sync_to_async(browser.post)("/logout/")
        return await _closed_with(socket, timeout=5)

    assert async_to_sync(scenario)() == 4401


def test_a_thirty_digit_job_id_is_not_a_log_socket(platform):
    cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket = WebsocketCommunicator(
            application,
            "/ws/jobs/" + "9" * 30 + "/log/",
            headers=[
                (b"host", b"testserver"),
                (b"origin", ORIGIN),
                (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
            ],
        )
        try:
            connected, _ = await socket.connect(timeout=5)
        except ValueError:  # no route: Channels refuses the path
            return False
        return connected

    assert async_to_sync(scenario)() is False


def test_a_platform_admin_demoted_while_reading_another_teams_log_is_cut_off(platform, log_job):
    """A platform admin reads every team's job output; unticked in Django admin (same session,
    same password), the socket must stop reading vision's output as a member of no team would.
    The log socket used the user it was opened with, whose ``is_superuser`` stayed True."""
    admin = platform["admin"]  # a member of no team
    cookie, _ = _cookie(admin)

    async def scenario():
        socket = _log_socket(log_job, cookie)
        connected, _ = await socket.connect(timeout=5)
        assert connected
        assert (await socket.receive_json_from(timeout=5))["type"] == "log.attempt"

        def demote():
            admin.is_superuser = False
            admin.save()

        await database_sync_to_async(demote)()
        return await _closed_with(socket, timeout=5)

    assert async_to_sync(scenario)() == 4404


def test_a_single_sign_on_session_due_for_its_recheck_closes_its_log_socket(platform, sso, log_job):
    """The log socket re-reads its session every few seconds too: the same 4440 as the
    stream, while a password session's log socket goes on streaming."""
    sso_cookie = _sso_cookie(platform["alice"], recheck_in=1.5)
    password_cookie, _ = _cookie(platform["alice"])

    async def scenario():
        socket, local = _log_socket(log_job, sso_cookie), _log_socket(log_job, password_cookie)
        assert (await socket.connect(timeout=5))[0] and (await local.connect(timeout=5))[0]
        code = await _closed_with(socket, timeout=5)
        frames = []
        while not await local.receive_nothing(timeout=0.5):
            output = await local.receive_output(timeout=1)
            assert output["type"] == "websocket.send", output
            frames.append(output)
        await local.disconnect()
        return code, frames

    code, frames = async_to_sync(scenario)()
    assert code == 4440 and frames
