"""A node's agent holds only its node's token, and with it could write without bound: batches of
5,000 samples with 100 XIDs each (500,000 error rows, kept 30 days) as fast as it can post. Each
node may write ``TELEMETRY_NODE_ROWS_PER_MINUTE`` rows a minute; beyond that the answer is a 429
(which the agent retries), other nodes are unaffected, and a repeat of a stored batch is still
acknowledged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from telemetry.models import GpuErrorEvent, GpuSample
from telemetry.services import NodeOverBudget, node_token_issue, samples_ingest

from .conftest import make_sample

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _small_budget(settings):
    settings.TELEMETRY_NODE_ROWS_PER_MINUTE = 20


def test_a_node_over_its_budget_gets_a_429_and_stores_nothing(settings, post_batch, cluster, node1):
    settings.TELEMETRY_NODE_ROWS_PER_MINUTE = 50
    first = [make_sample(gpu=g) for g in range(8)] + [
        make_sample(gpu=0, xid=[13, 31, 43, 45, 61, 62, 63, 64])
    ]
    assert post_batch(first).status_code == 202  # 9 samples + 8 XID rows, charged 40
    second = [make_sample(gpu=g, utilization=1.0) for g in range(8)]
    assert post_batch(second).status_code == 202  # 40 before it, below 50: taken (80)
    third = [make_sample(gpu=1, utilization=2.0, xid=[79])]
    refused = post_batch(third)
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert GpuSample.objects.filter(node=node1).count() == 17
    assert GpuErrorEvent.objects.filter(node=node1).count() == 8

    # The refused batch was not stored: it is no duplicate, and it stays refused this minute.
    assert post_batch(third).status_code == 429
    # A repeat of a stored batch is acknowledged, not refused.
    assert post_batch(second).json() == {"accepted": 0, "errors": 0, "duplicate": True}
    # Other nodes keep their own budget.
    _, token2 = node_token_issue(node=cluster.nodes.get(name="n2"))
    assert post_batch([make_sample(gpu=0)], token=token2).status_code == 202


def test_the_budget_is_per_minute_and_a_refused_batch_goes_in_the_next(node1):
    minute = timezone.now().replace(second=0, microsecond=0)
    at = minute + timedelta(seconds=30)
    big = {"samples": [make_sample(gpu=g % 8, at=at - timedelta(seconds=g)) for g in range(25)]}
    # Above the budget (20) on its own, it is taken: one batch always fits.
    assert samples_ingest(node=node1, body=big, now=at).accepted == 25
    late = {"samples": [make_sample(gpu=0, at=at)]}
    with pytest.raises(NodeOverBudget) as refused:
        samples_ingest(node=node1, body=late, now=at)
    assert refused.value.retry_after_s == 30
    next_minute = minute + timedelta(seconds=61)
    assert samples_ingest(node=node1, body=late, now=next_minute).accepted == 1
    assert GpuSample.objects.filter(node=node1).count() == 26


def test_a_flood_of_small_batches_is_held_to_the_budget_too(settings, post_batch, node1):
    """Each request costs the platform far more than its rows: one-sample batches posted back
    to back were each 1 row of the budget, so 20,000 requests a minute passed."""
    settings.TELEMETRY_NODE_ROWS_PER_MINUTE = 100  # 40 rows charged per batch at least
    answers = [post_batch([make_sample(gpu=0, utilization=float(i))]).status_code for i in range(4)]
    assert answers == [202, 202, 202, 429]
    assert GpuSample.objects.filter(node=node1).count() == 3
