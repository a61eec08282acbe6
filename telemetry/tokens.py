"""Node agent tokens: issue, look up (cached both ways), revoke.

Agents post every few seconds, so a token is not looked up in the database on every batch:

- **Known tokens** are kept per process for ``TOKEN_CACHE_SECONDS`` (the row with its node).
  Each use checks one shared value in the cache (``TOKEN_GENERATION_KEY``, Redis in
  production), kept there for ``TELEMETRY_TOKEN_MARKER_SECONDS``: revoking or deleting any token
  through Django (the services, the admin, a shell's ``save()``/``delete()``) replaces it (after
  commit), and every process's cached tokens are then looked up again: such a token stops
  working at once, in every process. When the value has expired, the next lookup reads it from
  the token table itself (``token_table_marker``: one aggregate of a small table, once per
  expiry for all processes together), so a token revoked or deleted behind Django's back (a
  bare SQL ``UPDATE`` or ``DELETE``) is refused within ``TELEMETRY_TOKEN_MARKER_SECONDS``.
- **Unknown tokens** (never issued, revoked, deleted) are remembered in the cache for
  ``TOKEN_MISS_CACHE_SECONDS`` under the SHA-256 of the token (never the token): an agent
  with a wrong token, or anyone trying tokens, gets its 401s without a query each. Issuing a
  token, or saving one live again, forgets its entry at once.

Both checks are one cache round trip per batch. Without a reachable cache, every batch is
looked up in the database (nothing cached, so nothing outlives a revocation).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from scheduler.models import Node

from . import conf
from .models import NodeAgentToken, hash_node_token

log = logging.getLogger(__name__)

TOKEN_PREFIX = "gpn_"

# token hash -> (valid until (monotonic), generation it was read under, the row with its node).
TOKEN_CACHE_SECONDS = 30.0
_token_cache: dict[str, tuple[float, str | None, NodeAgentToken]] = {}
# Replaced (by a random value, never a counter: a counter evicted from the cache and restarted
# could come back to a value some process cached under) whenever a token is revoked or deleted;
# read from the token table (``token_table_marker``) when it has expired.
TOKEN_GENERATION_KEY = "telemetry:node-token:generation"
# How long an unknown token is answered 401 without a query. Short: it is only there to take
# repeats of the same wrong token off the database.
TOKEN_MISS_CACHE_SECONDS = 60


def _miss_key(key_hash: str) -> str:
    return f"telemetry:node-token:unknown:{key_hash}"


def _forget_miss(key_hash: str) -> None:
    try:
        cache.delete(_miss_key(key_hash))
    except Exception:
        log.warning("node token: unknown-token cache entry not cleared: cache unavailable")


def forget_unknown_token(key_hash: str) -> None:
    """The token with this hash is live (issued, or saved unrevoked): forget that it was
    unknown, now and after commit (a lookup racing the write could have recorded it again)."""
    _forget_miss(key_hash)
    transaction.on_commit(lambda: _forget_miss(key_hash))


def token_table_marker() -> str:
    """A value of the token table that changes whenever a token stops (or starts) being live,
    however the row was written: the number and the id sum of the live tokens, and the newest
    revocation. One aggregate over a table of a few rows per node. (A revocation and an
    issue cannot cancel out: a new token's id is above every revoked one's.)"""
    live = Q(revoked_at__isnull=True)
    row = NodeAgentToken.objects.aggregate(
        live=Count("id", filter=live), ids=Sum("id", filter=live), revoked=Max("revoked_at")
    )
    revoked = row["revoked"].isoformat() if row["revoked"] is not None else "-"
    return f"table:{row['live']}:{row['ids'] or 0}:{revoked}"


def _shared_marker(shared: dict[str, Any]) -> str:
    """The shared value the cached tokens are checked against: the cache's, or (expired or
    evicted) the token table's, put back for ``TELEMETRY_TOKEN_MARKER_SECONDS``. Read before the
    token's own lookup, so a change committed in between makes the entry stale, never valid."""
    marker = shared.get(TOKEN_GENERATION_KEY)
    if isinstance(marker, str):
        return marker
    marker = token_table_marker()
    try:
        # add, not set: a revocation's new value written meanwhile is not overwritten.
        cache.add(TOKEN_GENERATION_KEY, marker, timeout=conf.get("TELEMETRY_TOKEN_MARKER_SECONDS"))
    except Exception:
        log.warning("node token: table marker not shared: cache unavailable")
    return marker


