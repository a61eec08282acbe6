"""Writes to tenancy state: API tokens and quotas."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import authenticate
from django.db import transaction
from django.utils import timezone

from scheduler.errors import DomainError, FieldErrors, NotFound

from .models import ApiToken, Quota, Team, hash_token
from .permissions import is_platform_admin


def token_create(*, user, name: str, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns the row and the plain value (shown once, not stored)."""
    if not name.strip():
        raise DomainError("must not be blank", field="name")
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("must be in the future", field="expires_at")
    raw = ApiToken.generate()
    token = ApiToken.objects.create(
        user=user,
        name=name.strip(),
        key_hash=hash_token(raw),
        key_prefix=raw[:8],
        expires_at=expires_at,
    )
    return token, raw


def token_exchange(*, username: str, password: str, name: str = "api") -> tuple[ApiToken, str]:
    """Trade a username and password for a new token. Wrong credentials: one vague error."""
    user = authenticate(username=username, password=password)
    if user is None or not user.is_active:
        raise DomainError("invalid username or password", field="non_field_errors")
    return token_create(user=user, name=name)


def token_revoke(*, user, token_id: int) -> None:
    updated = ApiToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    if not updated:
        raise NotFound("no such token", field="id")


@transaction.atomic
def quota_set(
    *, user, team: Team, gpu_model, guaranteed_gpus: int, borrow_limit_gpus: int
) -> Quota:
    """Set a team's quota for one GPU model (platform admins only)."""
    if not is_platform_admin(user):
        raise DomainError("only platform admins change quotas", field="team")
    errors: dict[str, list[str]] = {}
    for field, value in (
        ("guaranteed_gpus", guaranteed_gpus),
        ("borrow_limit_gpus", borrow_limit_gpus),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            errors[field] = ["must be a whole number >= 0"]
    if errors:
        raise FieldErrors(errors)
    quota, _ = Quota.objects.update_or_create(
        team=team,
        gpu_model=gpu_model,
        defaults={"guaranteed_gpus": guaranteed_gpus, "borrow_limit_gpus": borrow_limit_gpus},
    )
    return quota
