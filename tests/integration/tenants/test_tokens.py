"""API tokens: created in the portal or the API, shown once, stored hashed, listed with name,
expiry and last use, revocable; another user's token is a 404."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.models import ApiToken, AuditEntry, hash_token

pytestmark = pytest.mark.django_db


def test_api_create_list_use_revoke(platform, api_as):
    alice = platform["alice"]
    created = api_as(alice).post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    assert "no-store" in created["Cache-Control"]
    body = created.json()
    raw = body["token"]
    assert raw.startswith("gpt_") and body["key_prefix"] == raw[:8]
    stored = ApiToken.objects.get(pk=body["id"])
    assert stored.key_hash == hash_token(raw) and stored.last_used_at is None
    listed = api_as(alice).get("/api/v1/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["laptop"]
    assert raw not in str(listed) and "token" not in listed[0]

    client = api_as()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/jobs/").status_code == 200
    stored.refresh_from_db()
    assert stored.last_used_at is not None

    assert api_as(alice).post(f"/api/v1/tokens/{stored.pk}/revoke/").status_code == 200
    assert client.get("/api/v1/jobs/").status_code == 401
    assert api_as(alice).delete(f"/api/v1/tokens/{stored.pk}/").status_code == 404
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["token.create", "token.revoke"]


def test_tokens_are_private_to_their_user(platform, api_as):
    created = api_as(platform["alice"]).post("/api/v1/tokens/", {"name": "a"}, format="json")
    token_id = created.json()["id"]
    for user in (platform["bob"], platform["admin"]):
        client = api_as(user)
        assert client.get(f"/api/v1/tokens/{token_id}/").status_code == 404
        assert client.delete(f"/api/v1/tokens/{token_id}/").status_code == 404
        assert client.post(f"/api/v1/tokens/{token_id}/revoke/").status_code == 404
        assert client.get("/api/v1/tokens/").json()["results"] == []
    assert ApiToken.objects.get(pk=token_id).revoked_at is None


def test_expired_token_authenticates_nobody(platform, api_as):
    past = api_as(platform["alice"]).post(
        "/api/v1/tokens/",
        {"name": "old", "expires_at": (timezone.now() - timedelta(minutes=1)).isoformat()},
        format="json",
    )
    assert past.status_code == 400 and "expires_at" in past.json()
    soon = api_as(platform["alice"]).post(
        "/api/v1/tokens/",
        {"name": "soon", "expires_at": (timezone.now() + timedelta(hours=1)).isoformat()},
        format="json",
    )
    raw = soon.json()["token"]
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    client = api_as()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/jobs/").status_code == 401


def test_blank_name_is_refused(platform, api_as):
    response = api_as(platform["alice"]).post("/api/v1/tokens/", {"name": "  "}, format="json")
    assert response.status_code == 400 and "name" in response.json()
    assert ApiToken.objects.count() == 0


def test_portal_shows_a_new_token_once(platform, client):
    client.force_login(platform["alice"])
    page = client.post("/teams/tokens/", {"name": "cli"})
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(user=platform["alice"])
    html = page.content.decode()
    raw = html.split('id="new-token" readonly size="56" value="')[1].split('"')[0]
    assert hash_token(raw) == token.key_hash
    again = client.get("/teams/tokens/").content.decode()
    assert raw not in again and token.key_prefix in again and "cli" in again
    revoked = client.post(f"/teams/tokens/{token.pk}/revoke/")
    assert revoked.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_portal_cannot_revoke_someone_elses_token(platform, client):
    token = ApiToken.objects.create(
        user=platform["bob"], name="b", key_hash=hash_token("gpt_x"), key_prefix="gpt_x"
    )
    client.force_login(platform["alice"])
    assert client.post(f"/teams/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