def tokens_changed() -> None:
    """A token was revoked or deleted: every process looks its cached tokens up again. After
    commit, so a lookup running meanwhile cannot cache the old row under the new value."""

    def bump() -> None:
        try:
            cache.set(
                TOKEN_GENERATION_KEY,
                secrets.token_hex(8),
                timeout=conf.get("TELEMETRY_TOKEN_MARKER_SECONDS"),
            )
        except Exception:
            # The value the other processes check expires on its own: they read the token
            # table then, and refuse the token within TELEMETRY_TOKEN_MARKER_SECONDS.
            log.error(
                "node token revocation not announced to other processes: cache down; they"
                " refuse it once the token marker expires (TELEMETRY_TOKEN_MARKER_SECONDS)"
            )

    _token_cache.clear()
    transaction.on_commit(bump)


def node_token_issue(*, node: Node, created_by: Any = None) -> tuple[NodeAgentToken, str]:
    """Create a token for ``node``'s agent; returns the row and the plain token (shown once,
    never stored). Earlier tokens stay valid until revoked (rotation without a gap)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = NodeAgentToken.objects.create(
        node=node,
        key_hash=hash_node_token(raw),
        key_prefix=raw[:12],
        created_at=timezone.now(),
        created_by=created_by,
    )
    return token, raw


def node_token_for(raw: str) -> NodeAgentToken | None:
    """The live token row (with its node) whose secret is ``raw``, else None. Known tokens are
    cached per process for ``TOKEN_CACHE_SECONDS`` and dropped as soon as any token is revoked
    or deleted; unknown ones are remembered for ``TOKEN_MISS_CACHE_SECONDS`` (no query for their
    repeats). ``last_used_at`` is written at most once a minute."""
    key = hash_node_token(raw)
    shared: dict[str, Any]
    try:
        shared, cached = cache.get_many([TOKEN_GENERATION_KEY, _miss_key(key)]), True
    except Exception:
        log.warning("node token lookup without cache: cache unavailable")
        shared, cached = {}, False
    now = time.monotonic()
    hit = _token_cache.get(key)
    if hit is None and _miss_key(key) in shared:
        return None
    generation = _shared_marker(shared) if cached else None
    if cached and hit is not None and hit[0] > now and hit[1] == generation:
        return hit[2]
    if _miss_key(key) in shared:
        return None
    token: NodeAgentToken | None = (
        NodeAgentToken.objects.select_related("node")
        .filter(key_hash=key, revoked_at__isnull=True)
        .first()
    )
    if token is None:
        _token_cache.pop(key, None)
        if cached:
            try:
                cache.set(_miss_key(key), 1, timeout=TOKEN_MISS_CACHE_SECONDS)
            except Exception:
                log.warning("node token: unknown token not remembered: cache unavailable")
        return None
    if cached:
        if len(_token_cache) > 50_000:  # bounded: many distinct live tokens cannot grow it forever
            _token_cache.clear()
        # Under the generation read before the query: a revocation that committed since has
        # replaced it, so this entry is not used.
        _token_cache[key] = (now + TOKEN_CACHE_SECONDS, generation, token)
    wall = timezone.now()
    # At most one write a minute per token: batches must not all become writes.
    if token.last_used_at is None or (wall - token.last_used_at).total_seconds() > 60:
        NodeAgentToken.objects.filter(pk=token.pk).update(last_used_at=wall)
        token.last_used_at = wall
    return token


def forget_cached_tokens() -> None:
    """Drop this process's token cache (tests)."""
    _token_cache.clear()


def forget_node_tokens(node_id: int) -> None:
    """Drop this process's cached tokens of a node (it was deleted under them)."""
    for key, (_, _, token) in list(_token_cache.items()):
        if token.node_id == node_id:
            _token_cache.pop(key, None)


def node_token_revoke(*, token: NodeAgentToken) -> bool:
    """Revoke ``token``; False when it was already revoked. Idempotent. Every process stops
    accepting it at once (after commit); when this process cannot reach the cache to announce
    it, the others within ``TELEMETRY_TOKEN_MARKER_SECONDS``."""
    revoked = NodeAgentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    tokens_changed()
    return bool(revoked)
