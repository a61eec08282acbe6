"""Idle jobs: a running job whose GPUs stay below 5 % for 30 minutes is flagged (job event, team
stream, ``job_idle_status``), unflagged when busy again; billing reads idle GPU-seconds."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from core import streams
from scheduler.models import Allocation, Job, JobEvent
from scheduler.states import JobState
from telemetry.idle import idle_evaluate
from telemetry.rollups import rollup_build
from telemetry.selectors import (
    billing_idle_fractions,
    job_idle_gpu_seconds,
    job_idle_status,
    job_utilization,
)
from telemetry.services import samples_ingest

from .conftest import make_sample

pytestmark = pytest.mark.django_db


def feed(node, gpus, minutes, util, now, first=1):
    """One sample per GPU per minute for minutes first..minutes ago."""
    samples = [
        make_sample(gpu=g, at=now - timedelta(minutes=m), utilization=util)
        for m in range(first, minutes + 1)
        for g in gpus
    ]
    samples_ingest(node=node, body={"samples": samples}, now=now)


@pytest.fixture
def team_stream(teams, settings):
    # The in-memory layer: this test reads the stream from several short-lived event loops,
    # which a Redis layer's per-loop connections do not allow (the Redis path is covered by the
    # consumer tests).
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(streams.team_group(teams["vision"].pk), channel)

    async def take():
        out = []
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=0.2)
            except TimeoutError:
                return out
            out.append(json.loads(message["text"]))  # serialised once by the publisher

    yield lambda: async_to_sync(take)()
    channel_layers.backends.clear()  # later tests get the configured layer again


def test_a_job_idle_for_thirty_minutes_is_flagged_then_cleared_when_busy(
    running_job, now, team_stream, django_capture_on_commit_callbacks
):
    job, node = running_job("idler")
    feed(node, (0, 1), 35, util=1.5, now=now)
    assert rollup_build(now=now) == 70
    with django_capture_on_commit_callbacks(execute=True):
        assert idle_evaluate(now=now) == ([job.pk], [])
    status = job_idle_status(job)
    assert status["idle"] is True and status["utilization_pct"] == 1.5
    assert status["since"] == now - timedelta(minutes=30)
    event = JobEvent.objects.get(job=job, kind="idle")
    assert event.message == "GPUs below 5% utilization for 30 min (average 1.5%)"
    (payload,) = [p for p in team_stream() if p["type"] == "job.idle"]
    assert (payload["job"], payload["idle"], payload["utilization"]) == (job.pk, True, 1.5)
    # Re-running changes nothing.
    assert idle_evaluate(now=now) == ([], [])
    assert JobEvent.objects.filter(job=job, kind="idle").count() == 1

    later = now + timedelta(minutes=3)
    feed(node, (0, 1), 2, util=85.0, now=later)
    rollup_build(now=later)
    with django_capture_on_commit_callbacks(execute=True):
        assert idle_evaluate(now=later) == ([], [job.pk])
    assert job_idle_status(job)["idle"] is False
    assert JobEvent.objects.filter(job=job, kind="idle_cleared").count() == 1
    assert [p["idle"] for p in team_stream() if p["type"] == "job.idle"] == [False]


def test_busy_young_and_unobserved_jobs_are_not_flagged(running_job, now):
    busy, n1 = running_job("busy", gpus=(0, 1))
    feed(n1, (0, 1), 35, util=30.0, now=now)
    # One GPU of four busy is enough to not be idle.
    mixed, n2 = running_job("mixed", node_name="n2", gpus=(0, 1, 2, 3))
    feed(n2, (0, 1, 2), 35, util=0.0, now=now)
    feed(n2, (3,), 35, util=40.0, now=now)
    young, n3 = running_job("young", node_name="n3", minutes_ago=10)
    feed(n3, (0, 1), 9, util=0.0, now=now)
    unobserved, _ = running_job("dark", node_name="n4")
    rollup_build(now=now)
    assert idle_evaluate(now=now) == ([], [])
    for job in (busy, mixed, young, unobserved):
        assert job_idle_status(job)["idle"] is False


def test_gaps_in_telemetry_are_unknown_not_idle(running_job, now):
    job, node = running_job("gappy")
    feed(node, (0, 1), 35, util=0.0, now=now, first=20)  # only 16 minutes observed
    rollup_build(now=now)
    assert idle_evaluate(now=now) == ([], [])


def test_a_finished_jobs_flag_is_cleared_silently(running_job, now):
    job, node = running_job("idler")
    feed(node, (0, 1), 35, util=0.0, now=now)
    rollup_build(now=now)
    idle_evaluate(now=now)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=now)
    Allocation.objects.filter(job=job).update(ended_at=now)
    assert idle_evaluate(now=now) == ([], [job.pk])
    assert not JobEvent.objects.filter(job=job, kind="idle_cleared").exists()


def test_idle_gpu_seconds_for_billing(running_job, now):
    job, node = running_job("half-idle", minutes_ago=40)
    feed(node, (0, 1), 20, util=0.5, now=now, first=11)  # minutes 11..20 ago: 10 idle minutes
    feed(node, (0, 1), 10, util=70.0, now=now)  # the last 10 minutes busy
    other, n2 = running_job("busy", node_name="n2", minutes_ago=40)
    feed(n2, (0, 1), 20, util=90.0, now=now)
    rollup_build(now=now)
    start, end = now - timedelta(hours=1), now
    assert job_idle_gpu_seconds(start=start, end=end) == {job.pk: 2 * 10 * 60.0, other.pk: 0.0}
    assert job_idle_gpu_seconds(start=start, end=end, job_ids=[job.pk]) == {job.pk: 1200.0}
    assert job_idle_gpu_seconds(start=start, end=end, job_ids=[]) == {}
    # A range covering half the idle stretch (minute resolution: buckets starting inside it).
    half = now.replace(second=0) - timedelta(minutes=15)
    part = job_idle_gpu_seconds(start=half, end=end, job_ids=[job.pk])
    assert part == {job.pk: 2 * 5 * 60.0}

    series = job_utilization(job, minutes=30, now=now)
    assert [round(p["utilization_pct"], 1) for p in series] == [0.5] * 10 + [70.0] * 10
    assert {p["gpus"] for p in series} == {2}


def test_idle_fractions_in_billings_idle_source_shape(running_job, now):
    from billing.usage import UsageSlice

    job, node = running_job("half-idle", minutes_ago=40)
    feed(node, (0,), 20, util=0.5, now=now, first=11)
    rollup_build(now=now)
    alloc = Allocation.objects.get(job=job, gpu_index=0)
    alloc1 = Allocation.objects.get(job=job, gpu_index=1)
    hour = now.replace(minute=0)
    observed = UsageSlice(alloc.pk, node.pk, 0, hour, now - timedelta(minutes=40), now)
    dark = UsageSlice(alloc1.pk, node.pk, 1, hour, now - timedelta(minutes=40), now)
    fractions = billing_idle_fractions([observed, dark])
    assert fractions == {(alloc.pk, hour): pytest.approx(10 / 40)}
