"""The job page's "Where and why" (routing across clusters): after a real cycle on two
clusters it names the cluster and region, the pool, the expected cost with its data-movement
part, the reason and the other pools weighed; the API's events carry the same ``routed`` event;
and another team's user gets a 404 for the page and the events."""

from __future__ import annotations

import html
import re
from decimal import Decimal

import pytest
from django.test import Client

from scheduler import services
from scheduler.models import ClusterDataset, Dataset, Job
from tests.integration.routing_setup import make_two_clusters, run_one_cycle


@pytest.fixture
def two_clusters(platform, gpu_models):
    return make_two_clusters(platform, gpu_models)


pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(user, **fields) -> Job:
    req = {"name": "train", "team": "vision", "workers": 1, "gpus_per_worker": 1, **fields}
    return services.job_submit(user=user, request=services.JobRequest(**req))


def text_of(response) -> str:
    """The page's text with tags dropped and whitespace folded, for phrase checks."""
    raw = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html.unescape(raw))


def test_the_page_says_where_the_job_runs_and_why_there(two_clusters):
    # c4 lives on the cloud only; moving it to on-prem costs 100 GB x 0.05 = 5.00
    dataset = Dataset.objects.create(name="c4", size_gb=100)
    ClusterDataset.objects.create(
        cluster=two_clusters["cloud"], dataset=dataset, egress_price_per_gb=Decimal("0.05")
    )
    job = submit(
        two_clusters["alice"],
        gpu_model="h100-80gb",
        dataset="c4",
        runtime_limit_s=3600,
        routing={"clusters": ["test"], "max_price_per_gpu_h": 3.0, "spot": False},
    )
    assert run_one_cycle() == [job.pk]
    job.refresh_from_db()
    (route,) = job.events.filter(kind="routed")
    assert job.cluster.name == "test" and route.data["egress_cost"] == 5.0

    response = client_for(two_clusters["alice"]).get(f"/jobs/{job.pk}/")
    assert response.status_code == 200
    page = text_of(response)
    assert "Where and why" in page
    assert "test in eu-west (InfiniBand)" in page
    assert "Allowed clusters test" in page and "Max price per GPU-hour 3.00 USD" in page
    assert "Spot capacity no" in page
    assert f"Pool {route.data['pool']}" in page
    assert f"Expected cost {route.data['expected_cost']:.2f} USD, 5.00 of it moving data" in page
    assert route.message in page
    # every other pool, with the constraint that excluded it (the job allows on-prem only)
    assert route.data["alternatives"]
    for alternative in route.data["alternatives"]:
        assert alternative["excluded"], alternative
        assert f"{alternative['pool']} — {alternative['excluded']}" in page


def test_a_pending_jobs_why_shows_and_the_api_events_carry_the_routed_event(two_clusters):
    onprem_only = {"clusters": ["test"]}
    first = submit(two_clusters["alice"], gpu_model="h100-80gb", workers=2, gpus_per_worker=8,
                   routing=onprem_only)  # fmt: skip
    waiting = submit(two_clusters["alice"], gpu_model="h100-80gb", workers=2, gpus_per_worker=8,
                     routing=onprem_only)  # fmt: skip
    assert run_one_cycle() == [first.pk]
    waiting.refresh_from_db()
    assert waiting.state == "pending" and waiting.why_pending
    page = text_of(client_for(two_clusters["alice"]).get(f"/jobs/{waiting.pk}/"))
    assert waiting.why_pending in page
    assert "Cluster not placed yet" in page and "Allowed clusters test" in page

    api = Client()
    api.force_login(two_clusters["alice"])
    events = api.get(f"/api/v1/jobs/{first.pk}/events/").json()
    (routed,) = [e for e in events if e["kind"] == "routed"]
    assert routed["data"]["cluster"] == "test" and routed["message"].startswith("runs on ")
    assert api.get(f"/api/v1/jobs/{first.pk}/").json()["cluster"] == "test"


def test_another_teams_user_gets_404_for_the_page_and_the_events(two_clusters):
    job = submit(two_clusters["alice"], gpu_model="h100-80gb")
    assert run_one_cycle() == [job.pk]
    bob = client_for(two_clusters["bob"])
    assert bob.get(f"/jobs/{job.pk}/").status_code == 404
    assert bob.get(f"/api/v1/jobs/{job.pk}/events/").status_code == 404
    assert bob.get(f"/api/v1/jobs/{job.pk}/").status_code == 404
