"""The ingest API: per-node token authentication, whole-batch storage, and 400s that name the bad
field while storing nothing."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from gpuagent.agent import SampleBuffer, Sender, SimulatedSource
from telemetry.models import GpuErrorEvent, GpuSample, NodeAgentToken, NodeTelemetry
from telemetry.services import node_token_issue, node_token_revoke

from .conftest import make_sample

pytestmark = pytest.mark.django_db


def test_a_valid_batch_is_stored_for_the_tokens_node(post_batch, node1):
    now = timezone.now()
    samples = [
        make_sample(gpu=g, at=now - timedelta(seconds=s), utilization=10.0 * g)
        for s in (2, 1)
        for g in range(8)
    ]
    samples[3]["ecc_sbe"] = 2
    response = post_batch(samples, agent={"version": "1.0", "dropped": 7})
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 16, "errors": 1, "duplicate": False}
    rows = GpuSample.objects.filter(node=node1)
    assert rows.count() == 16
    assert sorted(set(rows.values_list("gpu_index", flat=True))) == list(range(8))
    assert (
        GpuSample.objects.get(
            node=node1, gpu_index=5, time__gte=now - timedelta(seconds=1.5)
        ).utilization
        == 50.0
    )
    (error,) = GpuErrorEvent.objects.all()
    assert (error.node_id, error.gpu_index, error.kind, error.count) == (node1.pk, 3, "ecc_sbe", 2)
    seen = NodeTelemetry.objects.get(node=node1)
    assert (seen.samples_received, seen.agent_dropped, seen.agent_version) == (16, 7, "1.0")
    post_batch([make_sample()])
    assert NodeTelemetry.objects.get(node=node1).samples_received == 17


def test_a_bad_sample_refuses_the_whole_batch_naming_the_field(post_batch):
    samples = [make_sample(gpu=g) for g in range(3)] + [make_sample(gpu=3, utilization=140)]
    samples[1]["ecc_dbe"] = 1  # would quarantine the node if anything were stored
    response = post_batch(samples)
    assert response.status_code == 400
    assert response.json() == {"samples[3].utilization": ["must be between 0 and 100"]}
    assert GpuSample.objects.count() == 0
    assert GpuErrorEvent.objects.count() == 0
    assert NodeTelemetry.objects.count() == 0


def test_numbers_beyond_what_a_float_or_a_column_holds_are_400s_storing_nothing(post_batch):
    # JSON integers are unbounded: 10**309 overflowed float(), 2**63 the 63-bit column (500s)
    sample = make_sample(gpu=0)
    sample["time"] = 10**309
    response = post_batch([sample])
    assert response.status_code == 400 and list(response.json()) == ["samples[0].time"]
    response = post_batch([make_sample(gpu=1)], agent={"dropped": 2**63})
    assert response.status_code == 400
    assert response.json() == {
        "agent.dropped": ["must be an integer from 0 to 1,000,000,000,000,000"]
    }
    assert GpuSample.objects.count() == 0 and NodeTelemetry.objects.count() == 0


def test_gpu_index_is_checked_against_the_nodes_gpu_count(post_batch):
    response = post_batch([make_sample(gpu=8)])
    assert response.status_code == 400
    assert response.json() == {"samples[0].gpu": ["must be an integer between 0 and 7"]}


@pytest.mark.parametrize("header", [None, "Bearer gpn_not-a-token", "Bearer gpt_user-token-shape"])
def test_without_a_valid_node_token_nothing_is_stored(header, client):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.post(
        "/api/v1/telemetry/samples",
        {"samples": [make_sample()]},
        content_type="application/json",
        **extra,
    )
    assert response.status_code == 401
    assert GpuSample.objects.count() == 0


def test_a_signed_in_user_is_not_an_agent(platform, client, cluster):
    client.force_login(platform["admin"])
    response = client.post(
        "/api/v1/telemetry/samples", {"samples": [make_sample()]}, content_type="application/json"
    )
    assert response.status_code in (401, 403)
    assert GpuSample.objects.count() == 0


def test_a_revoked_token_stops_working_and_a_rotated_one_works(post_batch, node1, agent_token):
    token = NodeAgentToken.objects.get(node=node1)
    assert token.key_hash != agent_token and agent_token.startswith("gpn_")
    _, fresh = node_token_issue(node=node1)
    assert node_token_revoke(token=token) is True
    assert post_batch([make_sample()]).status_code == 401
    assert post_batch([make_sample()], token=fresh).status_code == 202
    assert node_token_revoke(token=token) is False


def test_the_token_pins_the_node(cluster, post_batch):
    n2 = cluster.nodes.get(name="n2")
    _, token2 = node_token_issue(node=n2)
    assert post_batch([make_sample(gpu=1)], token=token2).status_code == 202
    assert list(GpuSample.objects.values_list("node__name", flat=True)) == ["n2"]


def test_the_agents_own_batches_are_accepted(post_batch, node1):
    """Wire compatibility: what ``gpuagent`` sends, the platform stores."""
    buffer = SampleBuffer(100)
    buffer.extend(SimulatedSource(gpus=8).read(time.time() - 1))
    body = json.loads(Sender("http://unused", "gpn_x", buffer).body(buffer.peek(100)))
    response = post_batch(body["samples"], agent=body["agent"])
    assert response.status_code == 202, response.content
    assert GpuSample.objects.filter(node=node1).count() == 8


def test_the_management_command_prints_a_working_token(cluster, node1, post_batch):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("telemetry_issue_token", "test", "n1", "--revoke-others", stdout=out)
    raw = out.getvalue().strip()
    assert raw.startswith("gpn_")
    assert NodeAgentToken.objects.filter(node=node1, revoked_at__isnull=True).count() == 1
    assert post_batch([make_sample()], token=raw).status_code == 202


def test_the_admin_action_on_nodes_issues_a_token(platform, client, node1):
    client.force_login(platform["admin"])
    response = client.post(
        "/admin/scheduler/node/",
        {"action": "issue_agent_token", "_selected_action": [node1.pk]},
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert len(shown) == 1 and shown[0].startswith("n1: gpn_")
    raw = shown[0].split()[1]
    token = NodeAgentToken.objects.get(node=node1)
    assert token.key_hash != raw and token.created_by == platform["admin"]


def test_admin_cannot_move_an_agent_token_or_bring_back_a_revoked_one(
    platform, client, node1, agent_token, post_batch
):
    """Posted to the token's admin page: moved to n2, n1's token reported as n2 (its samples
    could quarantine n2); its revocation cleared, a revoked (leaked) token worked again."""
    from telemetry.services import forget_cached_tokens

    token = NodeAgentToken.objects.get(node=node1)
    node_token_revoke(token=token)
    assert post_batch([make_sample()]).status_code == 401
    n2 = node1.cluster.nodes.get(name="n2")
    client.force_login(platform["admin"])
    response = client.post(
        f"/admin/telemetry/nodeagenttoken/{token.pk}/change/",
        {"node": n2.pk, "revoked_at_0": "", "revoked_at_1": ""},
    )
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.node == node1 and token.revoked_at is not None
    forget_cached_tokens()
    assert post_batch([make_sample()]).status_code == 401


def test_the_same_batch_sent_again_is_stored_once(post_batch, node1):
    """An agent retrying a batch whose answer it lost (issue 26, finding 14)."""
    now = timezone.now()
    samples = [make_sample(gpu=g, at=now - timedelta(seconds=1)) for g in range(8)]
    answers = [post_batch(samples).json() for _ in range(3)]
    assert answers[0] == {"accepted": 8, "errors": 0, "duplicate": False}
    assert answers[1] == answers[2] == {"accepted": 0, "errors": 0, "duplicate": True}
    assert GpuSample.objects.filter(node=node1).count() == 8
    # New readings are new, even one second later.
    later = [make_sample(gpu=g, at=now) for g in range(8)]
    assert post_batch(later).json()["accepted"] == 8
    assert GpuSample.objects.filter(node=node1).count() == 16
