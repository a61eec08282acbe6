"""CSRF is enforced on every portal form (walked from the URL configuration) and on session-
authenticated API writes; API tokens are never logged; passwords and tokens never reach the audit
log."""

from __future__ import annotations

import logging
import re

import pytest
from django.test import Client

from tenants import quotas as quota_services
from tenants import services
from tenants import teams as team_services
from tenants.audit import redact
from tenants.models import ApiToken, AuditEntry

from .routes import concrete_path, fill_values, iter_routes

pytestmark = pytest.mark.django_db

# Values for the routes' keywords (the admin's own objects; what matters is the CSRF check).
VALUES = {
    "pk": "1",
    "job_id": "1",
    "attempt": "1",
    "number": "1",
    "run_id": "1",
    "array_id": "1",
    "slug": "vision",
    "username": "alice",
    "name": "research",
    "node_id": "1",
    "dataset_id": "1",
    "action": "drain",
    "version": "0",
    "object_id": "1",
    "id": "1",
    "content_type_id": "1",
    "url": "x/",
    "webhook_id": "1",
}


def test_every_portal_post_without_a_csrf_token_is_refused(platform, capsys):
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(platform["admin"])  # the widest rights: every form is reachable
    checked = 0
    for route in iter_routes():
        # The CSP report endpoint is exempt on purpose: browsers post reports without a token.
        if route.is_api or route.is_format_variant or route.name in ("logout", "csp-report"):
            continue
        path = concrete_path(route, fill_values(route, VALUES))
        response = client.post(path, {"name": "x", "team": "vision"})
        assert response.status_code in (403, 405), (path, response.status_code)
        if response.status_code == 403:
            checked += 1
    with capsys.disabled():
        print(f"\n[csrf] {checked} portal routes refused a POST without a CSRF token")
    assert checked > 10
    assert ApiToken.objects.count() == 0  # nothing was created along the way


def test_a_portal_form_with_its_token_works(platform):
    client = Client(enforce_csrf_checks=True)
    client.force_login(platform["alice"])
    page = client.get("/teams/tokens/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())[1]
    response = client.post("/teams/tokens/", {"name": "cli", "csrfmiddlewaretoken": token})
    assert response.status_code == 200 and ApiToken.objects.filter(name="cli").exists()


def test_session_api_writes_need_csrf_but_bearer_tokens_do_not(platform):
    client = Client(enforce_csrf_checks=True)
    client.force_login(platform["alice"])
    refused = client.post("/api/v1/tokens/", {"name": "x"}, content_type="application/json")
    assert refused.status_code == 403 and ApiToken.objects.count() == 0
    _token, raw = services.token_create(user=platform["alice"], name="cli")
    bearer = Client(enforce_csrf_checks=True)
    made = bearer.post(
        "/api/v1/tokens/",
        {"name": "y"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert made.status_code == 201


def test_tokens_are_never_logged(platform, caplog):
    caplog.set_level(logging.DEBUG)
    client = Client()
    created = client.post(
        "/api/v1/auth/token",
        {"username": "alice", "password": "pw-alice"},
        content_type="application/json",
    )
    raw = created.json()["token"]
    api = Client()
    assert api.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    # A wrong token is logged as a 401, without the token.
    bad = raw[:-4] + "XXXX"
    assert api.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {bad}").status_code == 401
    portal = Client()
    portal.force_login(platform["alice"])
    page = portal.post("/teams/tokens/", {"name": "portal"}).content.decode()
    shown = re.search(r'id="new-token" readonly size="56" value="([^"]+)"', page)[1]
    portal.post("/api/v1/tokens/", {"name": "api"}, content_type="application/json")
    logged = "\n".join(r.getMessage() + str(r.args) for r in caplog.records)
    for secret in (raw, bad, shown, "pw-alice"):
        assert secret not in logged
    assert caplog.records  # the requests did log something (the check is not vacuous)


def test_the_audit_log_never_holds_passwords_or_tokens(platform, teams, gpu_models, vera):
    _token, raw = services.token_create(user=platform["alice"], name="laptop")
    services.token_revoke(user=platform["alice"], token_id=_token.pk)
    Client().post(
        "/api/v1/auth/token",
        {"username": "bob", "password": "pw-bob"},
        content_type="application/json",
    )
    team_services.membership_set(user=vera, team=teams["vision"], username="bob", role="viewer")
    # Even a careless caller passing secrets through before/after/comment gets them removed.
    quota_services.quota_set(
        user=platform["admin"],
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=1,
        borrow_limit_gpus=0,
        comment=f"oops {raw}",
    )
    from tenants.audit import audit_record

    audit_record(
        actor=platform["admin"],
        action="test",
        target_type="x",
        before={"password": "pw-alice", "nested": [{"api_token": raw}]},
        after={"key_hash": "abc", "note": f"token {raw} here"},
    )
    dump = "\n".join(
        str((e.before, e.after, e.comment, e.target_repr)) for e in AuditEntry.objects.all()
    )
    assert raw not in dump and "pw-alice" not in dump and "pw-bob" not in dump
    assert "abc" not in dump
    for user in ("alice", "bob"):
        hashed = platform[user].password
        assert hashed not in dump
    assert {"token.create", "token.revoke", "membership.set", "quota.set", "test"} <= set(
        AuditEntry.objects.values_list("action", flat=True)
    )


def test_redact_is_deep():
    cleaned = redact({"Password": "x", "list": [{"secret": 1}, "gpt_abcdefghijklmnop"], "ok": 3})
    assert cleaned == {
        "Password": "[redacted]",
        "list": [{"secret": "[redacted]"}, "gpt_[redacted]"],
        "ok": 3,
    }
