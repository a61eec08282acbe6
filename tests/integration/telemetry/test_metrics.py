"""``/metrics``: who may scrape it, and that it exposes the cycle, queue, GPU, fragmentation and
request-latency series, computed from the database in a bounded number of queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from scheduler.loop.cycle import run_cycle
from scheduler.models import Allocation, Job, Node, NodeState
from scheduler.states import JobState

pytestmark = pytest.mark.django_db


def scrape(client) -> dict[str, dict[tuple, float]]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(series, name, **labels):
    return series[name][tuple(sorted(labels.items()))]


def test_anonymous_and_ordinary_users_cannot_scrape(platform, client):
    assert client.get("/metrics").status_code in (401, 403)
    client.force_login(platform["alice"])
    assert client.get("/metrics").status_code == 403


def test_prometheus_scrapes_with_the_bearer_token(platform, client, settings):
    settings.METRICS_BEARER_TOKEN = "scrape-secret"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code in (401, 403)
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert response.status_code == 200
    assert b"gpuplatform_gpus" in response.content


def hold(job, node, gpus, now):
    for g in gpus:
        Allocation.objects.create(job=job, node=node, gpu_index=g, started_at=now)


def make_job(
    platform,
    priorities,
    gpu_models,
    *,
    user="alice",
    workers=1,
    per_worker=1,
    state="pending",
    model="h100",
    priority="research",
):
    user = platform[user]
    return Job.objects.create(
        team=user.memberships.first().team,
        submitter=user,
        name="j",
        workers=workers,
        gpus_per_worker=per_worker,
        gpu_model=gpu_models[model],
        priority_class=priorities[priority],
        state=state,
        submitted_at=timezone.now() - timedelta(minutes=1),
    )


def test_metrics_expose_queue_gpus_fragmentation_and_health(
    platform, priorities, gpu_models, cluster, client, django_assert_max_num_queries
):
    now = timezone.now()
    n1, n2, n3, n4 = (cluster.nodes.get(name=f"n{i}") for i in range(1, 5))
    running = make_job(platform, priorities, gpu_models, state=JobState.RUNNING, per_worker=7)
    hold(running, n1, range(7), now)
    other = make_job(
        platform, priorities, gpu_models, state=JobState.RUNNING, per_worker=7, user="bob"
    )
    hold(other, n2, range(7), now)
    # Two h100 GPUs free, one per node: a 2-GPU job fits by count, not by shape.
    make_job(platform, priorities, gpu_models, per_worker=2)
    make_job(platform, priorities, gpu_models, per_worker=1, user="bob", priority="production")
    make_job(platform, priorities, gpu_models, per_worker=1, user="bob", priority="production")
    Node.objects.filter(pk=n3.pk).update(state=NodeState.QUARANTINED, health=0.2)
    Node.objects.filter(pk=n4.pk).update(state=NodeState.DOWN)
    client.force_login(platform["admin"])
    client.get("/metrics")  # warm the session and imports
    with django_assert_max_num_queries(8):  # session + user + the collector's five queries
        series = scrape(client)
    assert value(series, "gpuplatform_jobs_pending", team="vision", priority="research") == 1
    assert value(series, "gpuplatform_jobs_pending", team="nlp", priority="production") == 2
    assert value(series, "gpuplatform_jobs_running", team="nlp") == 1
    gpus = {
        state: value(series, "gpuplatform_gpus", gpu_model="h100-80gb", state=state)
        for state in ("allocated", "idle", "quarantined", "down", "draining")
    }
    assert gpus == {"allocated": 14, "idle": 2, "quarantined": 0, "down": 0, "draining": 0}
    assert value(series, "gpuplatform_gpus", gpu_model="a100-40gb", state="quarantined") == 8
    assert value(series, "gpuplatform_gpus", gpu_model="a100-40gb", state="down") == 8
    assert value(series, "gpuplatform_fragmentation_idle_gpus", gpu_model="h100-80gb") == 2
    assert value(series, "gpuplatform_fragmentation_blocked_jobs", gpu_model="h100-80gb") == 1
    assert value(series, "gpuplatform_fragmentation_idle_gpus", gpu_model="a100-40gb") == 0
    assert value(series, "gpuplatform_node_health", node="n3") == 0.2


def test_cycle_durations_and_request_latency_are_recorded(platform, client, settings, submit):
    """The registry is per process (counts from earlier tests stay): compare before and after."""
    assert settings.MIDDLEWARE[0] == "telemetry.metrics.RequestLatencyMiddleware"
    client.force_login(platform["admin"])
    before = scrape(client)
    assert submit(platform["alice"]).status_code == 201
    assert run_cycle(sync=False).started
    client.get("/api/v1/jobs/")
    after = scrape(client)

    def grew(name, key=()):
        def total(series):
            values = series.get(name, {})
            return values.get(key, 0) if key else sum(values.values())

        return total(after) - total(before)

    assert grew("gpuplatform_scheduler_cycle_seconds_count") == 1
    assert grew("gpuplatform_scheduler_decide_seconds_count") == 1
    assert grew("gpuplatform_scheduler_jobs_started_total") == 1
    get_jobs = (("method", "GET"), ("route", "api/v1/jobs/"), ("status", "2xx"))
    post_jobs = (("method", "POST"), ("route", "api/v1/jobs/"), ("status", "2xx"))
    assert grew("gpuplatform_http_request_duration_seconds_count", get_jobs) == 1
    assert grew("gpuplatform_http_request_duration_seconds_count", post_jobs) == 1
    buckets = after["gpuplatform_scheduler_cycle_seconds_bucket"]
    assert (("le", "+Inf"),) in buckets


def test_openmetrics_is_served_when_prometheus_asks_for_it(platform, client, settings):
    settings.METRICS_BEARER_TOKEN = "scrape-secret"
    response = client.get(
        "/metrics",
        HTTP_AUTHORIZATION="Bearer scrape-secret",
        HTTP_ACCEPT="application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")
