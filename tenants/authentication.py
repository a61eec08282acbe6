"""API token authentication: ``Authorization: Bearer <token>`` (or ``Token <token>``).

Only the token's SHA-256 is stored; a revoked or expired token authenticates nobody. The plain
token is never logged.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .models import ApiToken, hash_token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("malformed Authorization header")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("malformed token") from None
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

    def authenticate_header(self, request):
        return "Bearer"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents the token scheme in the OpenAPI schema (clients and fuzzers read it)."""

    target_class = "tenants.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "an API token (gpt_…)"}
