"""Typed live-stream payloads and their publication on the channel layer.

Groups: ``team.<id>`` (that team's job updates), ``cluster`` (node state, anonymised: no job
names), ``cluster.utilization`` (GPU utilization of the whole cluster, anonymised; only sockets
that asked for the ``utilization`` topic join it), ``admin`` (quarantine and node events), and
``admin.whatif`` (what-if replay progress, platform admins' sockets that asked for the
``whatif`` topic), and ``user.<id>``: control only, never content. Every socket of a user joins it; a
``session.recheck`` there (:func:`recheck_sessions`, after a membership change or a logout) makes
those sockets check their session and teams again and close when they changed.

Guarantees of ``publish``:
- A message is sent after the surrounding transaction commits, so a listener never hears of a
  change that was rolled back (nor of one made in a rolled-back savepoint).
- All messages published in one transaction go out together, in one hop to the channel layer,
  in publication order per group; consecutive job updates to one team group travel as one
  ``jobs.status`` batch (a single update stays a ``job.status``).
- Each payload is serialised to JSON once, not once per listening socket.
- A dead channel layer is logged, never raised: it must not break scheduling.
- Listeners registered with ``subscribe`` (the notifications app) receive every committed batch
  of messages once, in publication order, before the channel layer does; a failing listener is
  logged, never raised. This is the one place job, node, budget and quota changes become known
  after commit, so everything that reacts to them hooks in here, not in the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

log = logging.getLogger(__name__)

CLUSTER_GROUP = "cluster"
UTILIZATION_GROUP = "cluster.utilization"
ADMIN_GROUP = "admin"
WHATIF_GROUP = "admin.whatif"

# What a socket may ask for (``/ws/stream/?topics=jobs,cluster``) and what it gets without asking.
# Utilization is opt-in: it is most of the traffic, and only the cluster view shows it.
TOPICS = ("jobs", "cluster", "utilization", "whatif")
DEFAULT_TOPICS = ("jobs", "cluster")

# The most job updates one jobs.status frame carries (a larger run is split into several).
BATCH_MAX_JOBS = 500
# How long a publisher waits for the channel layer before giving up on a batch (and logging).
SEND_TIMEOUT_S = 10.0


USER_GROUP_PREFIX = "user."
RECHECK_SESSIONS = "session.recheck"


def team_group(team_id: int) -> str:
    return f"team.{team_id}"


def user_group(user_id: int) -> str:
    """The control group of one user's sockets (never carries content; see the module doc)."""
    return f"{USER_GROUP_PREFIX}{user_id}"


def recheck_sessions(user_id: int) -> None:
    """Ask every socket of ``user_id`` to re-check its session and teams (after commit): those
    whose session ended close (4401), those whose teams changed close so the portal reconnects
    with the right groups (4403)."""
    publish(user_group(user_id), {"type": RECHECK_SESSIONS})


def groups_for(*, topics: Iterable[str], team_ids: Iterable[int], is_admin: bool) -> list[str]:
    """The groups a socket joins for ``topics`` (already validated): ``jobs`` -> the caller's
    team groups; ``cluster`` -> the cluster group, and the admin group for platform admins;
    ``utilization`` -> the cluster utilization group; ``whatif`` -> the what-if progress group,
    for platform admins only."""
    wanted = set(topics)
    groups: list[str] = []
    if "jobs" in wanted:
        groups += [team_group(team_id) for team_id in sorted(team_ids)]
    if "cluster" in wanted:
        groups.append(CLUSTER_GROUP)
        if is_admin:
            groups.append(ADMIN_GROUP)
    if "utilization" in wanted:
        groups.append(UTILIZATION_GROUP)
    if "whatif" in wanted and is_admin:
        groups.append(WHATIF_GROUP)
    return groups


class JobStatusPayload(TypedDict):
    type: Literal["job.status"]
    job: int
    team: str
    name: str
    state: str
    why: str
    estimated_start: str | None
    placement: dict[str, list[int]]
    # The timeline event this update announces (``submitted``, ``started``, ``resized``,
    # ``preempted``, ``requeued``, ``succeeded``, ``failed``, ``cancelled``); absent on the
    # cycle's refreshes of pending reasons.
    event: NotRequired[str]
    time: str


