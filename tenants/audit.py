"""The audit log writer: every admin and quota change is recorded here, with secrets removed.

``audit_record`` is the only code that creates :class:`AuditEntry` rows. It runs inside the
caller's transaction, so an entry exists exactly when its change was committed. Values under keys
that name a secret (password, token, key, hash, secret) are replaced by ``"[redacted]"`` at any
depth, and any string that looks like a raw API token is masked too, so neither a password nor a
token can reach the log even if a caller passes one by mistake.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.utils import timezone

from .models import ApiToken, AuditEntry, Team

if TYPE_CHECKING:
    from .permissions import Caller

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(r"pass(word)?|secret|token|key|hash|credential|authorization", re.I)
# Anything carrying our token prefix followed by token-ish characters.
_RAW_TOKEN = re.compile(re.escape(ApiToken.PREFIX) + r"[A-Za-z0-9_\-]{8,}")


def redact(value: Any) -> Any:
    """A JSON-safe copy of ``value`` with secrets replaced; dates become ISO strings."""
    if isinstance(value, dict):
        return {
            str(k): (REDACTED if _SECRET_KEY.search(str(k)) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return _RAW_TOKEN.sub(ApiToken.PREFIX + REDACTED, value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact(str(value))


def audit_record(
    *,
    actor: Caller,
    action: str,
    target: Any = None,
    target_type: str = "",
    target_id: Any = "",
    team: Team | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    comment: str = "",
) -> AuditEntry:
    """Append one entry. ``actor`` may be None for the system (e.g. expiry of quota requests)."""
    if target is not None:
        target_type = target_type or target._meta.model_name
        target_id = target_id or target.pk
    # A signed-in user is the actor; the anonymous one and None are the system.
    user = actor if isinstance(actor, User) and actor.is_authenticated else None
    return AuditEntry.objects.create(
        time=timezone.now(),
        actor=user,
        actor_name=user.get_username() if user is not None else "system",
        action=action,
        target_type=target_type,
        target_id=str(target_id if target_id is not None else ""),
        target_repr=redact(str(target))[:300] if target is not None else "",
        team=team,
        before=redact(before) if before is not None else None,
        after=redact(after) if after is not None else None,
        comment=redact(comment),
    )
