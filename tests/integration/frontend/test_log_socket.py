"""The job page's live output over /ws/jobs/<id>/log/, through the real ASGI stack (origin check,
session auth, the consumer) on the simulated backend: the tail then new output as it is written,
following a requeued job to its next attempt, the end of a finished job; another team's job, an
anonymous socket and a bad attempt are refused without a word about the job."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from frontend import log_consumer
from gpuplatform.asgi import application
from scheduler import services
from scheduler.loop.cycle import run_cycle
from scheduler.models import Job
from scheduler.transitions import job_requeue
from tests.conftest import refused_with, use_channel_layer
from tests.simclock import SimulatedClock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast(sim_clock, monkeypatch):
    monkeypatch.setattr(log_consumer, "POLL_S", 0.1)


def headers(user=None):
    result = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
        result.append((b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return result


def started_job(user, seconds=600.0) -> Job:
    job = services.job_submit(
        user=user,
        request=services.JobRequest(
            name="live-log",
            team="vision",
            workers=1,
            gpus_per_worker=1,
            simulated_duration_s=seconds,
        ),
    )
    run_cycle()
    job.refresh_from_db()
    assert job.state == "running"
    return job


def finished_job(user) -> Job:
    """A job that ran its one attempt to the end (two minutes of simulated work)."""
    job = started_job(user, seconds=120)
    advance(5)
    run_cycle()
    assert Job.objects.get(pk=job.pk).state == "succeeded"
    return job


advance = SimulatedClock.advance


async def frames_until(socket, predicate, timeout=5.0) -> list[dict]:
    """Frames received until one satisfies ``predicate`` (included)."""
    seen = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        assert remaining > 0, f"no matching frame; got {seen}"
        frame = await socket.receive_json_from(timeout=remaining)
        seen.append(frame)
        if predicate(frame):
            return seen


def test_tail_then_live_output_then_the_next_attempt(platform):
    alice = platform["alice"]
    job = started_job(alice)
    advance(2)
    cookie = headers(alice)

    async def scenario():
        socket = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", headers=cookie)
        connected, _ = await socket.connect()
        assert connected
        first = await frames_until(socket, lambda f: f["type"] == "log")
        assert first[0] == {"type": "log.attempt", "attempt": 1, "attempts": 1}
        assert first[-1]["text"].startswith("[gpuplatform] attempt 1 on ")
        assert "step      2" in first[-1]["text"]
        await sync_to_async(advance)(2)
        more = await frames_until(socket, lambda f: "step      4" in f.get("text", ""))
        text = "".join(f["text"] for f in more if f["type"] == "log")
        assert text.startswith("step      3") and "[gpuplatform]" not in text  # nothing twice

        def requeue_and_restart():
            assert job_requeue(job=Job.objects.get(pk=job.pk), now=timezone.now(), reason="x")
            run_cycle()

        await sync_to_async(requeue_and_restart)()
        moved = await frames_until(socket, lambda f: f["type"] == "log.attempt")
        assert moved[-1] == {"type": "log.attempt", "attempt": 2, "attempts": 2}
        second = await frames_until(socket, lambda f: f["type"] == "log")
        assert second[-1]["text"].startswith("[gpuplatform] attempt 2 on ")
        await socket.send_json_to({"type": "cancel"})  # read-only
        assert (await socket.receive_json_from(timeout=2))["type"] == "error"
        await socket.disconnect()

    async_to_sync(scenario)()


def test_a_finished_job_sends_its_output_and_ends(platform):
    alice = platform["alice"]
    job = finished_job(alice)
    cookie = headers(alice)

    async def scenario():
        socket = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", headers=cookie)
        assert (await socket.connect())[0]
        frames = await frames_until(socket, lambda f: f["type"] == "log.end")
        assert frames[-1] == {"type": "log.end", "state": "succeeded"}
        text = "".join(f["text"] for f in frames if f["type"] == "log")
        assert text.rstrip().endswith("[gpuplatform] training finished")
        assert (await socket.receive_output(timeout=2))["type"] == "websocket.close"

    async_to_sync(scenario)()


def test_a_pinned_attempt_ends_with_that_attempt(platform):
    alice = platform["alice"]
    job = started_job(alice)
    advance(2)
    assert job_requeue(job=Job.objects.get(pk=job.pk), now=timezone.now(), reason="x")
    run_cycle()
    cookie = headers(alice)

    async def scenario():
        socket = WebsocketCommunicator(
            application, f"/ws/jobs/{job.pk}/log/?attempt=1", headers=cookie
        )
        assert (await socket.connect())[0]
        frames = await frames_until(socket, lambda f: f["type"] == "log.end")
        assert frames[0]["attempt"] == 1
        assert "[gpuplatform] attempt 1" in "".join(f.get("text", "") for f in frames)

    async_to_sync(scenario)()


@pytest.mark.parametrize("who", ["bob", None])
def test_another_team_or_anonymous_hears_nothing(platform, who):
    job = started_job(platform["alice"])
    cookie = headers(platform[who] if who else None)

    async def scenario():
        socket = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", headers=cookie)
        assert await refused_with(socket) == (4404 if who else 4401)
        await socket.disconnect()

    async_to_sync(scenario)()
    assert log_consumer._open_by_user == {}  # noqa: SLF001  (a refused socket holds no place)


@pytest.mark.parametrize(
    "attempt",
    [
        "x",
        "0",
        "100000",
        "%C2%B2",  # "²": str.isdigit() says yes, int() raised ValueError in connect
        "1%C2%B2",
    ],
)
def test_a_bad_attempt_is_refused(platform, attempt):
    job = started_job(platform["alice"])
    cookie = headers(platform["alice"])

    async def scenario():
        socket = WebsocketCommunicator(
            application, f"/ws/jobs/{job.pk}/log/?attempt={attempt}", headers=cookie
        )
        assert await refused_with(socket) == 4400

    async_to_sync(scenario)()


def test_one_user_holds_a_bounded_number_of_log_sockets(platform, monkeypatch):
    monkeypatch.setattr(log_consumer, "MAX_SOCKETS_PER_USER", 2)
    job = started_job(platform["alice"])
    cookie = headers(platform["alice"])

    async def scenario():
        path = f"/ws/jobs/{job.pk}/log/"
        first = WebsocketCommunicator(application, path, headers=cookie)
        second = WebsocketCommunicator(application, path, headers=cookie)
        assert (await first.connect())[0] and (await second.connect())[0]
        third = WebsocketCommunicator(application, path, headers=cookie)
        assert await refused_with(third) == 4429
        await first.disconnect()
        fourth = WebsocketCommunicator(application, path, headers=cookie)
        assert (await fourth.connect())[0]  # a closed socket frees its place
        await second.disconnect()
        await fourth.disconnect()

    async_to_sync(scenario)()


def test_an_unexpected_read_error_is_reported_and_retried_not_a_silent_socket(
    platform, monkeypatch
):
    """A read that fails with something other than a domain error (here the database dropping
    the connection under the backend's read) used to end the socket's reader task while the
    socket stayed open: the pane looked live and never showed another line, and the browser,
    seeing no close, never reconnected. It must say so and try again."""
    from django.db import OperationalError

    from scheduler.backends.simulated import SimulatedBackend

    monkeypatch.setattr(log_consumer, "UNAVAILABLE_RETRY_S", 0.1)
    alice = platform["alice"]
    job = started_job(alice)
    advance(2)
    real_read = SimulatedBackend.read_log
    failures = {"left": 2}

    def flaky_read(self, *args, **kwargs):
        if failures["left"]:
            failures["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(SimulatedBackend, "read_log", flaky_read)
    cookie = headers(alice)

    async def scenario():
        socket = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", headers=cookie)
        assert (await socket.connect())[0]
        frames = await frames_until(socket, lambda f: f["type"] == "log")
        await socket.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    unavailable = [f for f in frames if f["type"] == "log.unavailable"]
    assert len(unavailable) == 2
    assert "server closed" not in repr(unavailable)  # no internals in the frame
    assert frames[-1]["text"].startswith("[gpuplatform] attempt 1 on ")
    assert log_consumer._open_by_user == {}  # noqa: SLF001


def test_a_pinned_attempt_a_finished_job_never_had_is_refused_not_awaited(platform):
    """``?attempt=5`` of a job that finished after one attempt: that attempt can never come. The
    socket used to start over once a second for ever, open and silent (the pane said nothing);
    it must say why and close, as the REST read answers 400 on ``attempt``."""
    alice = platform["alice"]
    job = finished_job(alice)
    cookie = headers(alice)

    async def scenario():
        socket = WebsocketCommunicator(
            application, f"/ws/jobs/{job.pk}/log/?attempt=5", headers=cookie
        )
        assert (await socket.connect())[0]
        error = await socket.receive_json_from(timeout=5)
        closed = await socket.receive_output(timeout=5)
        await socket.disconnect()
        return error, closed

    error, closed = async_to_sync(scenario)()
    assert error == {"type": "error", "field": "attempt", "message": "the job has 1 attempt"}
    assert closed == {"type": "websocket.close", "code": 4400}
    assert log_consumer._open_by_user == {}  # noqa: SLF001


def test_sockets_opened_at_once_cannot_pass_the_per_user_bound_together(platform, monkeypatch):
    """The bound was checked before the job read of the handshake and counted after it, so
    sockets opened together (a script, or a page reloaded in many tabs) all passed the check
    while each waited for its read, and each then polled the backend once a second."""
    monkeypatch.setattr(log_consumer, "MAX_SOCKETS_PER_USER", 2)
    job = started_job(platform["alice"])
    cookie = headers(platform["alice"])

    async def scenario():
        path = f"/ws/jobs/{job.pk}/log/"
        sockets = [WebsocketCommunicator(application, path, headers=cookie) for _ in range(6)]
        codes = await asyncio.gather(*(refused_with(s) for s in sockets))
        for socket in sockets:
            await socket.disconnect()
        return codes

    codes = async_to_sync(scenario)()
    assert sorted(codes, key=str) == [4429] * 4 + [None] * 2
    assert log_consumer._open_by_user == {}  # noqa: SLF001


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_log_sockets_take_no_channel_of_their_own(platform, settings, backend):
    """The socket reads the job's backend; the consumer base class opened a channel per socket
    anyway and kept a receive waiting on it (a Redis poll in production) for the socket's life.
    Its user's control group (logout, membership changes) reaches it through the server loop's
    hub, whose one channel serves every socket of the process: three log sockets streaming wait
    on that one channel only, as each layer's own bookkeeping of waited-on channels shows."""
    from frontend import hub as hubs

    use_channel_layer(settings, backend)
    alice = platform["alice"]
    job = started_job(alice)
    cookie = headers(alice)

    async def scenario():
        layer = get_channel_layer()
        sockets = [
            WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", headers=cookie)
            for _ in range(3)
        ]
        for socket in sockets:
            assert (await socket.connect())[0]
            await frames_until(socket, lambda f: f["type"] == "log")  # streaming
        waited_on = list(layer.receive_buffer if backend == "redis" else layer.channels)
        hub_channel = hubs._hubs[asyncio.get_running_loop()].channel  # noqa: SLF001
        for socket in sockets:
            await socket.disconnect()
        return waited_on, hub_channel

    waited_on, hub_channel = async_to_sync(scenario)()
    assert waited_on == [hub_channel]


def test_a_viewer_hears_the_jobs_secrets_masked_a_member_as_written(platform, tmp_path):
    """The job prints its env and, in two writes, a token it was given: the team's viewer hears
    both masked (the unfinished line once it is whole), the member every byte as written."""
    from tests.joblogs import COMMAND, ENV, MASKED, PRINTED, SECRET, OutputFile

    job = services.job_submit(
        user=platform["alice"],
        request=services.JobRequest(
            name="prints-its-env",
            team="vision",
            workers=1,
            gpus_per_worker=1,
            env=ENV,
            command=COMMAND,
            simulated_duration_s=600,
        ),
    )
    run_cycle()
    job.refresh_from_db()
    output = OutputFile(job, tmp_path)
    output.write(PRINTED + f"token {SECRET[:8]}")
    viewer, member = headers(platform["charlie"]), headers(platform["alice"])

    async def scenario():
        path = f"/ws/jobs/{job.pk}/log/"
        sockets = [WebsocketCommunicator(application, path, headers=h) for h in (viewer, member)]
        for socket in sockets:
            assert (await socket.connect())[0]
        first = [await frames_until(s, lambda f: f["type"] == "log") for s in sockets]
        output.write(f"{SECRET[8:]} ok\nstep 2\n")
        rest = [await frames_until(s, lambda f: "step 2" in f.get("text", "")) for s in sockets]
        for socket in sockets:
            await socket.disconnect()
        return [
            "".join(f["text"] for f in frames + more if f["type"] == "log")
            for frames, more in zip(first, rest, strict=True)
        ]

    heard_by_viewer, heard_by_member = async_to_sync(scenario)()
    assert heard_by_viewer == MASKED + "token [redacted] ok\nstep 2\n"
    assert heard_by_member == PRINTED + f"token {SECRET} ok\nstep 2\n"
