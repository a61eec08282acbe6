"""A start whose configuration is wrong stops with one line and exit 2, not a traceback.

Settings refuse to load when something required is missing or malformed (``ImproperlyConfigured``
from ``gpuplatform/settings.py``: DJANGO_DEBUG off without DJANGO_SECRET_KEY, DATABASE_URL or
REDIS_URL, a TRUSTED_PROXIES entry that is no address, ...). That is the operator's usage error
and the message says all there is, so ``manage.py``, ``asgi.py``, ``wsgi.py`` and the container
entrypoint's check (``python -m gpuplatform.startup``) print it and exit 2. Every other exception
keeps its traceback, an ``ImproperlyConfigured`` raised once settings did load too (an app or
model misconfigured in code): there the traceback is what finds the bug.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

EXIT_CONFIGURATION_ERROR = 2  # a usage error, as for every command line of ours

T = TypeVar("T")


def exit_on_configuration_error(start: Callable[[], T]) -> T:
    """``start()``'s result; if settings could not load, their message on stderr and exit 2."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        return start()
    except ImproperlyConfigured as exc:
        if settings.configured:
            raise
        print(f"gpuplatform: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIGURATION_ERROR) from None


def check_settings() -> None:
    """Load the settings the way a server start does (DEBUG off unless set), exit 2 if they
    refuse. The container entrypoint runs this before uvicorn and Celery: uvicorn with several
    workers restarts a worker that cannot import the app for ever, so the container would never
    stop, and Celery prints a traceback."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    from django.conf import settings

    exit_on_configuration_error(lambda: settings.INSTALLED_APPS)


if __name__ == "__main__":
    check_settings()
