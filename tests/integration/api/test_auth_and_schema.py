"""Token exchange, token authentication, and the OpenAPI schema."""

import json
import re

import pytest
from django.test import Client

from tenants.models import ApiToken, hash_token

pytestmark = pytest.mark.django_db


def test_token_exchange_then_bearer_auth(platform, api_as):
    response = api_as().post(
        "/api/v1/auth/token", {"username": "alice", "password": "pw-alice"}, format="json"
    )
    assert response.status_code == 201
    raw = response.json()["token"]
    stored = ApiToken.objects.get(user=platform["alice"])
    assert stored.key_hash == hash_token(raw) and raw not in stored.key_hash
    client = api_as()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/jobs/").status_code == 200


def test_wrong_password_is_400_without_a_token(platform, api_as):
    response = api_as().post(
        "/api/v1/auth/token", {"username": "alice", "password": "nope"}, format="json"
    )
    assert response.status_code == 400
    assert "invalid username or password" in str(response.json())
    assert ApiToken.objects.count() == 0


def test_missing_fields_are_named(platform, api_as):
    response = api_as().post("/api/v1/auth/token", {}, format="json")
    assert response.status_code == 400 and set(response.json()) == {"username", "password"}


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        # a JSON body that is no object: was a 500 (AttributeError), reachable without a login
        ([], "non_field_errors", "expected a JSON object"),
        ("alice", "non_field_errors", "expected a JSON object"),
        (None, "non_field_errors", "expected a JSON object"),
        (1, "non_field_errors", "expected a JSON object"),
        ({"username": ["alice"], "password": "pw-alice"}, "username", "must be a string"),
        # a name that is no string was silently replaced by "api"
        ({"username": "alice", "password": "pw-alice", "name": []}, "name", "non-empty string"),
        ({"username": "alice", "password": "pw-alice", "name": " "}, "name", "non-empty string"),
    ],
)
def test_a_token_request_that_is_not_an_object_of_strings_is_a_400(
    platform, api_as, body, field, reason
):
    response = api_as().post(
        "/api/v1/auth/token", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400 and reason in response.json()[field][0], response.content
    assert ApiToken.objects.count() == 0


def test_revoked_token_authenticates_nobody(platform, api_as):
    raw = (
        api_as()
        .post("/api/v1/auth/token", {"username": "alice", "password": "pw-alice"}, format="json")
        .json()["token"]
    )
    from django.utils import timezone

    ApiToken.objects.update(revoked_at=timezone.now())
    client = api_as()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/jobs/").status_code == 401


def test_schema_generates_and_docs_are_served_locally(db):
    client = Client()
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/jobs/" in schema.content
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"cdn" not in docs.content.lower()


def test_redoc_is_served_with_its_bundle_from_the_portal_only(db):
    client = Client()
    page = client.get("/api/redoc/")
    assert page.status_code == 200
    [bundle_url] = re.findall(r'<script src="([^"]+)"', page.content.decode())
    assert bundle_url.startswith("/api/redoc/redoc.")
    bundle = client.get(bundle_url)
    assert bundle.status_code == 200
    assert bundle["Content-Type"].startswith("text/javascript")
    assert "immutable" in bundle["Cache-Control"]
    body = b"".join(bundle.streaming_content) if bundle.streaming else bundle.content
    assert b"redoc.ly/redoc/logo" not in body and len(body) > 100_000
    assert client.get("/api/redoc/redoc.0123456789abcdef.js").status_code == 404
