"""Telemetry fixtures: a node token for n1, helpers to post batches as that node's agent, and
running jobs holding GPUs (``running_job``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Allocation, Job
from scheduler.states import JobState


@pytest.fixture(autouse=True)
def _fresh_cache():
    # Rate limits and the ingest's record of batches already stored live in the cache.
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def node1(cluster):
    return cluster.nodes.get(name="n1")


@pytest.fixture
def agent_token(node1):
    from telemetry.services import node_token_issue

    return node_token_issue(node=node1)[1]


def make_sample(gpu=0, at=None, **over):
    at = at or timezone.now() - timedelta(seconds=1)
    sample = {
        "gpu": gpu,
        "time": at.timestamp(),
        "utilization": 50.0,
        "memory_used_mib": 1000,
        "memory_total_mib": 81559,
        "temperature_c": 60,
        "power_w": 300.0,
    }
    sample.update(over)
    return sample


@pytest.fixture
def post_batch(agent_token):
    """POST a batch as n1's agent (through the real HTTP stack); returns the response."""
    from rest_framework.test import APIClient

    def post(samples, token=None, **extra):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token or agent_token}")
        return client.post(
            "/api/v1/telemetry/samples", {"samples": samples, **extra}, format="json"
        )

    return post


@pytest.fixture
def now():
    return timezone.now().replace(second=30, microsecond=0)


@pytest.fixture
def running_job(platform, priorities, cluster, now):
    """Make running jobs of alice's holding GPUs of a node since ``minutes_ago``; returns
    ``(job, node)``."""

    def make(name, node_name="n1", gpus=(0, 1), minutes_ago=40):
        node = cluster.nodes.get(name=node_name)
        started = now - timedelta(minutes=minutes_ago)
        job = Job.objects.create(
            team=platform["alice"].memberships.first().team,
            submitter=platform["alice"],
            name=name,
            workers=1,
            gpus_per_worker=len(gpus),
            priority_class=priorities["research"],
            state=JobState.RUNNING,
            submitted_at=started,
            started_at=started,
            attempts=1,
        )
        for g in gpus:
            Allocation.objects.create(job=job, node=node, gpu_index=g, started_at=started)
        return job, node

    return make
