"""Hostile and careless input to the portal's forms and query parameters (a review of the HTML
pages on 6 December): each refusal is a 400 that names the field, never a 500, and a refused
request writes nothing and drops nothing it was given."""

from __future__ import annotations

import pytest
from django.test import Client

from notifications.models import Webhook
from scheduler.models import Job, JobArray
from tenants import quotas as quota_services
from tenants.models import Membership
from tests.integration.roles import make_user

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def vera(teams):
    """An admin of vision."""
    return make_user("vera", teams["vision"], "admin")


def test_a_nul_in_a_url_path_is_a_400_not_a_500(platform, teams, vera):
    # <str:username> takes any text; PostgreSQL cannot compare it with a NUL in it.
    before = set(Membership.objects.values_list("pk", "role"))
    response = client_for(vera).post("/teams/team/vision/members/a%00b/remove/")
    assert response.status_code == 400
    assert "path" in response.json()
    assert set(Membership.objects.values_list("pk", "role")) == before


@pytest.mark.parametrize("value", ["\u00b2", "1" * 5000, "abc", "-1"])
def test_a_deliveries_filter_that_is_not_a_webhook_id_is_a_400(platform, value):
    response = client_for(platform["alice"]).get("/notifications/deliveries/", {"webhook": value})
    assert response.status_code == 400
    assert "webhook" in response.content.decode()


def test_the_deliveries_filter_by_id_and_without_one_still_answer(platform):
    client = client_for(platform["alice"])
    assert client.get("/notifications/deliveries/", {"webhook": ""}).status_code == 200
    hook = Webhook.objects.create(owner=platform["alice"], name="mine", url="https://example.com/h")
    assert client.get("/notifications/deliveries/", {"webhook": str(hook.pk)}).status_code == 200
    # a hook nobody has: a 404, as another person's (docs/tenancy.md)
    assert client.get("/notifications/deliveries/", {"webhook": "12345"}).status_code == 404


@pytest.mark.parametrize("value", ["\u00b2", "1" * 5000])
def test_a_policy_diff_with_a_number_that_is_not_one_is_a_400(platform, priorities, value):
    client = client_for(platform["admin"])
    assert client.get("/policy/").status_code == 200  # the first version
    for query in ({"a": value, "b": "1"}, {"a": "1", "b": value}):
        response = client.get("/policy/diff/", query)
        assert response.status_code == 400
        key = "a" if query["a"] == value else "b"
        assert f"{key}: must be a version number" in response.content.decode()


def test_estimate_finish_with_an_array_writes_nothing(platform):
    # The button promises an estimate; with the array fields filled it submitted the sweep.
    response = client_for(platform["alice"]).post(
        "/jobs/new/",
        {
            "name": "sweep",
            "team": "vision",
            "workers": "1",
            "gpus_per_worker": "1",
            "array_count": "5",
            "estimate": "1",
        },
    )
    assert response.status_code == 400
    assert 'data-errors-for="array_count"' in response.content.decode()
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_a_decision_comment_too_long_is_refused_not_dropped(platform, teams, gpu_models, vera):
    request = quota_services.quota_request_create(
        user=vera,
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=2,
        borrow_limit_gpus=None,
        reason="ablation",
        until=None,
    )
    client = client_for(platform["admin"])
    for decision in ("approve", "reject"):
        response = client.post(
            f"/teams/requests/{request.pk}/{decision}/", {"comment": "x" * 2001}, follow=True
        )
        shown = [str(m) for m in response.context["messages"]]
        assert any("comment" in m and "2000" in m for m in shown), shown
        request.refresh_from_db()
        assert request.status == "pending" and request.decision_comment == ""
    client.post(f"/teams/requests/{request.pk}/approve/", {"comment": "x" * 2000})
    request.refresh_from_db()
    assert request.status == "approved" and request.decision_comment == "x" * 2000


@pytest.mark.parametrize("path", ["/teams/audit/", "/teams/audit.csv"])
def test_an_audit_filter_that_does_not_parse_is_a_400_not_the_whole_log(
    platform, teams, gpu_models, path
):
    quota_services.quota_set(
        user=platform["admin"],
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=4,
        borrow_limit_gpus=0,
    )
    client = client_for(platform["admin"])
    response = client.get(path, {"since": "2024-13-45"})
    assert response.status_code == 400
    assert "Enter a valid date/time." in response.content.decode()
    assert client.get(path, {"since": "2024-01-01"}).status_code == 200
