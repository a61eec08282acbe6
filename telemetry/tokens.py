"""Node agent tokens: issue, look up (cached both ways), revoke.

Agents post every few seconds, so a token is not looked up in the database on every batch:

- **Known tokens** are kept per process for ``TOKEN_CACHE_SECONDS`` (the row with its node).
  Each use checks one shared value in the cache (``TOKEN_GENERATION_KEY``, Redis in
  production): revoking or deleting any token replaces it (after commit), and every process's
  cached tokens are then looked up again. A revoked or deleted token stops working at once, in
  every process.
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
from django.utils import timezone

from scheduler.models import Node

from .models import NodeAgentToken, hash_node_token

log = logging.getLogger(__name__)

TOKEN_PREFIX = "gpn_"

# token hash -> (valid until (monotonic), generation it was read under, the row with its node).
TOKEN_CACHE_SECONDS = 30.0
_token_cache: dict[str, tuple[float, str | None, NodeAgentToken]] = {}
# Replaced (by a random value, never a counter: a counter evicted from the cache and restarted
# could come back to a value some process cached under) whenever a token is revoked or deleted.
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


def tokens_changed() -> None:
    """A token was revoked or deleted: every process looks its cached tokens up again. After
    commit, so a lookup running meanwhile cannot cache the old row under the new value."""

    def bump() -> None:
        try:
            cache.set(TOKEN_GENERATION_KEY, secrets.token_hex(8), timeout=None)
        except Exception:
            log.error("node token revocation not announced to other processes: cache down")

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
    try:
        shared = cache.get_many([TOKEN_GENERATION_KEY, _miss_key(key)])
        generation, cached = shared.get(TOKEN_GENERATION_KEY), True
    except Exception:
        log.warning("node token lookup without cache: cache unavailable")
        shared, generation, cached = {}, None, False
    now = time.monotonic()
    hit = _token_cache.get(key)
    if cached and hit is not None and hit[0] > now and hit[1] == generation:
        return hit[2]
    if _miss_key(key) in shared:
        return None
    token = (
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
    accepting it at once (after commit)."""
    revoked = NodeAgentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    tokens_changed()
    return bool(revoked)