class JobsStatusPayload(TypedDict):
    """Several job.status updates of one team, in order (one cycle's pending reasons, or the jobs
    one transaction started, finished or cancelled)."""

    type: Literal["jobs.status"]
    jobs: list[JobStatusPayload]
    time: str


class NodeStatusPayload(TypedDict):
    type: Literal["node.status"]
    node: str
    state: str
    # Only while down: the state it comes back to ("draining" | "quarantined"), blank for ready,
    # so a view can show the hold and offer the release that lifts it.
    resume_state: str
    # Why the cluster itself keeps new work off a node the platform has ready (a site admin's
    # drain, an active reservation), blank when it does not (scheduler.models.Node.cluster_hold).
    cluster_hold: str
    health: float
    # GPU index -> "free" | "in use"; never a job's name (other teams see this group too).
    gpus: dict[str, str]
    time: str


class ClusterUtilizationPayload(TypedDict):
    type: Literal["cluster.utilization"]
    # node -> GPU index -> utilization 0..1; only the nodes sampled. Never a job's name.
    nodes: dict[str, dict[str, float]]
    time: str


class NodeEventPayload(TypedDict):
    """A node event for platform admins (quarantine, failure, release), never a job's name."""

    type: Literal["node.event"]
    node: str
    kind: str
    message: str
    time: str


class WhatIfProgressPayload(TypedDict):
    """Where a what-if replay is (platform admins only): its status, the fraction done (0..1)
    and a sentence; ``error`` once it failed."""

    type: Literal["whatif.progress"]
    run: int
    status: str
    fraction: float
    text: str
    error: str
    time: str


# ------------------------------------------------------------------------------ publication

# A payload as published: one of the TypedDicts above, as a plain dict (``dict(payload)``).
Payload: TypeAlias = dict[str, Any]
Message: TypeAlias = tuple[str, Payload]  # (group, payload)
Listener: TypeAlias = Callable[[list[Message]], object]

# Called with each committed batch of (group, payload) messages; see ``subscribe``.
_listeners: list[Listener] = []


def subscribe(listener: Listener) -> None:
    """Register ``listener(messages)`` to hear every committed batch (idempotent per listener).
    It runs in the publishing thread right after commit: it must be quick and never block (hand
    real work to Celery)."""
    if listener not in _listeners:
        _listeners.append(listener)


def _tell_listeners(messages: list[Message]) -> None:
    for listener in list(_listeners):
        try:
            listener(messages)
        except Exception:  # a listener's fault must never break scheduling or a request
            log.warning("stream listener %r failed", listener, exc_info=True)


def publish(group: str, payload: Payload) -> None:
    """Send ``payload`` to ``group`` once the current transaction (if any) has committed."""
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        _send_many([(group, payload)])
        return
    outbox = _outbox(connection)
    # One hook per message, so Django drops it with a rolled-back savepoint...
    transaction.on_commit(lambda: outbox.staged.append((group, payload)))
    # ...and after it a flush that sends only if it is the transaction's last: the messages of
    # one transaction go out together. Appended without savepoint ids, as a savepoint rollback
    # must not drop the flush of the messages published before it; never reordered, so
    # Django's captureOnCommitCallbacks (which slices this list) sees every hook.
    outbox.seq += 1
    seq = outbox.seq

    def flush() -> None:
        if seq == outbox.seq:
            messages, outbox.staged = outbox.staged, []
            _send_many(messages)

    connection.run_on_commit.append((set(), flush, True))


class _Outbox:
    """The messages of one connection's committing transaction, staged by their hooks."""

    def __init__(self) -> None:
        self.staged: list[Message] = []
        self.seq = 0  # of the newest flush hook; only that one sends


def _outbox(connection: BaseDatabaseWrapper) -> _Outbox:
    # A Django connection belongs to one thread: the outbox lives on the connection object.
    outbox = getattr(connection, "_stream_outbox", None)
    if outbox is None:
        # Our own attribute on Django's connection object, unknown to its stubs.
        outbox = connection._stream_outbox = _Outbox()  # type: ignore[attr-defined]  # noqa: SLF001
    return outbox


def _send(group: str, payload: Payload) -> None:
    """Send one payload now (no transaction involved)."""
    _send_many([(group, payload)])


