"""Text the platform cannot store, and names nobody checked (an audit of 5 December): a NUL
character or half of a surrogate pair anywhere in a JSON body, in a key as much as in a value, is
a 400 naming where it is, on every endpoint (before, a key of ``env`` or ``routing`` reached
PostgreSQL, or the error message that repeated it could not be written, and the answer was a
500); environment variable names, the jobs' ``state`` filter and the deliveries' ``webhook``
filter are checked instead of failing later or being ignored."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

from catalogue.models import GpuModel
from notifications.models import Message, Webhook
from policyversions.models import PolicyVersion
from scheduler.models import Job, JobArray
from tenants.models import Quota, Team

pytestmark = pytest.mark.django_db

JOB = {"name": "t", "team": "vision", "workers": 1, "gpus_per_worker": 1}

# (who, method, path, body, where the bad text is, as the refusal names it)
UNSTORABLE = [
    ("alice", "post", "/api/v1/jobs/", {**JOB, "team": "vis\x00ion"}, "the string at team"),
    ("alice", "post", "/api/v1/jobs/estimate/", {**JOB, "team": "v\ud800"}, "the string at team"),
    ("alice", "post", "/api/v1/jobs/", {**JOB, "env": {"A\x00B": "x"}}, 'the key env["A\\u0000B"]'),
    ("alice", "post", "/api/v1/jobs/", {**JOB, "env": {"\ud800": "x"}}, 'the key env["\\ud800"]'),
    ("alice", "post", "/api/v1/jobs/", {**JOB, "routing": {"\ud800": 1}}, "the key routing"),
    (
        "alice",
        "post",
        "/api/v1/job-arrays/",
        {
            "name": "a",
            "team": "vision",
            "template": JOB | {"team": None},
            "items": [{}, {"env": {"A\x00": "x"}}],
        },
        'the key items[1].env["A\\u0000"]',
    ),
    (
        "alice",
        "put",
        "/api/v1/notifications/preferences",
        [{"event": "\ud800", "channel": "email", "enabled": True}],
        "the string at [0].event",
    ),
    ("admin", "post", "/api/v1/admin/datasets/", {"name": "d\x00"}, "the string at name"),
    (
        "admin",
        "post",
        "/api/v1/policy/versions",
        {"reason": "x", "team_weights": {"vis\x00ion": 1}},
        'the key team_weights["vis\\u0000ion"]',
    ),
    (
        "admin",
        "post",
        "/api/v1/policy/whatif",
        {"candidates": {"\ud800": {}}},
        "the key candidates",
    ),
]


@pytest.mark.parametrize(("who", "method", "path", "body", "where"), UNSTORABLE)
def test_unstorable_text_is_a_400_naming_where_it_is(
    platform, api_as, who, method, path, body, where
):
    versions = PolicyVersion.objects.count()
    # sent as JSON text with escapes, as a client would: the test client cannot encode a lone
    # surrogate itself
    response = api_as(platform[who]).generic(
        method.upper(), path, json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400, (path, response.status_code)
    detail = response.json()["detail"]
    assert detail.startswith("JSON parse error - " + where), detail
    assert "which the platform cannot store" in detail
    assert not Job.objects.exists() and not JobArray.objects.exists()
    assert PolicyVersion.objects.count() == versions


def test_a_form_encoded_team_with_a_nul_is_a_400_on_team(platform, api_as):
    response = api_as(platform["alice"]).post(
        "/api/v1/jobs/", {"name": "t", "team": "vis\x00ion", "workers": 1, "gpus_per_worker": 1}
    )
    assert response.status_code == 400 and "team" in response.json()
    assert not Job.objects.exists()


@pytest.mark.parametrize("method", ["put", "patch"])
@pytest.mark.parametrize("encode", ["urlencoded", "multipart"])
def test_a_form_encoded_put_or_patch_with_a_nul_is_a_400(platform, api_as, method, encode):
    # Django parses a form body only for POST: on PostgreSQL a NUL in a PUT's field was a 500
    quota = Quota.objects.create(
        team=Team.objects.get(slug="vision"),
        gpu_model=GpuModel.objects.get(name="h100-80gb"),
        guaranteed_gpus=8,
        borrow_limit_gpus=0,
    )
    fields = {"team": "vis\x00ion", "gpu_model": "h100-80gb", "guaranteed_gpus": "4"}
    if encode == "urlencoded":
        body, content_type = urlencode(fields), "application/x-www-form-urlencoded"
    else:
        body, content_type = encode_multipart(BOUNDARY, fields), MULTIPART_CONTENT
    response = getattr(api_as(platform["admin"]), method)(
        f"/api/v1/quotas/{quota.pk}/", body, content_type=content_type
    )
    assert response.status_code == 400 and "team" in response.json(), response.content
    quota.refresh_from_db()
    assert quota.guaranteed_gpus == 8


def test_escaped_text_that_is_storable_is_kept(platform, api_as):
    body = {**JOB, "name": "t \U0001f600 \\u0000", "env": {"GREETING": "\U0001f600"}}
    response = api_as(platform["alice"]).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert job.name == "t \U0001f600 \\u0000" and job.env["GREETING"] == "\U0001f600"


@pytest.mark.parametrize("name", ["1BAD", "BAD-NAME", "", "A\n", "A B"])
def test_an_invalid_environment_variable_name_is_a_400_on_env(platform, api_as, name):
    response = api_as(platform["alice"]).post(
        "/api/v1/jobs/", {**JOB, "env": {name: "x", "GOOD": "y"}}, format="json"
    )
    assert response.status_code == 400, response.json()
    (message,) = response.json()["env"]
    rule = "letters, digits and _, not starting with a digit"
    assert message == f"{name!r} is not a valid environment variable name ({rule})"
    assert not Job.objects.exists()


def test_an_array_names_the_template_or_the_index_with_the_bad_name(platform, api_as):
    client = api_as(platform["alice"])
    body = {
        "name": "a",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1, "env": {"OK": "1"}},
        "items": [{"env": {"GOOD": "1"}}, {"env": {"9LIVES": "1"}}, {}],
    }
    response = client.post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["items[1].env"], response.json()
    body["template"]["env"] = {"BAD-ONE": "1"}
    body["items"][1] = {}
    response = client.post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400 and list(response.json()) == ["template.env"], (
        response.json()
    )
    assert not Job.objects.exists() and not JobArray.objects.exists()
    body["template"]["env"] = {"OK": "1"}
    assert client.post("/api/v1/job-arrays/", body, format="json").status_code == 201


def test_an_unknown_job_state_filter_is_a_400(platform, api_as, submit):
    assert submit(platform["alice"]).status_code == 201
    client = api_as(platform["alice"])
    for query in ("bogus", "pending,bogus"):
        response = client.get(f"/api/v1/jobs/?state={query}")
        assert response.status_code == 400, query
        assert response.json()["state"][0].startswith("unknown state 'bogus' (known: pending,")
    assert client.get("/api/v1/jobs/?state=pending,running").json()["count"] == 1


@pytest.mark.parametrize("value", ["\u00b2", "abc", "-1", "1.5", "9" * 30])
def test_a_webhook_filter_that_is_not_an_id_is_a_400(platform, api_as, value):
    response = api_as(platform["alice"]).get(
        "/api/v1/notifications/deliveries/", {"webhook": value}
    )
    assert response.status_code == 400
    assert response.json() == {"webhook": ["must be a webhook id (a whole number)"]}


def test_a_webhook_filter_by_id_still_filters(platform, api_as):
    from django.utils import timezone

    client = api_as(platform["alice"])
    now = timezone.now()
    # an email to alice and a message to her own hook: the filter keeps the hook's alone
    Message.objects.create(
        channel="email", user=platform["alice"], target="alice", created_at=now, send_after=now
    )
    hook = Webhook.objects.create(owner=platform["alice"], name="mine", url="https://example.com/h")
    Message.objects.create(
        channel="webhook", webhook=hook, target="hook", created_at=now, send_after=now
    )
    assert client.get("/api/v1/notifications/deliveries/").json()["count"] == 2
    response = client.get("/api/v1/notifications/deliveries/", {"webhook": str(hook.pk)})
    assert response.status_code == 200 and response.json()["count"] == 1
    assert response.json()["results"][0]["webhook"] == hook.pk
    # a hook nobody has is a 404, as another person's is (docs/tenancy.md)
    missing = client.get("/api/v1/notifications/deliveries/", {"webhook": "12345"})
    assert missing.status_code == 404
    assert missing.json() == {"webhook": ["no such webhook"]}


def test_a_node_reason_longer_than_kept_is_a_400_not_cut_short(platform, api_as):
    node = platform["cluster"].nodes.first()
    client = api_as(platform["admin"])
    for action in ("quarantine", "drain"):
        response = client.post(
            f"/api/v1/admin/nodes/{node.pk}/{action}/", {"reason": "x" * 301}, format="json"
        )
        assert response.status_code == 400, action
        assert "reason" in response.json()
    node.refresh_from_db()
    assert node.state == "ready" and node.state_reason == ""
    response = client.post(
        f"/api/v1/admin/nodes/{node.pk}/quarantine/", {"reason": "x" * 300}, format="json"
    )
    assert response.status_code == 200
    node.refresh_from_db()
    assert node.state_reason == "x" * 300


def test_a_misspelt_job_field_is_a_400_not_dropped(platform, api_as):
    client = api_as(platform["alice"])
    for path in ("/api/v1/jobs/", "/api/v1/jobs/estimate/"):
        response = client.post(path, {**JOB, "runtime_limit": 7200}, format="json")
        assert response.status_code == 400, path
        assert response.json() == {"runtime_limit": ["not a job field"]}
    both = client.post("/api/v1/jobs/", {**JOB, "workers": 0, "gpus": 1}, format="json")
    assert both.status_code == 400 and {"gpus", "workers"} <= set(both.json())
    assert not Job.objects.exists()
    ok = client.post("/api/v1/jobs/", {**JOB, "runtime_limit_s": 7200}, format="json")
    assert ok.status_code == 201 and ok.json()["runtime_limit_s"] == 7200


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=-1", "limit"), ("limit=abc", "limit"), ("limit=0", "limit"), ("offset=-5", "offset")]
    + [("offset=abc", "offset"), ("offset=" + "9" * 5000, "offset"), ("limit=1.5", "limit")],
)
def test_a_page_parameter_that_is_not_a_whole_number_is_a_400(platform, api_as, query, field):
    response = api_as(platform["alice"]).get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400, query[:20]
    assert field in response.json()


def test_page_parameters_still_page(platform, api_as, submit):
    for _ in range(3):
        assert submit(platform["alice"]).status_code == 201
    client = api_as(platform["alice"])
    page = client.get("/api/v1/jobs/?limit=2&offset=1").json()
    assert page["count"] == 3 and len(page["results"]) == 2
    assert len(client.get("/api/v1/jobs/?limit=" + "9" * 40).json()["results"]) == 3
    assert len(client.get("/api/v1/jobs/?limit=&offset=").json()["results"]) == 3


def test_a_budget_filter_that_is_not_true_or_false_is_a_400(platform, api_as):
    client = api_as(platform["alice"])
    response = client.get("/api/v1/billing/budgets/", {"hard_stop": "maybe"})
    assert response.status_code == 400
    assert response.json() == {"hard_stop": ["must be true or false"]}
    for value in ("true", "False", "1", "0"):
        assert client.get("/api/v1/billing/budgets/", {"hard_stop": value}).status_code == 200
    from datetime import date

    from billing.models import Budget
    from tenants.models import Team

    Budget.objects.create(
        team=Team.objects.get(slug="vision"), month=date(2026, 12, 1), amount=100, hard_stop=True
    )
    counts = {
        value: client.get("/api/v1/billing/budgets/", {"hard_stop": value}).json()["count"]
        for value in ("true", "1", "false", "0")
    }
    assert counts == {"true": 1, "1": 1, "false": 0, "0": 0}


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("train\nBcc: someone@example.com", "control character (U+000A"),
        ("ok\x1b[2Jcleared", "control character (U+001B"),
        ("tab\there", "control character (U+0009"),
        ("two\u2028lines", "control character (U+2028"),
        ("invoice\u202egpj.exe", "bidirectional control character (U+202E)"),
    ],
)
def test_a_job_name_that_is_not_one_line_of_printable_text_is_a_400_on_name(
    platform, api_as, name, kind
):
    # Shown in e-mail subjects, to platform admins and by gpuctl in a terminal: a line break,
    # an escape sequence or a bidi override would forge what those show.
    response = api_as(platform["alice"]).post("/api/v1/jobs/", {**JOB, "name": name}, format="json")
    assert response.status_code == 400, response.json()
    (message,) = response.json()["name"]
    assert kind in message
    assert not Job.objects.exists()


def test_names_in_any_script_are_kept(platform, api_as):
    name = "résumé 训练 تدريب ﻿✓"
    response = api_as(platform["alice"]).post("/api/v1/jobs/", {**JOB, "name": name}, format="json")
    assert response.status_code == 201, response.json()
    assert Job.objects.get().name == name


def test_an_array_or_item_name_with_a_line_break_is_a_400_naming_it(platform, api_as):
    body = {
        "name": "sweep\nrun",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1},
        "items": [{}, {"name": "lr\r0.1"}, {"name": "fine"}],
    }
    response = api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert set(errors) == {"name", "items[1].name"}, errors
    assert not Job.objects.exists() and not JobArray.objects.exists()
