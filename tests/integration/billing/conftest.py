"""Billing test helpers: jobs with allocations written the way the scheduling loop writes them
(Allocation rows with started_at / ended_at), a price book, and a capture of published payloads;
a second cluster (``cloud``, node c1) with its own rates, and a dataset (``c4``) held elsewhere,
so jobs on the cloud are charged egress."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing.models import Capacity, PriceRate
from scheduler.models import Cluster, ClusterDataset, Dataset, Node


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture
def make_job(teams, priorities, alice):
    from django.utils import timezone

    from scheduler.models import Job

    def make(team="vision", user=None, name="train", state="running", **extra):
        return Job.objects.create(
            team=teams[team],
            submitter=user or alice,
            name=name,
            workers=1,
            gpus_per_worker=1,
            priority_class=priorities["research"],
            submitted_at=extra.pop("submitted_at", timezone.now()),
            state=state,
            **extra,
        )

    return make


@pytest.fixture
def allocate(cluster):
    """allocate(job, node_name, gpu_index, start, end=None, attempt=1) -> Allocation."""
    from scheduler.models import Allocation, Node

    def make(job, node, gpu, start, end=None, attempt=1):
        return Allocation.objects.create(
            job=job,
            node=Node.objects.get(name=node),
            gpu_index=gpu,
            started_at=start,
            ended_at=end,
            attempt=attempt,
        )

    return make


@pytest.fixture
def price(gpu_models):
    """price("h100", "on_demand", "2.50", from_) writes a rate straight into the book (history
    set-up; the service refuses backdated rates, which is tested separately)."""

    def make(model, capacity, rate, effective_from, cluster=None):
        return PriceRate.objects.create(
            cluster=cluster,
            gpu_model=gpu_models[model],
            capacity=Capacity(capacity),
            rate_per_gpu_hour=Decimal(rate),
            effective_from=effective_from,
        )

    return make


@pytest.fixture
def published(monkeypatch):
    """Payloads handed to the channel layer, as (group, payload) pairs. Publication happens on
    commit: wrap the code under test in ``django_capture_on_commit_callbacks(execute=True)``."""
    from core import streams

    sent: list[tuple[str, dict]] = []
    monkeypatch.setattr(streams, "_send_many", sent.extend)
    return sent


@pytest.fixture
def clouds(cluster, gpu_models):
    cloud = Cluster.objects.create(name="cloud", region="us-east")
    Node.objects.create(cluster=cloud, name="c1", gpu_model=gpu_models["h100"], gpu_count=8)
    archive = Cluster.objects.create(name="archive", region="eu-west")
    return {"test": cluster, "cloud": cloud, "archive": archive}


@pytest.fixture
def cluster_price(price):
    """cluster_price(cluster, "h100", "on_demand", "1.00", from_): a rate of one cluster only."""

    def make(cluster, model, capacity, rate, effective_from):
        return price(model, capacity, rate, effective_from, cluster=cluster)

    return make


@pytest.fixture
def c4(clouds):
    """800 GB held by ``test`` ($0.05/GB out) and ``archive`` ($0.02/GB out), not by ``cloud``."""
    dataset = Dataset.objects.create(name="c4", size_gb=800)
    ClusterDataset.objects.create(
        cluster=clouds["test"], dataset=dataset, egress_price_per_gb=Decimal("0.05")
    )
    ClusterDataset.objects.create(
        cluster=clouds["archive"], dataset=dataset, egress_price_per_gb=Decimal("0.02")
    )
    return dataset
