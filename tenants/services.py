"""Writes to tenancy state: API tokens here, and what the other writes share (the refusal
``PermissionDenied``); the team tree and memberships are in ``tenants.teams``, quotas and quota
requests in ``tenants.quotas``, priority classes and entitlements in ``tenants.entitlements``.

Every function of these modules is keyword-only and atomic, checks permission through
``tenants.permissions``, and records an audit entry (who, what, before -> after, secrets removed)
in the same transaction as the change, so the log holds exactly the committed changes. Refusals
raise ``DomainError`` subclasses naming the field at fault and write nothing.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from core.errors import DomainError, FieldErrors, NotFound
from core.names import name_errors

from .audit import audit_record
from .models import ApiToken, hash_token


class PermissionDenied(DomainError):
    """The caller may not do this (403). Used where the object is visible but not writable."""

    status_code = 403


# --- validation helpers -------------------------------------------------------------------------


def _digits(text: str) -> bool:
    """Whether ``text`` is ASCII digits: ``str.isdigit`` also takes "²" (which ``int`` then
    refuses with a ValueError) and "٣" (which it reads as 3)."""
    return text.isascii() and text.isdigit()


# --- tokens -------------------------------------------------------------------------------------


def token_create(
    *, user: User, name: object, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns the row and the plain value (shown once, not stored).

    Only the SHA-256 and an 8-character prefix are stored; the plain value is never logged."""
    if not isinstance(name, str) or not name.strip():
        raise DomainError("must not be blank", field="name")
    if len(name.strip()) > 100:
        raise DomainError("must be at most 100 characters", field="name")
    if problems := name_errors(name):
        raise FieldErrors({"name": problems})
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("must be in the future", field="expires_at")
    raw = ApiToken.generate()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name.strip(),
            key_hash=hash_token(raw),
            key_prefix=raw[:8],
            expires_at=expires_at,
        )
        audit_record(
            actor=user,
            action="token.create",
            target_type="apitoken",
            target_id=token.pk,
            after={"name": token.name, "user": user.get_username(), "expires_at": expires_at},
        )
    return token, raw


def token_exchange(*, username: str, password: str, name: str = "api") -> tuple[ApiToken, str]:
    """Trade a username and password for a new token. Wrong credentials: one vague error."""
    user = authenticate(username=username, password=password)
    if user is None or not user.is_active:
        raise DomainError("invalid username or password", field="non_field_errors")
    return token_create(user=user, name=name)


@transaction.atomic
def token_revoke(*, user: User, token_id: int) -> ApiToken:
    """Revoke one of ``user``'s own live tokens. Another user's token, or a revoked one, is
    NotFound (never tell which). Idempotence is the caller's: a second revoke is NotFound."""
    now = timezone.now()
    updated = ApiToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
        revoked_at=now
    )
    if not updated:
        raise NotFound("no such token", field="id")
    token = ApiToken.objects.get(pk=token_id)
    audit_record(
        actor=user,
        action="token.revoke",
        target_type="apitoken",
        target_id=token.pk,
        before={"name": token.name, "revoked_at": None},
        after={"name": token.name, "revoked_at": now},
    )
    return token
