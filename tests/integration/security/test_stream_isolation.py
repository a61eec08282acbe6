"""Every kind of live message team B's activity publishes, heard through the real ASGI stack
(Redis channel layer when ``REDIS_URL`` is set): team A's member, team A's viewer and the owner
of the parent team of both, each on a socket asking for every topic, hear none of it, and
cannot open team B's job log socket; team B's member hears its own news; the platform admin
alone hears node events.

``test_websocket_permissions`` checks job status changes; this walks the other publishers
(job arrays, idle GPUs, budget alerts, quota decisions, node events and states), since a
message published to a shared group instead of the team's reaches everyone.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from billing.models import Budget
from gpuplatform.asgi import application
from scheduler import arrays, services
from scheduler.models import NodeEvent
from tenants import quotas as quota_services
from tests.integration.roles import make_user

from .test_websocket_permissions import _headers

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "bravo-stream-secret"
ALL_TOPICS = "jobs,cluster,utilization,whatif"


def _team_b_activity(bob, nick, admin, gpu_models, node) -> None:
    """What team B (nlp) does, through the services that publish it."""
    from billing.services import _budget_alerts
    from telemetry.idle import _publish_idle

    job = services.job_submit(
        user=bob,
        request=services.JobRequest(name=f"{MARKER}-job", team="nlp", workers=1, gpus_per_worker=1),
    )
    arrays.array_submit(
        user=bob,
        request=arrays.ArrayRequest(
            name=f"{MARKER}-array",
            team="nlp",
            template={"workers": 1, "gpus_per_worker": 1},
            items=[{}],
        ),
    )
    now = timezone.now()
    _publish_idle(job, True, now, 0.0, now)
    month = date(now.year, now.month, 1)
    budget = Budget.objects.create(team=job.team, month=month, amount=Decimal("10"))
    _budget_alerts(budget, Decimal("100"), set(), month, now)
    request = quota_services.quota_request_create(
        user=nick,
        team=job.team,
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=2,
        borrow_limit_gpus=0,
        reason="more",
    )
    quota_services.quota_request_reject(
        user=admin, request_id=request.pk, comment=f"{MARKER}-comment"
    )
    services.node_event_record(
        node=node, kind=NodeEvent.Kind.QUARANTINED, message=f"{MARKER}-node-reason", now=now
    )


async def _heard(socket, timeout: float = 1.0) -> list[str]:
    out = []
    while not await socket.receive_nothing(timeout=timeout):
        out.append(await socket.receive_from(timeout=timeout))
    return out


def test_no_live_message_of_team_b_reaches_team_a_or_the_parent_team(
    platform, teams, gpu_models, nick
):
    cluster = platform["cluster"]
    node = cluster.nodes.order_by("pk").first()
    rhea = make_user("rhea", teams["research"], "owner")  # owns the parent of vision and nlp
    listeners = {
        "alice": platform["alice"],  # member of vision
        "charlie": platform["charlie"],  # viewer of vision
        "rhea": rhea,
        "bob": platform["bob"],  # member of nlp: hears its own team
        "admin": platform["admin"],
    }
    headers = {name: _headers(user) for name, user in listeners.items()}

    async def scenario():
        sockets = {}
        for name, h in headers.items():
            socket = WebsocketCommunicator(application, f"/ws/stream/?topics={ALL_TOPICS}", h)
            connected, _ = await socket.connect()
            assert connected
            assert (await socket.receive_json_from(timeout=2))["type"] == "hello"
            sockets[name] = socket
        await database_sync_to_async(_team_b_activity)(
            platform["bob"], nick, platform["admin"], gpu_models, node
        )
        heard = {name: await _heard(socket) for name, socket in sockets.items()}
        for socket in sockets.values():
            await socket.disconnect()
        return heard

    heard = async_to_sync(scenario)()
    for name in ("alice", "charlie", "rhea"):
        leaked = [text for text in heard[name] if MARKER in text or '"nlp"' in text]
        assert leaked == [], (name, leaked)
    bob_heard = "\n".join(heard["bob"])
    for kind in ("job.status", "array.status", "job.idle", "budget.alert", "quota_request"):
        assert kind in bob_heard, (kind, heard["bob"])
    assert f"{MARKER}-node-reason" not in bob_heard  # node events are the admins'
    assert any(f"{MARKER}-node-reason" in text for text in heard["admin"])


def test_team_a_cannot_open_team_b_job_log_socket(platform, teams):
    rhea = make_user("rhea", teams["research"], "owner")
    job = services.job_submit(
        user=platform["bob"],
        request=services.JobRequest(name=f"{MARKER}-job", team="nlp", workers=1, gpus_per_worker=1),
    )
    headers = {
        name: _headers(user)
        for name, user in (
            ("alice", platform["alice"]),
            ("charlie", platform["charlie"]),
            ("rhea", rhea),
        )
    }

    async def scenario():
        codes = {}
        for name, h in headers.items():
            socket = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/log/", h)
            connected, _ = await socket.connect()
            output = await socket.receive_output(timeout=2) if connected else {"code": None}
            codes[name] = (output.get("code"), MARKER in str(output))
            await socket.disconnect()
        return codes

    codes = async_to_sync(scenario)()
    assert codes == {name: (4404, False) for name in headers}, codes
