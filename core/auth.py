"""One bearer-token authentication for every kind of token the platform issues.

``Authorization: Bearer <token>`` is read here once: the header split, the keyword, a malformed
header or an undecodable token refused (401), and a token of another kind (its prefix is not
this class's) left to the next authenticator. Subclasses say which tokens are theirs
(``prefix``) and how one becomes a user (``authenticate_token``); the token's secret is never
logged. Users' API tokens (``tenants.authentication``) and node agents' tokens
(``telemetry.api``) are the two kinds of rows; the Prometheus scrape token is the third user.
"""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request


class BearerTokenAuthentication(authentication.BaseAuthentication):
    # Header keywords this scheme answers to (lower case).
    keywords: tuple[str, ...] = ("bearer",)
    # Only tokens starting with this are this class's; "" takes every token.
    prefix = ""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("malformed Authorization header")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("malformed token") from None
        if not raw.startswith(self.prefix):
            return None
        return self.authenticate_token(raw)

    def authenticate_token(self, raw: str) -> tuple[Any, Any] | None:
        """(user, token) for the token ``raw``; raise ``AuthenticationFailed`` when it is
        unknown, revoked or expired, or return None to leave it to the next authenticator."""
        raise NotImplementedError

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"
