"""Query-count guards: list endpoints and pages run the same, bounded number of queries whatever
the page size. Each guard renders the list with 5 rows and with 50 rows (running jobs with
placements, events, arrays) and asserts that the count does not grow and stays under a ceiling."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.models import Allocation, Job, JobArray, JobEvent, Node
from scheduler.states import JobState
from tenants.models import PriorityClass

pytestmark = pytest.mark.django_db


def make_jobs(user, team, n: int, *, array: JobArray | None = None) -> list[Job]:
    """``n`` jobs of ``team``, every other one running on a GPU, each with one event."""
    priority = PriorityClass.objects.order_by("value").first()
    nodes = list(Node.objects.order_by("id"))
    now = timezone.now()
    start = Job.objects.count()
    jobs = Job.objects.bulk_create(
        [
            Job(
                team=team,
                submitter=user,
                name=f"j{start + i}",
                workers=1,
                gpus_per_worker=1,
                priority_class=priority,
                gpu_model=nodes[0].gpu_model,
                state=JobState.RUNNING if i % 2 else JobState.PENDING,
                why_pending="" if i % 2 else "waiting",
                submitted_at=now,
                array=array,
                array_index=i if array else None,
            )
            for i in range(n)
        ]
    )
    used = Allocation.objects.count()
    Allocation.objects.bulk_create(
        [
            Allocation(
                job=job,
                node=nodes[(used + k) // 8 % len(nodes)],
                gpu_index=(used + k) % 8,
                started_at=now,
            )
            for k, job in enumerate(j for j in jobs if j.state == JobState.RUNNING)
        ]
    )
    JobEvent.objects.bulk_create([JobEvent(job=j, kind="submitted", time=now) for j in jobs])
    return jobs


def count_queries(get) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = get()
    assert response.status_code == 200, getattr(response, "content", b"")[:300]
    return len(captured.captured_queries)


def assert_bounded(small: int, large: int, ceiling: int) -> None:
    assert large <= small, f"queries grew with the page size: {small} for 5 rows, {large} for 50"
    assert large <= ceiling, f"{large} queries (ceiling {ceiling})"


@pytest.fixture
def big_cluster(cluster, gpu_models):
    """Enough GPUs (16 nodes x 8) for 50 running jobs without two on one GPU."""
    for i in range(5, 17):
        Node.objects.create(
            cluster=cluster, name=f"n{i}", gpu_model=gpu_models["h100"], gpu_count=8
        )
    return cluster


def api_client(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize("viewer", ["alice", "admin"])
def test_job_list_api(platform, big_cluster, teams, viewer):
    user = platform[viewer]
    client = api_client(user)
    make_jobs(platform["alice"], teams["vision"], 5)
    small = count_queries(lambda: client.get("/api/v1/jobs/?limit=5"))
    make_jobs(platform["alice"], teams["vision"], 45)
    large = count_queries(lambda: client.get("/api/v1/jobs/?limit=50"))
    assert_bounded(small, large, ceiling=8)


def test_job_array_list_and_members_api(platform, big_cluster, teams):
    alice = platform["alice"]
    client = api_client(alice)

    def arrays(n):
        now = timezone.now()
        for _ in range(n):
            array = JobArray.objects.create(
                team=teams["vision"], submitter=alice, name="s", size=2, submitted_at=now
            )
            make_jobs(alice, teams["vision"], 2, array=array)
        return array

    last = arrays(5)
    small = count_queries(lambda: client.get("/api/v1/job-arrays/?limit=5"))
    arrays(45)
    large = count_queries(lambda: client.get("/api/v1/job-arrays/?limit=50"))
    assert_bounded(small, large, ceiling=6)

    big = JobArray.objects.create(
        team=teams["vision"], submitter=alice, name="big", size=50, submitted_at=timezone.now()
    )
    make_jobs(alice, teams["vision"], 50, array=big)
    small = count_queries(lambda: client.get(f"/api/v1/job-arrays/{last.pk}/jobs/?limit=5"))
    large = count_queries(lambda: client.get(f"/api/v1/job-arrays/{big.pk}/jobs/?limit=50"))
    assert_bounded(small, large, ceiling=10)


def test_node_list_api(platform, cluster, gpu_models):
    client = api_client(platform["alice"])
    small = count_queries(lambda: client.get("/api/v1/nodes/?limit=5"))
    for i in range(5, 51):
        Node.objects.create(
            cluster=cluster, name=f"x{i}", gpu_model=gpu_models["a100"], gpu_count=8
        )
    large = count_queries(lambda: client.get("/api/v1/nodes/?limit=50"))
    assert_bounded(small, large, ceiling=6)


def test_job_events_api(platform, big_cluster, teams):
    alice = platform["alice"]
    client = api_client(alice)
    job = make_jobs(alice, teams["vision"], 1)[0]
    small = count_queries(lambda: client.get(f"/api/v1/jobs/{job.pk}/events/"))
    JobEvent.objects.bulk_create(
        [JobEvent(job=job, kind="note", time=timezone.now()) for _ in range(49)]
    )
    large = count_queries(lambda: client.get(f"/api/v1/jobs/{job.pk}/events/"))
    assert_bounded(small, large, ceiling=8)


@pytest.mark.parametrize("path", ["/jobs/", "/"])
def test_portal_job_pages(platform, big_cluster, teams, path):
    alice = platform["alice"]
    client = Client()
    client.force_login(alice)
    make_jobs(alice, teams["vision"], 5)
    small = count_queries(lambda: client.get(path))
    make_jobs(alice, teams["vision"], 45)
    large = count_queries(lambda: client.get(path))
    assert_bounded(small, large, ceiling=15)


def test_portal_cluster_page(platform, cluster, gpu_models, teams):
    admin = platform["admin"]
    client = Client()
    client.force_login(admin)
    small = count_queries(lambda: client.get("/cluster/"))
    for i in range(5, 51):
        Node.objects.create(
            cluster=cluster, name=f"x{i}", gpu_model=gpu_models["a100"], gpu_count=8
        )
    large = count_queries(lambda: client.get("/cluster/"))
    assert_bounded(small, large, ceiling=15)
