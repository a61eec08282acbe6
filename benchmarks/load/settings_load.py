"""Settings of the load-test target: the platform's own settings plus a bounded PostgreSQL
connection pool per process (Django 5.1+ ``OPTIONS["pool"]``, psycopg-pool).

Why: under ASGI Django runs each request's sync code in its own thread, and a persistent
connection (``CONN_MAX_AGE`` > 0) is kept per thread, so concurrent requests leak connections
until PostgreSQL refuses new clients ("too many clients already"). A pool caps connections at
``DATABASE_POOL_MAX_SIZE`` per process; a request waits (up to ``DATABASE_POOL_TIMEOUT`` s) for a
free connection instead of failing. These are the lines proposed for gpuplatform/settings.py.
"""

from gpuplatform.settings import *  # noqa: F403
from gpuplatform.settings import DATABASES, env

_POOL_MAX = env.int("DATABASE_POOL_MAX_SIZE", default=0)
if _POOL_MAX > 0 and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps the connections, not the thread
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=2),
        "max_size": _POOL_MAX,
        "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
    }

# Experiment knob for the websocket benchmark: channels_redis keeps at most `capacity` messages
# per consumer channel (default 100) and drops the rest; a burst of per-job messages to a team of
# 1,000 listeners overflows it. 0 = the platform's default.
_CAPACITY = env.int("CHANNEL_LAYER_CAPACITY", default=0)
if _CAPACITY and REDIS_URL:  # noqa: F405
    CHANNEL_LAYERS["default"]["CONFIG"]["capacity"] = _CAPACITY  # noqa: F405
