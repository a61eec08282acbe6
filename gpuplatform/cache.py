"""Django's Redis cache with one connection pool per process instead of one per thread.

Django keeps a cache object per thread, and each builds its own Redis connection pool. Under
ASGI every request's synchronous code runs in a thread of its own, so every request opened (and
abandoned) a new TCP connection to Redis for its rate-limit counters: about a tenth of a job
submission's time was spent connecting (py-spy under load). redis-py's client and pool are
thread-safe, so the processes' cache objects share one client per configuration.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_lock = threading.Lock()
_clients: dict[tuple[tuple[str, ...], str], RedisCacheClient] = {}


class ProcessSharedRedisCache(RedisCache):
    # What RedisCache.__init__ sets from the CACHES entry; its stubs do not declare them.
    _servers: list[str]
    _options: dict[str, Any]
    _class: type[RedisCacheClient]

    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = self._class(self._servers, **self._options)
        return client
