"""API token authentication: ``Authorization: Bearer <token>`` (or ``Token <token>``).

Only the token's SHA-256 is stored; a revoked or expired token authenticates nobody. The plain
token is never logged. The header is read by ``core.auth.BearerTokenAuthentication``, as for
node agents' tokens.

A single sign-on user's token works only while the provider confirmed the user (a login or a
successful session re-check, both recorded in ``SsoIdentity.last_login_at``) at most
``OIDC_TOKEN_CONFIRMATION_DAYS`` ago: tokens never reach the provider, and without the rule a
user removed from the directory kept using the API with theirs for ever. Past it the token
answers 401 saying to sign in to the portal; it is not revoked, so the next sign-in makes it work
again. Local (password) users' tokens are not affected.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions

from core.auth import BearerTokenAuthentication

from .models import ApiToken, SsoIdentity, hash_token

if TYPE_CHECKING:
    from .permissions import Caller

# The 401's "code": clients (gpuctl) tell "sign in to the portal" from a token that is no good.
SSO_SIGN_IN_REQUIRED = "sso_sign_in_required"


class ApiTokenAuthentication(BearerTokenAuthentication):
    """A user's API token (any token not claimed by an authenticator before this one)."""

    keywords = ("bearer", "token")

    def authenticate_token(self, raw: str) -> tuple[User, ApiToken]:
        token = (
            # The user's identity comes with the same row: the single sign-on rule costs no query.
            ApiToken.objects.select_related("user", "user__sso_identity")
            .filter(key_hash=hash_token(raw), revoked_at__isnull=True)
            .first()
        )
        now = timezone.now()
        if token is None or (token.expires_at and token.expires_at <= now):
            raise exceptions.AuthenticationFailed("invalid or expired token")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("user inactive")
        identity = getattr(token.user, "sso_identity", None)
        if identity is not None and sso_confirmation_expired(identity, now=now):
            days = settings.OIDC_TOKEN_CONFIRMATION_DAYS
            raise exceptions.AuthenticationFailed(
                {
                    "detail": (
                        "sign in to the portal to confirm your account; API tokens of "
                        f"single-sign-on users need a sign-in every {days} days (last sign-in "
                        f"{identity.last_login_at:%Y-%m-%d}); the token stays valid"
                    ),
                    "code": SSO_SIGN_IN_REQUIRED,
                }
            )
        # Recording last use at most once a minute keeps reads from becoming writes.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token


def sso_confirmation_expired(identity: SsoIdentity, *, now: datetime) -> bool:
    """Whether the provider's last confirmation of ``identity`` is older than
    ``OIDC_TOKEN_CONFIRMATION_DAYS`` (never while the setting is 0 or empty, nor while single
    sign-on is off: no provider could confirm anyone, so the directory is no longer the word)."""
    days = settings.OIDC_TOKEN_CONFIRMATION_DAYS
    if not days or not settings.SSO_ENABLED:
        return False
    return identity.last_login_at < now - timedelta(days=days)


def sso_tokens_work_until(user: Caller) -> datetime | None:
    """When ``user``'s API tokens stop working for want of a sign-in, or None where the rule
    does not apply to them (a password user, the rule or single sign-on off)."""
    # The reverse one-to-one raises when there is no identity; getattr reads that as None.
    identity: SsoIdentity | None = getattr(user, "sso_identity", None)
    days = settings.OIDC_TOKEN_CONFIRMATION_DAYS
    if identity is None or not days or not settings.SSO_ENABLED:
        return None
    return identity.last_login_at + timedelta(days=days)


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents the token scheme in the OpenAPI schema (clients and fuzzers read it)."""

    target_class = "tenants.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "an API token (gpt_…)"}
