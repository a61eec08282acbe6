"""Single sign-on with the cache (Redis in production) down: the JWKS that a login reads from
and writes to the cache (OIDC_JWKS_CACHE_SECONDS) is fetched from the provider instead, with a
warning, and the login completes. The cache is the production Redis client pointed at a port
nothing listens on, or at the test Redis as a user it refuses (``cache_down``); the provider is
the local one of test_sso_failures."""

from __future__ import annotations

import json
import logging

import jwt
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.integration.identity.test_sso_failures import _callback, _signed_in, provider, sso

__all__ = ["provider", "sso"]  # fixtures used by name below

pytestmark = pytest.mark.django_db


def test_a_login_with_the_cache_down_fetches_the_jwks_and_signs_in(
    rules, sso, provider, cache_down, caplog
):
    """Reading the cached JWKS raised the cache client's error out of the callback: a 500
    for every single sign-on login while Redis was down. Now each login fetches the JWKS
    from the provider, logs why, and signs in; the login page shows no error."""
    for _ in range(2):
        client = Client(raise_request_exception=False)
        with caplog.at_level(logging.WARNING, logger="tenants.sso"):
            response = _callback(client, provider)
        assert response.status_code == 302 and response["Location"] == "/"
        assert _signed_in(client)
    assert get_user_model().objects.get(username="dora").memberships.count() == 1
    assert provider.hits["/jwks"] == 2  # nothing cached: one fetch per login
    warnings = [r.getMessage() for r in caplog.records if r.name == "tenants.sso"]
    assert any("JWKS cache unavailable" in m for m in warnings), warnings


def test_a_refused_login_with_the_cache_down_is_still_refused(rules, sso, provider, cache_down):
    """Degrading does not loosen the checks: a token signed with a key the provider's JWKS does
    not hold is refused (the login page), not signed in and not a 500."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        jwt.decode(provider.id_token(), options={"verify_signature": False}),
        other,
        algorithm="RS256",
        headers={"kid": provider.kid},
    )
    body = json.dumps({"access_token": "a", "id_token": forged}).encode()
    provider.answers["/token"] = (200, "application/json", body)
    client = Client(raise_request_exception=False)
    response = _callback(client, provider)
    assert response.status_code == 302 and response["Location"] == "/login/?sso=failed"
    assert not _signed_in(client)
    assert not get_user_model().objects.filter(username="dora").exists()
