"""Health scoring from telemetry: rules lower Node.health, quarantine a node (events streamed to
admins), and the loop releases it only after probation and a passing health check."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from core import streams
from scheduler.loop.observe import sync_all
from scheduler.models import Allocation, Job, Node, NodeEvent, NodeState
from scheduler.states import JobState
from telemetry.health_scoring import health_evaluate
from telemetry.models import NodeTelemetry
from telemetry.rollups import rollup_build
from telemetry.services import samples_ingest

from .conftest import make_sample

pytestmark = pytest.mark.django_db


def ingest(node, samples, now):
    return samples_ingest(node=node, body={"samples": samples}, now=now)


def kinds(node):
    return list(
        NodeEvent.objects.filter(node=node).order_by("time", "id").values_list("kind", flat=True)
    )


@pytest.fixture
def admin_stream():
    """Messages the admin group receives (the real in-memory channel layer)."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(streams.ADMIN_GROUP, channel)

    async def take():
        out = []
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=0.2)
            except TimeoutError:
                return out
            out.append(json.loads(message["text"]))  # serialised once by the publisher

    def drain():
        return async_to_sync(take)()

    yield drain
    async_to_sync(layer.group_discard)(streams.ADMIN_GROUP, channel)


def test_an_ecc_double_bit_error_quarantines_the_node_at_once(
    post_batch, node1, admin_stream, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_batch(
            [make_sample(gpu=g) for g in range(8)] + [make_sample(gpu=2, ecc_dbe=1)]
        )
    assert response.status_code == 202
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    assert node1.health == 0.0
    assert node1.state_reason == "health rule: 1 ECC double-bit error(s)"
    assert node1.probation_until is not None
    assert kinds(node1) == ["quarantined", "probation"]
    heard = admin_stream()
    assert [(m["type"], m["node"], m["kind"]) for m in heard] == [
        ("node.event", "n1", "quarantined"),
        ("node.event", "n1", "probation"),
    ]
    assert NodeTelemetry.objects.get(node=node1).health_reasons == ["1 ECC double-bit error(s)"]
    # The other nodes are untouched.
    assert set(Node.objects.exclude(pk=node1.pk).values_list("state", flat=True)) == {"ready"}


def test_after_probation_a_clean_node_passes_its_health_check_and_is_released(node1):
    now = timezone.now()
    ingest(node1, [make_sample(gpu=0, at=now - timedelta(seconds=1), ecc_dbe=1)], now)
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    # Still on probation: the loop keeps it out even though nothing new went wrong.
    sync_all(now=now + timedelta(seconds=60))
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    later = node1.probation_until + timedelta(seconds=1)
    ingest(node1, [make_sample(gpu=g, at=later - timedelta(seconds=2)) for g in range(8)], later)
    health_evaluate(now=later)
    node1.refresh_from_db()
    assert node1.health == 1.0  # judged on what happened since the quarantine
    sync_all(now=later)
    node1.refresh_from_db()
    assert node1.state == NodeState.READY and node1.probation_until is None
    assert kinds(node1) == ["quarantined", "probation", "released"]


def test_errors_during_probation_fail_the_health_check_and_keep_the_node_out(node1):
    now = timezone.now()
    ingest(node1, [make_sample(gpu=0, at=now - timedelta(seconds=1), ecc_dbe=1)], now)
    node1.refresh_from_db()
    mid = now + timedelta(seconds=120)
    ingest(node1, [make_sample(gpu=5, at=mid - timedelta(seconds=1), xid=[79, 79, 79])], mid)
    later = node1.probation_until + timedelta(seconds=5)
    health_evaluate(now=later)
    sync_all(now=later)
    node1.refresh_from_db()
    assert (node1.state, node1.health) == (NodeState.QUARANTINED, 0.4)
    last = NodeEvent.objects.filter(node=node1).order_by("time", "id").last()
    assert (last.kind, last.message) == (
        "probation",
        "health check failed (0.40 < 0.50: 3 XID error(s) (79)); stays quarantined",
    )


def test_the_release_threshold_is_a_setting_and_a_failure_is_announced_once(node1, settings):
    settings.SCHEDULER_RELEASE_MIN_HEALTH = 0.9
    now = timezone.now()
    ingest(node1, [make_sample(gpu=0, at=now - timedelta(seconds=1), ecc_dbe=1)], now)
    node1.refresh_from_db()
    mid = now + timedelta(seconds=120)
    ingest(node1, [make_sample(gpu=5, at=mid - timedelta(seconds=1), xid=[79])], mid)
    later = node1.probation_until + timedelta(seconds=5)
    health_evaluate(now=later)
    health_evaluate(now=later)
    sync_all(now=later)
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    events = list(NodeEvent.objects.filter(node=node1).order_by("time", "id"))
    assert [e.kind for e in events] == ["quarantined", "probation", "probation"]
    assert events[-1].message == (
        "health check failed (0.80 < 0.90: 1 XID error(s) (79)); stays quarantined"
    )


def test_repeated_xids_lower_health_then_quarantine(node1):
    now = timezone.now()
    ingest(node1, [make_sample(gpu=1, at=now - timedelta(seconds=30), xid=[74, 74])], now)
    node1.refresh_from_db()
    assert (node1.state, node1.health) == (NodeState.READY, 0.6)
    # Application XIDs are the job's fault, not the GPU's.
    ingest(node1, [make_sample(gpu=1, at=now - timedelta(seconds=20), xid=[13, 43])], now)
    node1.refresh_from_db()
    assert (node1.state, node1.health) == (NodeState.READY, 0.6)
    ingest(node1, [make_sample(gpu=1, at=now - timedelta(seconds=10), xid=[74])], now)
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    assert node1.state_reason == "health rule: 3 XID errors (74)"


def test_rules_come_from_settings(node1, settings):
    settings.TELEMETRY_HEALTH_RULES = {"xid": {"quarantine_at": 1}}
    now = timezone.now()
    ingest(node1, [make_sample(gpu=1, at=now - timedelta(seconds=1), xid=[74])], now)
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED


def test_thermal_throttling_quarantines_through_the_rollups(node1):
    now = timezone.now().replace(second=30, microsecond=0)
    samples = [
        make_sample(gpu=g, at=now - timedelta(minutes=m), temperature_c=80, throttle_thermal=True)
        for m in range(1, 11)
        for g in range(8)
    ]
    ingest(node1, samples, now)
    health_evaluate(now=now)
    node1.refresh_from_db()
    assert node1.state == NodeState.READY  # nothing rolled up yet: no thermal evidence
    assert rollup_build(now=now) == 80
    health_evaluate(now=now)
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    assert node1.health == 0.5
    assert node1.state_reason == "health rule: thermal throttling in 100% of samples"


def test_failed_jobs_of_several_users_lower_health_without_quarantine(
    platform, priorities, cluster
):
    node2 = cluster.nodes.get(name="n2")
    now = timezone.now()
    for i, user in enumerate([platform["alice"], platform["bob"], platform["alice"]]):
        job = Job.objects.create(
            team=user.memberships.first().team,
            submitter=user,
            name=f"crash{i}",
            workers=1,
            gpus_per_worker=1,
            priority_class=priorities["research"],
            state=JobState.FAILED,
            submitted_at=now - timedelta(minutes=20),
            finished_at=now - timedelta(minutes=5),
            attempts=1,
        )
        Allocation.objects.create(
            job=job,
            node=node2,
            gpu_index=i,
            started_at=now - timedelta(minutes=15),
            ended_at=now - timedelta(minutes=5),
        )
    health_evaluate(now=now)
    node2.refresh_from_db()
    assert (node2.state, node2.health) == (NodeState.READY, 0.8)
    assert NodeTelemetry.objects.get(node=node2).health_reasons == ["failed jobs of 2 user(s)"]


def test_a_down_node_gets_a_score_but_is_not_quarantined(node1):
    Node.objects.filter(pk=node1.pk).update(state=NodeState.DOWN)
    now = timezone.now()
    ingest(node1, [make_sample(gpu=0, at=now - timedelta(seconds=1), ecc_dbe=1)], now)
    node1.refresh_from_db()
    assert (node1.state, node1.health) == (NodeState.DOWN, 0.0)
    assert kinds(node1) == []


def test_scoring_the_whole_cluster_takes_a_fixed_number_of_queries(
    cluster, gpu_models, django_assert_max_num_queries
):
    for i in range(5, 45):
        Node.objects.create(
            cluster=cluster, name=f"n{i}", gpu_model=gpu_models["h100"], gpu_count=8
        )
    now = timezone.now()
    health_evaluate(now=now)  # the first run creates the bookkeeping rows
    with django_assert_max_num_queries(10):
        verdicts = health_evaluate(now=now + timedelta(seconds=60))
    assert len(verdicts) == 44 and {v.score for v in verdicts.values()} == {1.0}


def test_a_node_released_by_an_admin_is_not_requarantined_for_old_errors(node1, platform):
    from scheduler.services import node_release

    now = timezone.now()
    ingest(node1, [make_sample(gpu=0, at=now - timedelta(seconds=1), ecc_dbe=1)], now)
    node_release(user=platform["admin"], node_id=node1.pk)  # e.g. after replacing the GPU
    health_evaluate(now=timezone.now() + timedelta(seconds=5))
    node1.refresh_from_db()
    assert (node1.state, node1.health) == (NodeState.READY, 1.0)


def test_a_node_an_admin_drained_stays_out_after_a_health_quarantine(node1, platform):
    """An admin drains a node for maintenance; a health rule then quarantines it. The loop
    released it after the probation, straight back to service: the admin's drain was lost and
    new jobs went to the node under maintenance. A drained node a health rule quarantines now
    gets no probation: it stays out until an admin releases it."""
    from scheduler.services import node_drain, node_release

    admin = platform["admin"]
    node_drain(user=admin, node_id=node1.pk, reason="firmware update")
    now = timezone.now()
    ingest(node1, [make_sample(gpu=0, at=now - timedelta(seconds=1), ecc_dbe=1)], now)
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED and node1.probation_until is None
    later = now + timedelta(hours=1)  # any probation would be long over
    ingest(node1, [make_sample(gpu=g, at=later - timedelta(seconds=2)) for g in range(8)], later)
    health_evaluate(now=later)
    sync_all(now=later)
    node1.refresh_from_db()
    assert node1.state == NodeState.QUARANTINED
    assert "released" not in kinds(node1)
    node_release(user=admin, node_id=node1.pk)
    node1.refresh_from_db()
    assert node1.state == NodeState.READY


def test_repeats_of_an_xid_in_one_sample_count_as_repeated_xids(node1):
    """Stored as one row with a count, three XID 94s of one sample are still three XID errors:
    "repeated XIDs" quarantine the node, as three rows of one did."""
    now = timezone.now()
    result = ingest(node1, [make_sample(gpu=4, at=now - timedelta(seconds=1), xid=[94] * 3)], now)
    assert result.errors == 1
    node1.refresh_from_db()
    assert (node1.state, node1.health) == (NodeState.QUARANTINED, 0.4)
    assert node1.state_reason == "health rule: 3 XID errors (94)"
