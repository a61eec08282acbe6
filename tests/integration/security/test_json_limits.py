"""Every JSON body goes through one size- and depth-bounded parser (issue 26, finding 8): a body
nested 5,000 deep, larger than the limit, with NaN, or with a 5,000-digit number is a 400 on
every endpoint that takes JSON, never a 500, and nothing is written."""

from __future__ import annotations

import pytest
from django.test import Client

from core.jsonlimits import MAX_DEPTH, JsonRefused, loads_bounded
from scheduler.models import Job, JobArray
from tenants import services as tenant_services
from tenants.models import ApiToken

pytestmark = pytest.mark.django_db

DEEP = "[" * 5000 + "]" * 5000
HOSTILE_BODIES = {
    "deep list": DEEP,
    "deep object": '{"a":' * 3000 + "1" + "}" * 3000,
    "deep in a field": '{"name": "x", "team": "vision", "workers": 1, "gpus_per_worker": 1, '
    '"env": ' + DEEP + "}",
    "just past the depth limit": "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    "NaN": '{"name": "x", "team": "vision", "workers": NaN, "gpus_per_worker": 1}',
    "Infinity": '{"simulated_duration_s": Infinity}',
    "giant number": '{"workers": ' + "9" * 5000 + "}",
    "not JSON": "{'name': 'x'",
}
ENDPOINTS = [
    "/api/v1/jobs/",
    "/api/v1/job-arrays/",
    "/api/v1/auth/token",
    "/api/v1/tokens/",
    "/api/v1/billing/budgets/",
    "/api/v1/quota-requests/",
    "/api/v1/teams/vision/members/",
    "/api/v1/quotas/",
]


@pytest.fixture
def bearer(platform):
    _token, raw = tenant_services.token_create(user=platform["admin"], name="cli")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_hostile_json_bodies_are_400_everywhere(platform, bearer, endpoint):
    client = Client(raise_request_exception=False)
    tokens_before = ApiToken.objects.count()
    for label, body in HOSTILE_BODIES.items():
        response = client.post(endpoint, body, content_type="application/json", **bearer)
        assert response.status_code == 400, (endpoint, label, response.status_code)
        assert "JSON parse error" in response.json()["detail"], (endpoint, label)
    assert not Job.objects.exists() and not JobArray.objects.exists()
    assert ApiToken.objects.count() == tokens_before


def test_a_body_over_the_size_limit_is_refused_unread(platform, bearer, settings):
    settings.API_JSON_MAX_BYTES = 1000
    body = '{"name": "' + "x" * 2000 + '", "team": "vision", "workers": 1, "gpus_per_worker": 1}'
    response = Client().post("/api/v1/jobs/", body, content_type="application/json", **bearer)
    assert response.status_code == 400 and "larger than 1,000 bytes" in response.json()["detail"]
    fits = '{"name": "ok", "team": "vision", "workers": 1, "gpus_per_worker": 1}'
    assert (
        Client().post("/api/v1/jobs/", fits, content_type="application/json", **bearer).status_code
        == 201
    )


def test_the_parser_keeps_what_json_allows():
    assert loads_bounded('{"a": [1, 2.5, "x", null, true]}', max_bytes=100) == {
        "a": [1, 2.5, "x", None, True]
    }
    assert loads_bounded("[" * MAX_DEPTH + "]" * MAX_DEPTH, max_bytes=1000) is not None
    # an escaped surrogate pair is one character; an escaped backslash before u0000 is text
    assert loads_bounded('["\\ud83d\\ude00", "\\\\u0000"]', max_bytes=100) == [
        "\U0001f600",
        "\\u0000",
    ]
    for text, reason in (
        (DEEP, "depth"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "depth"),
        ("x" * 101, "size"),
        ("[NaN]", "number"),
        ("[-Infinity]", "number"),
        ("[1e400]", "number"),
        ('["a\\u0000"]', "text"),
        ('{"\\udc00": 1}', "text"),
        # unescaped: a str that no UTF-8 encodes (a websocket frame from a test harness)
        ("\ud800", "text"),
        ('{"a": "\udc00"}', "text"),
    ):
        with pytest.raises(JsonRefused) as refused:
            loads_bounded(text, max_bytes=100 if reason == "size" else 100_000)
        assert refused.value.reason == reason, text[:20]
