"""Cache reads and writes for values the database can always recompute.

For such a value the cache only saves work, so an outage of the cache (Redis in production) must
cost that work and a warning, never the request or the cycle that wanted the value."""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache

log = logging.getLogger(__name__)


def cached_or_none(key: str) -> Any:
    """The cached value of ``key``; None when it is not cached or the cache is unavailable."""
    try:
        return cache.get(key)
    except Exception:  # whatever the cache's client raises: the caller recomputes
        log.warning("cache unavailable: %s recomputed", key)
        return None


def cache_quietly(key: str, value: Any, timeout_s: float) -> None:
    """Cache ``value`` under ``key`` if the cache is available (else the next read recomputes)."""
    try:
        cache.set(key, value, timeout_s)
    except Exception:
        log.warning("cache unavailable: %s not kept", key)
