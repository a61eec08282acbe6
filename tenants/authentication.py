"""API token authentication: ``Authorization: Bearer <token>`` (or ``Token <token>``).

Only the token's SHA-256 is stored; a revoked or expired token authenticates nobody. The plain
token is never logged. The header is read by ``core.auth.BearerTokenAuthentication``, as for
node agents' tokens.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions

from core.auth import BearerTokenAuthentication

from .models import ApiToken, hash_token


class ApiTokenAuthentication(BearerTokenAuthentication):
    """A user's API token (any token not claimed by an authenticator before this one)."""

    keywords = ("bearer", "token")

    def authenticate_token(self, raw: str):
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=hash_token(raw), revoked_at__isnull=True)
            .first()
        )
        now = timezone.now()
        if token is None or (token.expires_at and token.expires_at <= now):
            raise exceptions.AuthenticationFailed("invalid or expired token")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("user inactive")
        # Recording last use at most once a minute keeps reads from becoming writes.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents the token scheme in the OpenAPI schema (clients and fuzzers read it)."""

    target_class = "tenants.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "an API token (gpt_…)"}
