"""Free text other people see (a priority class's description, a price's note, the reason of a
policy version or a quota request, a platform admin's decision comment) may span lines but holds
no escape sequence, other control character or bidirectional control (``core.names.text_errors``):
such a character is a 400 naming the field, or the portal form's error, with nothing written."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import PriceRate
from core.names import text_errors
from policyversions import services as policy_services
from policyversions.models import PolicyVersion
from tenants.models import AuditEntry, PriorityClass, QuotaRequest

pytestmark = pytest.mark.django_db

BAD = [
    ("red\x1b[31malert", "U+001B"),
    ("bell\x07", "U+0007"),
    ("c1\x9bcontrol", "U+009B"),
    ("invoice\u202egpj.exe", "U+202E"),
    ("isolate\u2066x\u2069", "U+2066"),
]


def test_line_breaks_tabs_and_any_script_are_text():
    assert text_errors("first line\nsecond line\r\n\tindented") == []
    assert text_errors("עברית and العربية read right to left without help") == []
    assert text_errors(None) == []


@pytest.mark.parametrize(("text", "code"), BAD)
def test_other_controls_are_refused_naming_the_character(text, code):
    (message,) = text_errors(text)
    assert code in message


@pytest.mark.parametrize(("text", "code"), BAD)
def test_a_priority_class_description(platform, client, text, code):
    client.force_login(platform["admin"])
    page = client.post(
        "/teams/manage/priorities/", {"name": "scratch", "value": "5", "description": text}
    )
    assert page.status_code == 400
    assert code in " ".join(page.context["priority_form"].errors["description"])
    assert not PriorityClass.objects.filter(name="scratch").exists()
    saved = client.post(
        "/teams/manage/priorities/", {"name": "scratch", "value": "5", "description": "for tests"}
    )
    assert saved.status_code == 302
    assert PriorityClass.objects.get(name="scratch").description == "for tests"


@pytest.mark.parametrize(("text", "code"), BAD)
def test_a_price_note(platform, api_as, text, code):
    body = {
        "gpu_model": "h100-80gb",
        "capacity": "on_demand",
        "rate_per_gpu_hour": "3.10",
        "effective_from": (timezone.now() + timedelta(days=1)).isoformat(),
        "note": text,
    }
    refused = api_as(platform["admin"]).post("/api/v1/billing/prices/", body, format="json")
    assert refused.status_code == 400
    assert code in " ".join(refused.json()["note"])
    assert not PriceRate.objects.exists()


@pytest.mark.parametrize(("text", "code"), BAD)
def test_a_policy_reason(platform, api_as, text, code):
    policy_services.policy_version_seed()
    body = {"reason": text, "engine_config": {"queue_aging_s": 600}}
    admin = api_as(platform["admin"])
    refused = admin.post("/api/v1/policy/versions", body, format="json")
    assert refused.status_code == 400
    assert code in " ".join(refused.json()["reason"])
    assert PolicyVersion.objects.count() == 1
    body["reason"] = "age faster:\n- shorter waits for small jobs"
    assert admin.post("/api/v1/policy/versions", body, format="json").status_code == 201


@pytest.mark.parametrize(("text", "code"), BAD)
def test_a_quota_request_reason_and_a_decision_comment(platform, teams, vera, api_as, text, code):
    body = {"team": "vision", "gpu_model": "h100-80gb", "guaranteed_gpus": 4, "reason": text}
    refused = api_as(vera).post("/api/v1/quota-requests/", body, format="json")
    assert refused.status_code == 400
    assert code in " ".join(refused.json()["reason"])
    assert not QuotaRequest.objects.exists()

    body["reason"] = "paper deadline\nuntil the camera-ready"
    created = api_as(vera).post("/api/v1/quota-requests/", body, format="json")
    assert created.status_code == 201, created.content
    url = f"/api/v1/quota-requests/{created.json()['id']}"
    entries = AuditEntry.objects.count()
    for decision in ("approve", "reject"):
        answer = api_as(platform["admin"]).post(
            f"{url}/{decision}/", {"comment": text}, format="json"
        )
        assert answer.status_code == 400
        assert code in " ".join(answer.json()["comment"])
    assert QuotaRequest.objects.get().status == "pending"
    assert AuditEntry.objects.count() == entries


def test_a_description_written_before_the_check_does_not_block_a_policy_change(platform, api_as):
    # A policy change rewrites the class with the description it has; only new text is checked.
    PriorityClass.objects.filter(name="research").update(description="old\x1b[1m")
    policy_services.policy_version_seed()
    body = {
        "reason": "research above production for a week",
        "priority_classes": {
            "research": {"value": 1500, "preemptible_by_default": True, "restricted": False}
        },
    }
    applied = api_as(platform["admin"]).post("/api/v1/policy/versions", body, format="json")
    assert applied.status_code == 201, applied.content
    assert PriorityClass.objects.get(name="research").value == 1500