def coalesce(messages: Iterable[Message], now: str) -> dict[str, list[Payload]]:
    """Messages grouped by group, in order; consecutive job updates to one group merged into
    ``jobs.status`` batches of at most BATCH_MAX_JOBS (a lone update stays a ``job.status``)."""
    frames: dict[str, list[Payload]] = {}
    batches: set[int] = set()  # id() of the batch frames built here (their lists may grow)
    for group, payload in messages:
        out = frames.setdefault(group, [])
        kind = payload.get("type")
        if kind not in ("job.status", "jobs.status"):
            out.append(payload)
            continue
        for item in payload["jobs"] if kind == "jobs.status" else [payload]:
            last = out[-1] if out else None
            if last is not None and id(last) in batches and len(last["jobs"]) < BATCH_MAX_JOBS:
                last["jobs"].append(item)
            else:
                out.append({"type": "jobs.status", "jobs": [item], "time": now})
                batches.add(id(out[-1]))
    return {
        group: [f["jobs"][0] if id(f) in batches and len(f["jobs"]) == 1 else f for f in out]
        for group, out in frames.items()
    }


def _send_many(messages: list[Message]) -> None:
    if not messages:
        return
    _tell_listeners(messages)
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        frames = {
            group: [json.dumps(payload) for payload in payloads]
            for group, payloads in coalesce(messages, timezone.now().isoformat()).items()
        }
        if isinstance(layer, InMemoryChannelLayer):
            _send_in_memory(layer, frames)
        else:
            _wait(asyncio.run_coroutine_threadsafe(_deliver(layer, frames), _sender_loop()))
    except Exception:  # a dead channel layer must never break scheduling
        log.warning("could not publish %d stream messages", len(messages), exc_info=True)


async def _deliver(layer: BaseChannelLayer, frames: dict[str, list[str]]) -> None:
    async def to_group(group: str, texts: list[str]) -> None:
        for text in texts:  # in order within a group; the groups go out side by side
            # "group" lets one listener per server loop (frontend/hub.py) route the message.
            await layer.group_send(group, {"type": "stream.message", "group": group, "text": text})

    results = await asyncio.gather(
        *(to_group(group, texts) for group, texts in frames.items()), return_exceptions=True
    )
    for group, result in zip(frames, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("could not publish to %s", group, exc_info=result)


def _wait(future: Future[None]) -> None:
    try:
        future.result(timeout=SEND_TIMEOUT_S)
    except FutureTimeout:
        log.warning("stream publication still pending after %.0f s", SEND_TIMEOUT_S)


# A process-wide event loop in a daemon thread that sends to network channel layers (Redis): its
# connection stays open between commits, where a fresh loop per commit (async_to_sync from a sync
# thread) would connect anew each time. Recreated after a fork (Celery's prefork children).
_sender: tuple[int, asyncio.AbstractEventLoop] | None = None
_sender_lock = threading.Lock()


def _sender_loop() -> asyncio.AbstractEventLoop:
    global _sender
    with _sender_lock:
        if _sender is None or _sender[0] != os.getpid() or _sender[1].is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="stream-sender", daemon=True).start()
            _sender = (os.getpid(), loop)
        return _sender[1]


# The in-memory layer (the embedded demo) keeps each socket's messages in an asyncio.Queue of
# the server's event loop; putting into it from another thread (the in-process scheduling loop)
# would not wake that loop, so delivery would wait for its next unrelated I/O. The consumer
# registers the server's loop here and publications are handed to it thread-safely.
_server_loop: asyncio.AbstractEventLoop | None = None


def register_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the websocket consumer (in-memory layer only): the loop its sockets run on."""
    global _server_loop
    _server_loop = loop


def _send_in_memory(layer: InMemoryChannelLayer, frames: dict[str, list[str]]) -> None:
    loop = _server_loop
    if loop is None or loop.is_closed() or not loop.is_running():
        # No socket has connected to a live loop: nobody can be listening, nothing to wake.
        from asgiref.sync import async_to_sync

        async_to_sync(_deliver)(layer, frames)
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:  # called from sync code on the server's own loop: do not block it
        loop.create_task(_deliver(layer, frames))
    else:
        _wait(asyncio.run_coroutine_threadsafe(_deliver(layer, frames), loop))
