"""Websocket fan-out through the real ASGI stack on both real channel layers (in-memory, as in the
demo, and Redis, as in production): topic subscription (a jobs page never receives GPU
utilization), the jobs.status batch of a cycle, team scoping of batches, and publication only
after commit (never for a rolled-back transaction or savepoint)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import transaction
from django.test import Client

from core import streams
from gpuplatform.asgi import application
from scheduler import services
from scheduler.loop.cycle import run_cycle
from tests.conftest import use_channel_layer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["memory", "redis"])
def layer(request, settings):
    use_channel_layer(settings, request.param)
    return request.param


def _socket(user, query: str = "") -> WebsocketCommunicator:
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
    ]
    return WebsocketCommunicator(application, f"/ws/stream/{query}", headers=headers)


async def _open(ws) -> dict:
    connected, _ = await ws.connect(timeout=5)
    assert connected
    hello = await ws.receive_json_from(timeout=5)
    assert hello["type"] == "hello"
    return hello


async def _drain(ws, quiet: float = 0.5, expect: bool = False) -> list[dict]:
    """Every frame until ``quiet`` s pass without one; with ``expect``, wait up to 5 s for the
    first (a busy shared machine can delay delivery past the quiet period)."""
    frames = [await ws.receive_json_from(timeout=5)] if expect else []
    while not await ws.receive_nothing(timeout=quiet):
        frames.append(await ws.receive_json_from(timeout=2))
    return frames


def _jobs_of(frames: list[dict]) -> list[dict]:
    """Every job update in ``frames``, batched or not, in order."""
    out = []
    for frame in frames:
        if frame["type"] == "job.status":
            out.append(frame)
        elif frame["type"] == "jobs.status":
            out.extend(frame["jobs"])
    return out


def _submit(user, team: str, name: str, gpus: int = 8, model: str = "h100-80gb"):
    return services.job_submit(
        user=user,
        request=services.JobRequest(
            name=name,
            team=team,
            workers=1,
            gpus_per_worker=gpus,
            gpu_model=model,
            simulated_duration_s=36000,
        ),
    )


def test_topics_choose_the_groups_and_a_jobs_page_never_gets_utilization(layer, platform):
    alice = platform["alice"]
    jobs_page = _socket(alice, "?topics=jobs")
    cluster_page = _socket(alice, "?topics=jobs,cluster,utilization")
    default = _socket(alice)

    async def run():
        assert (await _open(jobs_page))["topics"] == ["jobs"]
        assert (await _open(cluster_page))["topics"] == ["jobs", "cluster", "utilization"]
        assert (await _open(default))["topics"] == list(streams.DEFAULT_TOPICS)
        await database_sync_to_async(lambda: _submit(alice, "vision", "vit-a", gpus=4))()
        await database_sync_to_async(run_cycle)()  # starts it
        for ws in (jobs_page, cluster_page, default):
            await _drain(ws, expect=True)
        # The next cycle's sync samples the busy GPUs: one cluster-wide message.
        await database_sync_to_async(run_cycle)()
        on_cluster = await _drain(cluster_page, expect=True)
        on_jobs, on_default = await _drain(jobs_page), await _drain(default)
        utilization = [f for f in on_cluster if f["type"] == "cluster.utilization"]
        assert len(utilization) == 1
        assert set(utilization[0]["nodes"]) == {"n1"}
        assert len(utilization[0]["nodes"]["n1"]) == 4
        assert all(0 <= u <= 1 for u in utilization[0]["nodes"]["n1"].values())
        assert "vit-a" not in repr(utilization)  # anonymised
        for frames in (on_jobs, on_default):
            assert not [f for f in frames if "utilization" in f["type"]]
        for ws in (jobs_page, cluster_page, default):
            await ws.disconnect()

    async_to_sync(run)()


def test_an_unknown_topic_gets_an_error_frame_and_the_known_ones_still_work(layer, platform):
    alice = platform["alice"]
    ws = _socket(alice, "?topics=jobs,everything,%3Cscript%3E")

    async def run():
        hello = await _open(ws)
        assert hello["topics"] == ["jobs"]
        error = await ws.receive_json_from(timeout=5)
        assert error["type"] == "error" and error["field"] == "topics"
        assert "everything" in error["message"]
        await database_sync_to_async(lambda: _submit(alice, "vision", "still-heard"))()
        assert [j["name"] for j in _jobs_of(await _drain(ws, expect=True))] == ["still-heard"]
        # Still read-only, also for text that is not JSON.
        await ws.send_to(text_data="subscribe utilization")
        assert (await ws.receive_json_from(timeout=5))["type"] == "error"
        await ws.disconnect()

    async_to_sync(run)()


def test_empty_topics_join_nothing(layer, platform):
    ws = _socket(platform["alice"], "?topics=")

    async def run():
        assert (await _open(ws))["groups"] == 0
        await database_sync_to_async(lambda: _submit(platform["alice"], "vision", "unheard"))()
        assert await _drain(ws) == []
        await ws.disconnect()

    async_to_sync(run)()


def test_a_cycle_sends_one_batch_per_team_and_bob_never_hears_alices(layer, platform):
    alice, bob = platform["alice"], platform["bob"]
    alice_ws, bob_ws = _socket(alice, "?topics=jobs"), _socket(bob, "?topics=jobs,cluster")

    async def run():
        await _open(alice_ws)
        await _open(bob_ws)

        def submit_all():
            # Two H100 nodes of 8 GPUs: two of these start, the other three wait.
            return [_submit(alice, "vision", f"vision-secret-{i}") for i in range(5)]

        jobs = await database_sync_to_async(submit_all)()
        assert len(_jobs_of(await _drain(alice_ws, expect=True))) == 5
        assert _jobs_of(await _drain(bob_ws)) == []
        await database_sync_to_async(run_cycle)()
        frames = await _drain(alice_ws, expect=True)
        # One frame for the whole cycle: the two starts and the three pending reasons.
        assert [f["type"] for f in frames] == ["jobs.status"], frames
        batch = frames[0]
        assert set(batch) == {"type", "jobs", "time"}
        updates = batch["jobs"]
        assert sorted(u["job"] for u in updates) == sorted(j.pk for j in jobs)
        assert sorted(u["state"] for u in updates) == ["pending"] * 3 + ["running"] * 2
        for update in updates:
            # A start names its transition; a pending-reason refresh is not a transition.
            assert update.pop("event", None) == (
                "started" if update["state"] == "running" else None
            )
            assert set(update) == {
                "type",
                "job",
                "team",
                "name",
                "state",
                "why",
                "estimated_start",
                "placement",
                "time",
            }
            assert update["type"] == "job.status" and update["team"] == "vision"
            if update["state"] == "pending":
                assert update["why"] and update["placement"] == {}
            else:
                assert sum(len(g) for g in update["placement"].values()) == 8
        # bob (another team) hears the GPUs change as anonymous node state at most.
        bob_frames = await _drain(bob_ws)
        assert not _jobs_of(bob_frames)
        assert "vision-secret" not in repr(bob_frames)
        await alice_ws.disconnect()
        await bob_ws.disconnect()

    async_to_sync(run)()


def test_messages_go_out_only_after_commit_and_never_for_a_rollback(layer, platform):
    alice = platform["alice"]
    vision = alice.memberships.get().team
    group = streams.team_group(vision.pk)
    ws = _socket(alice, "?topics=jobs")

    def update(job: int) -> dict:
        return {"type": "job.status", "job": job, "team": "vision", "name": f"j{job}"}

    async def run():
        await _open(ws)

        def in_transactions():
            with transaction.atomic():
                streams.publish(group, update(1))
                try:
                    with transaction.atomic():  # a savepoint, rolled back
                        streams.publish(group, update(2))
                        raise RuntimeError
                except RuntimeError:
                    pass
                streams.publish(group, update(3))
                # Still inside the transaction: nobody has heard anything.
                assert async_to_sync(ws.receive_nothing)(0.5)
            try:
                with transaction.atomic():  # rolled back entirely
                    streams.publish(group, update(4))
                    raise RuntimeError
            except RuntimeError:
                pass

        await database_sync_to_async(in_transactions)()
        frames = await _drain(ws, expect=True)
        assert [f["type"] for f in frames] == ["jobs.status"]
        assert [j["job"] for j in frames[0]["jobs"]] == [1, 3]
        await ws.disconnect()

    async_to_sync(run)()


def test_a_publication_from_another_thread_arrives_promptly(layer, platform):
    """The demo's scheduling loop publishes from its own thread; the server's event loop may be
    idle (nothing else wakes it) and must still deliver at once."""
    alice = platform["alice"]
    vision = alice.memberships.get().team
    ws = _socket(alice, "?topics=jobs")

    async def run():
        await _open(ws)
        payload = {"type": "job.status", "job": 7, "team": "vision", "name": "from-the-loop"}
        loop = asyncio.get_running_loop()
        started = loop.time()
        # A plain thread, not awaited: its end does not wake this loop (asyncio.to_thread would).
        threading.Thread(
            target=streams.publish, args=(streams.team_group(vision.pk), payload)
        ).start()
        frame = await ws.receive_json_from(timeout=3)
        assert frame["name"] == "from-the-loop"
        assert loop.time() - started < 1.0
        await ws.disconnect()

    async_to_sync(run)()


def test_one_hub_per_loop_leaves_its_groups_with_the_last_socket(layer, platform):
    from frontend import hub as hubs

    alice, bob = platform["alice"], platform["bob"]
    vision = alice.memberships.get().team
    sockets = [_socket(alice, "?topics=jobs"), _socket(alice, "?topics=jobs"), _socket(bob)]

    async def run():
        for ws in sockets:
            await _open(ws)
        hub = hubs._hubs[asyncio.get_running_loop()]  # noqa: SLF001
        team = streams.team_group(vision.pk)
        assert len(hub.members[team]) == 2 and hub.channel is not None
        channel_layer = hub.layer
        for ws in sockets:
            await ws.disconnect()
        assert hub.members == {} and hub.channel is None
        # Nothing of this loop is left in the layer's group.
        if layer == "memory":
            assert not channel_layer.groups.get(team)
        else:
            connection = channel_layer.connection(channel_layer.consistent_hash(team))
            assert await connection.zcard(channel_layer._group_key(team)) == 0  # noqa: SLF001

    async_to_sync(run)()


def test_a_socket_that_stops_reading_is_closed_and_the_others_still_hear(layer, platform):
    from frontend import hub as hubs

    alice = platform["alice"]
    vision = alice.memberships.get().team
    stalled, reader = _socket(alice, "?topics=jobs"), _socket(alice, "?topics=jobs")

    async def run():
        await _open(stalled)
        hub = hubs._hubs[asyncio.get_running_loop()]  # noqa: SLF001
        (consumer,) = hub.members[streams.team_group(vision.pk)]
        # Fill its queue without yielding, as for a client that stopped reading.
        for i in range(consumer.QUEUE_MAX + 1):
            consumer.push(f'{{"type": "test", "n": {i}}}')
        sent = 0
        while True:
            output = await stalled.receive_output(timeout=5)
            if output["type"] == "websocket.close":
                break
            sent += 1
        assert output["code"] == 4408
        assert sent <= consumer.QUEUE_MAX
        await _open(reader)
        await database_sync_to_async(lambda: _submit(alice, "vision", "after-the-stall"))()
        assert "after-the-stall" in repr(await _drain(reader, expect=True))
        await reader.disconnect()

    async_to_sync(run)()


def test_node_status_carries_the_state_a_down_node_comes_back_to(layer, platform):
    """A drain or quarantine of a down node is held until it comes back (it stays down). The
    node.status every cluster view hears said only ``down``, so a page could not show the hold nor
    offer the release that lifts it. It now carries ``resume_state`` (blank when nothing is held,
    ready nodes included), the other fields as before."""
    from scheduler.models import Node

    admin = platform["admin"]
    node = Node.objects.get(name="n2")
    Node.objects.filter(pk=node.pk).update(state="down", state_reason="node failure")
    ws = _socket(platform["bob"], "?topics=cluster")

    def act(action, **reason):
        getattr(services, f"node_{action}")(user=admin, node_id=node.pk, **reason)

    async def run():
        await _open(ws)
        heard = []
        for action, reason in (
            ("drain", {"reason": "firmware update"}),
            ("quarantine", {"reason": "RMA GPU 3"}),
            ("release", {}),
        ):
            await database_sync_to_async(act)(action, **reason)
            [status] = [f for f in await _drain(ws, expect=True) if f["type"] == "node.status"]
            assert set(status) == {"type", "node", "state", "health", "gpus", "time"} | {
                "resume_state",
                "cluster_hold",
            }
            assert status["cluster_hold"] == ""  # down: the platform's hold says more
            assert (status["node"], status["state"]) == ("n2", "down")
            heard.append(status["resume_state"])
        assert heard == ["draining", "quarantined", ""]

        # A node drained while up holds nothing: its state says it.
        other = await database_sync_to_async(lambda: Node.objects.get(name="n1"))()
        await database_sync_to_async(
            lambda: services.node_drain(user=admin, node_id=other.pk, reason="")
        )()
        [status] = [f for f in await _drain(ws, expect=True) if f["type"] == "node.status"]
        assert (status["node"], status["state"], status["resume_state"]) == ("n1", "draining", "")
        await ws.disconnect()

    async_to_sync(run)()


def test_a_drained_node_that_goes_down_says_it_comes_back_drained(layer, platform):
    """The loop marks a drained node down and keeps the drain to come back to. Its node.status
    said ``down`` with nothing held (the hold was written in the database only), so a cluster
    view hid the Release that would lift it. It now says what the node comes back as, and once
    back, that nothing is held any more."""
    from datetime import timedelta

    from scheduler.backends import get_backend, reset_backends
    from scheduler.models import Node, SimulatedNodeFault

    reset_backends()
    node = Node.objects.get(name="n2")
    services.node_drain(user=platform["admin"], node_id=node.pk, reason="firmware update")
    backend = get_backend(node.cluster)
    ws = _socket(platform["bob"], "?topics=cluster")

    def repaired():
        for fault in SimulatedNodeFault.objects.all():
            fault.failed_at -= timedelta(seconds=61)
            fault.repaired_at -= timedelta(seconds=61)
            fault.save(update_fields=["failed_at", "repaired_at"])

    async def statuses() -> list[tuple[str, str]]:
        frames = await _drain(ws, expect=True)
        return [
            (f["state"], f["resume_state"])
            for f in frames
            if f["type"] == "node.status" and f["node"] == "n2"
        ]

    async def run():
        await _open(ws)
        await database_sync_to_async(lambda: backend.fail_node("n2", repair_after_s=60))()
        await database_sync_to_async(run_cycle)()
        assert await statuses() == [("down", "draining")]
        await database_sync_to_async(repaired)()
        await database_sync_to_async(run_cycle)()
        assert await statuses() == [("draining", "")]
        await ws.disconnect()

    try:
        async_to_sync(run)()
    finally:
        reset_backends()


def test_node_status_says_why_a_node_avoided_after_a_pending_run_takes_no_work(
    layer, platform, submit
):
    """The loop gave up on a run Slurm kept pending on its node (a reservation ahead) and avoids
    the node for a while: the node stays ready, so only ``cluster_hold`` tells a cluster view
    that its idle GPUs are not free, and it must say so when it happens, not at the next
    reload."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.backends import backend_run_id
    from scheduler.backends.base import BackendJobState, BackendJobStatus
    from scheduler.loop.observe import _sync_job
    from scheduler.models import Job

    job_id = submit(
        platform["alice"], team="vision", gpu_model="h100-80gb", simulated_duration_s=100_000
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    (node,) = {a.node.name for a in job.allocations.all()}
    held = BackendJobStatus(
        backend_run_id(job),
        1,
        BackendJobState.PENDING,
        reason="ReqNodeNotAvail, Reserved for maintenance",
        pending_on_nodes=True,
        held_by_cluster=True,
    )
    now = timezone.now()
    _sync_job(job, held, now - timedelta(seconds=600))  # first seen pending
    job.refresh_from_db()
    ws = _socket(platform["bob"], "?topics=cluster")

    async def run():
        await _open(ws)
        await database_sync_to_async(lambda: _sync_job(job, held, now))()  # past the grace
        frames = await _drain(ws, expect=True)
        [status] = [f for f in frames if f["type"] == "node.status" and f["node"] == node]
        assert status["state"] == "ready"
        assert status["cluster_hold"].startswith(
            "the cluster kept a run placed here pending; no new run until "
        )
        await ws.disconnect()

    async_to_sync(run)()
