"""Names other people see (teams, datasets, webhooks, API tokens, as well as jobs and arrays) are
one line of printable text wherever they enter: the REST API (and so gpuctl), the portal's forms,
and the model's own validation (Django admin, ``full_clean``). A control character or a
bidirectional override is a 400 naming the field and the character, with nothing written."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from notifications import services as notification_services
from notifications import targets
from notifications.models import Webhook
from scheduler.models import Dataset, Job, JobArray
from tenants.models import ApiToken, Team

pytestmark = pytest.mark.django_db

BAD = [
    ("null\x00byte", "U+0000"),
    ("bell\x07ring", "U+0007"),
    ("new\nline", "U+000A"),
    ("ok\x1b[2Jcleared", "U+001B"),
    ("del\x7fete", "U+007F"),
    ("c1\x9bcontrol", "U+009B"),
    ("invoice\u202egpj.exe", "U+202E"),
    ("isolate\u2066x\u2069", "U+2066"),
]
# What the JSON and form guards already refuse before a name is looked at (PostgreSQL text
# cannot hold it): still a 400, on the field, with another message.
NUL = "U+0000"


@pytest.fixture(autouse=True)
def _public_dns(monkeypatch):
    # Webhook URLs are resolved when saved; every host is a public address here.
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.216.34"])


@pytest.fixture
def dataset(platform):
    return Dataset.objects.create(name="imagenet")


@pytest.fixture
def hook(platform):
    return notification_services.webhook_create(
        user=platform["alice"], name="mine", url="https://hooks.example.com/a"
    )


def _state() -> tuple:
    return (
        sorted(Team.objects.values_list("name", flat=True)),
        sorted(Dataset.objects.values_list("name", flat=True)),
        sorted(Webhook.objects.values_list("name", flat=True)),
        sorted(ApiToken.objects.values_list("name", flat=True)),
        Job.objects.count(),
        JobArray.objects.count(),
    )


def _api_cases(platform, dataset, hook):
    return [
        ("alice", "post", "/api/v1/tokens/", {}),
        ("alice", "post", "/api/v1/auth/token", {"username": "alice", "password": "pw-alice"}),
        ("alice", "post", "/api/v1/notifications/webhooks/", {"url": "https://h.example.com/"}),
        ("alice", "patch", f"/api/v1/notifications/webhooks/{hook.pk}/", {}),
        ("admin", "post", "/api/v1/admin/datasets/", {}),
        ("admin", "patch", f"/api/v1/admin/datasets/{dataset.pk}/", {}),
        (
            "alice",
            "post",
            "/api/v1/jobs/",
            {"team": "vision", "workers": 1, "gpus_per_worker": 1},
        ),
    ]


@pytest.mark.parametrize(("name", "code"), BAD)
def test_a_name_with_a_control_character_is_a_400_on_name_through_the_api(
    platform, api_as, dataset, hook, name, code
):
    before = _state()
    for who, method, path, body in _api_cases(platform, dataset, hook):
        response = getattr(api_as(platform[who]), method)(
            path, {**body, "name": name}, format="json"
        )
        assert response.status_code == 400, (path, response.status_code, response.json())
        errors = response.json()
        if code == NUL:  # the JSON parser's refusal: it names where the NUL is
            assert "the string at name holds a NUL" in str(errors), (path, errors)
        else:
            assert any(code in message for message in errors["name"]), (path, errors)
    assert _state() == before


def _portal_cases(dataset):
    # (who, where, the form field, the rest of the form)
    return [
        (
            "admin",
            "/teams/manage/teams/new/",
            "name",
            {"slug": "robotics", "fair_share_weight": "1"},
        ),
        ("alice", "/teams/tokens/", "name", {}),
        (
            "alice",
            "/notifications/webhooks/",
            "name",
            {"url": "https://h.example.com/", "format": "generic"},
        ),
        ("admin", "/cluster/routing/datasets/new/", "new-name", {}),
        ("admin", f"/cluster/routing/datasets/{dataset.pk}/", f"d-{dataset.pk}-name", {}),
    ]


@pytest.mark.parametrize(("name", "code"), [case for case in BAD if case[1] != NUL])
def test_a_name_with_a_control_character_is_a_form_error_in_the_portal(
    platform, dataset, hook, name, code
):
    before = _state()
    for who, path, field, body in _portal_cases(dataset):
        client = Client()
        client.force_login(platform[who])
        response = client.post(path, {**body, field: name})
        assert response.status_code == 400, (path, response.status_code)
        # the form error, shown next to the field
        assert f"holds a control character ({code}" in response.content.decode() or (
            f"bidirectional control character ({code})" in response.content.decode()
        ), path
    assert _state() == before


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (Team, "name"),
        (Dataset, "name"),
        (Webhook, "name"),
        (ApiToken, "name"),
        (Job, "name"),
        (JobArray, "name"),
    ],
)
def test_the_model_fields_refuse_a_control_character(model, field):
    with pytest.raises(ValidationError) as refused:
        model._meta.get_field(field).run_validators("bidi\u202eoverride")
    assert "U+202E" in str(refused.value)
    model._meta.get_field(field).run_validators("résumé 训练 تدريب ✓ (v2), 50%")


def test_names_in_any_script_are_kept(platform, api_as):
    name = "Vision — résumé 训练 تدريب ✓"
    response = api_as(platform["alice"]).post("/api/v1/tokens/", {"name": name}, format="json")
    assert response.status_code == 201, response.json()
    assert ApiToken.objects.get(user=platform["alice"]).name == name


@pytest.mark.parametrize("field", ["dataset", "dataset_version"])
def test_a_job_naming_its_dataset_with_a_control_character_is_a_400_on_that_field(
    platform, api_as, field
):
    body = {"name": "t", "team": "vision", "workers": 1, "gpus_per_worker": 1}
    response = api_as(platform["alice"]).post(
        "/api/v1/jobs/", {**body, field: "imagenet\x1b[31m"}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert list(response.json()) == [field]
    assert "U+001B" in response.json()[field][0]
    assert not Job.objects.exists()
