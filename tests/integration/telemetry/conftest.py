"""Telemetry fixtures: a node token for n1 and helpers to post batches as that node's agent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone


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
