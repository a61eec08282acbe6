"""Rollups (idempotent, late samples counted), retention pruning, and the rate-limited tick."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from telemetry.models import GpuErrorEvent, GpuRollup, GpuSample
from telemetry.rollups import rollup_build, telemetry_prune
from telemetry.services import TICK_CACHE_KEY, samples_ingest, telemetry_tick

from .conftest import make_sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def now():
    return timezone.now().replace(second=30, microsecond=0)


def test_rollups_aggregate_each_gpu_minute_and_rerunning_is_idempotent(node1, now):
    minute = now - timedelta(minutes=3)
    samples = [
        make_sample(gpu=0, at=minute.replace(second=s), utilization=u, temperature_c=t, power_w=p)
        for s, u, t, p in ((5, 10.0, 60, 100.0), (25, 30.0, 90, None), (45, 50.0, 70, 300.0))
    ]
    samples_ingest(node=node1, body={"samples": samples}, now=now)
    assert rollup_build(now=now) == 1
    r = GpuRollup.objects.get()
    assert r.bucket == minute.replace(second=0)
    assert (r.samples, r.util_avg, r.util_max, r.temperature_max_c) == (3, 30.0, 50.0, 90)
    assert r.power_avg_w == 200.0  # the GPU that reported no power is not counted as 0 W
    assert r.throttled == 1  # 90 °C is at or above the thermal rule's 87 °C
    assert rollup_build(now=now) == 0  # nothing new
    assert GpuRollup.objects.count() == 1


def test_a_late_sample_is_counted_by_the_next_rollup(node1, now):
    minute = now - timedelta(minutes=2)
    samples_ingest(
        node=node1, body={"samples": [make_sample(gpu=1, at=minute, utilization=10.0)]}, now=now
    )
    rollup_build(now=now)
    later = now + timedelta(minutes=1)
    samples = [
        make_sample(gpu=1, at=minute, utilization=30.0),  # late, for a minute already rolled
        make_sample(gpu=1, at=now, utilization=50.0),  # and the agent's next minute
    ]
    samples_ingest(node=node1, body={"samples": samples}, now=later)
    assert rollup_build(now=later) == 2  # the new minute, and the late one re-rolled
    r = GpuRollup.objects.get(gpu_index=1, bucket=minute.replace(second=0))
    assert (r.samples, r.util_avg) == (2, 20.0)


def test_an_unfinished_minute_is_not_rolled_up(node1, now):
    samples_ingest(node=node1, body={"samples": [make_sample(gpu=0, at=now)]}, now=now)
    assert rollup_build(now=now) == 0


def test_prune_keeps_each_table_for_its_retention(node1, now, settings):
    settings.TELEMETRY_RAW_RETENTION_SECONDS = 3600
    settings.TELEMETRY_ROLLUP_RETENTION_SECONDS = 86400
    row = dict(
        node=node1,
        gpu_index=0,
        utilization=1.0,
        memory_used_mib=1,
        memory_total_mib=2,
        temperature_c=40,
        power_w=1.0,
    )
    GpuSample.objects.bulk_create(
        [GpuSample(time=now - timedelta(minutes=m), **row) for m in (10, 50, 70, 300)]
    )
    rollup = dict(
        node=node1,
        gpu_index=0,
        samples=1,
        util_avg=1,
        util_max=1,
        memory_used_max_mib=1,
        memory_total_mib=2,
        temperature_max_c=40,
    )
    GpuRollup.objects.bulk_create(
        [GpuRollup(bucket=now - timedelta(hours=h), **rollup) for h in (2, 23, 25)]
    )
    GpuErrorEvent.objects.create(
        node=node1, gpu_index=0, time=now - timedelta(days=31), kind="xid", code=79
    )
    GpuErrorEvent.objects.create(node=node1, gpu_index=0, time=now, kind="xid", code=79)
    deleted = telemetry_prune(now=now, chunk=1)  # chunked: several short deletes
    assert deleted == {"gpusample": 2, "gpurollup": 1, "gpuerrorevent": 1}
    assert GpuSample.objects.count() == 2 and GpuRollup.objects.count() == 2
    assert telemetry_prune(now=now) == {"gpusample": 0, "gpurollup": 0, "gpuerrorevent": 0}


def test_the_tick_runs_once_per_period_and_does_all_steps(node1, now):
    cache.delete(TICK_CACHE_KEY)
    samples_ingest(
        node=node1,
        body={"samples": [make_sample(gpu=0, at=now - timedelta(minutes=2))]},
        now=now,
    )
    assert telemetry_tick(now=now) is True
    assert GpuRollup.objects.count() == 1
    node1.refresh_from_db()
    assert node1.telemetry.health_evaluated_at == now
    assert telemetry_tick(now=now) is False  # claimed for TELEMETRY_EVALUATE_SECONDS
    assert telemetry_tick(now=now, force=True) is True
    cache.delete(TICK_CACHE_KEY)


def test_a_backlog_is_rolled_newest_first_a_bounded_number_of_minutes_a_call(node1, now):
    early = now - timedelta(hours=4)  # an agent back after a long outage, within retention
    late = now - timedelta(minutes=5)
    for at in (early, late):
        samples_ingest(node=node1, body={"samples": [make_sample(gpu=0, at=at)]}, now=now)
    assert rollup_build(now=now, max_minutes=1) == 1  # the current minutes are not held back
    assert list(GpuRollup.objects.values_list("bucket", flat=True)) == [late.replace(second=0)]
    assert rollup_build(now=now, max_minutes=1) == 1  # then the backlog
    assert rollup_build(now=now, max_minutes=1) == 0
    assert set(GpuRollup.objects.values_list("bucket", flat=True)) == {
        early.replace(second=0),
        late.replace(second=0),
    }


def test_a_minute_partly_past_the_raw_retention_keeps_its_rollup(node1, now, settings):
    settings.TELEMETRY_RAW_RETENTION_SECONDS = 3600
    minute = (now - timedelta(minutes=58)).replace(second=0)
    samples = [make_sample(gpu=0, at=minute + timedelta(seconds=s)) for s in (5, 50)]
    samples_ingest(node=node1, body={"samples": samples}, now=now)
    assert rollup_build(now=now) == 1
    # Two minutes on, the minute's first samples are past the retention (pruned) when a late
    # one arrives for it: re-rolled from what is left, its rollup would lose samples.
    later = now + timedelta(minutes=2)
    telemetry_prune(now=later)
    assert GpuSample.objects.count() == 1  # the one at 50 s
    late = [make_sample(gpu=0, at=minute + timedelta(seconds=55), utilization=90.0)]
    samples_ingest(node=node1, body={"samples": late}, now=later)
    assert rollup_build(now=later) == 0
    r = GpuRollup.objects.get()
    assert (r.samples, r.util_avg) == (2, 50.0)
