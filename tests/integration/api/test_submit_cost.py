"""The submission path stays cheap: a bounded number of queries, a response equal to what a
read returns, reference-data caching that never refuses what the database would accept, and a
sliding-window rate limit kept as counters."""

from __future__ import annotations

import copy
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalogue.models import GpuModel
from scheduler.models import Node
from tenants.throttles import JobSubmitUserThrottle

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_rates(settings):
    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {"job_submit_user": "1000/min", "job_submit_team": "1000/min"}
    settings.REST_FRAMEWORK = rest


def test_a_submission_runs_a_bounded_number_of_queries(platform, submit, team_rates):
    body = {"gpu_model": "h100-80gb", "priority_class": "research"}
    assert submit(platform["alice"], **body).status_code == 201  # warms the caches
    with CaptureQueriesContext(connection) as ctx:
        response = submit(platform["alice"], **body)
    assert response.status_code == 201
    # membership + role (once: the team limit's answer is reused by validation), savepoint,
    # hard-stop budgets, the team's row lock (concurrent submissions cannot together pass a
    # cap), pending caps and counts (one query), INSERT job, INSERT event, release; GPU model,
    # class and node size come from the cache; entitlements are read only for a restricted
    # class or a preemption opt-out.
    sql = [q["sql"] for q in ctx.captured_queries]
    assert len(sql) <= 8, "\n".join(sql)
    assert sum("tenants_membership" in s for s in sql) == 1
    assert not any("scheduler_gpumodel" in s or "tenants_priorityclass" in s for s in sql)


def test_the_response_is_what_a_read_returns(platform, submit, api_as):
    created = submit(
        platform["alice"],
        gpu_model="h100-80gb",
        env={"LR": "0.1"},
        elastic=None,
        dataset="imagenet",
    )
    assert created.status_code == 201
    read = api_as(platform["alice"]).get(f"/api/v1/jobs/{created.json()['id']}/")
    assert created.json() == read.json()


def test_new_reference_rows_are_usable_at_once(platform, submit, gpu_models):
    assert submit(platform["alice"], gpu_model="h100-80gb").status_code == 201
    GpuModel.objects.create(name="b200", memory_gib=192)  # a save: the cache is cleared
    Node.objects.create(
        cluster=platform["cluster"],
        name="n9",
        gpu_model=GpuModel.objects.get(name="b200"),
        gpu_count=8,
    )
    assert submit(platform["alice"], gpu_model="b200").status_code == 201


def test_a_grown_node_is_seen_even_without_a_signal(platform, submit):
    assert submit(platform["alice"], gpu_model="h100-80gb", gpus_per_worker=8).status_code == 201
    # A queryset update sends no signal, so the cached size (8) is stale; refusing re-reads it.
    Node.objects.filter(name="n1").update(gpu_count=16)
    assert submit(platform["alice"], gpu_model="h100-80gb", gpus_per_worker=16).status_code == 201
    refused = submit(platform["alice"], gpu_model="h100-80gb", gpus_per_worker=17)
    assert refused.status_code == 400
    assert "more than a h100-80gb node has (16)" in refused.json()["gpus_per_worker"][0]


class _Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _throttle(rate: str, clock: _Clock, settings) -> JobSubmitUserThrottle:
    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {"job_submit_user": rate}
    settings.REST_FRAMEWORK = rest
    throttle = JobSubmitUserThrottle()
    throttle.timer = clock
    return throttle


def test_the_rate_limit_slides_across_window_edges(settings):
    key = f"throttle-test-{uuid.uuid4().hex}"  # the cache (Redis) outlives test transactions
    clock = _Clock(60_000 * 60 + 59.0)  # one second before a window edge
    throttle = _throttle("3/min", clock, settings)
    assert [throttle._count_if_allowed(key, clock()) for _ in range(3)] == [True] * 3
    assert throttle._count_if_allowed(key, clock()) is False
    # Just past the edge a fixed window would allow 3 more at once; the sliding estimate
    # (3 x 58/60 of the last window still overlaps) refuses, and says when to come back.
    clock.now += 2
    assert throttle._count_if_allowed(key, clock()) is False
    assert 1 <= throttle.wait() <= 60
    clock.now += throttle.wait()
    assert throttle._count_if_allowed(key, clock()) is True
    # Refused requests were not counted: two minutes later the limit is whole again.
    clock.now += 120
    assert [throttle._count_if_allowed(key, clock()) for _ in range(3)] == [True] * 3
