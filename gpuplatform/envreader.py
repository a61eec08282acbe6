"""The environment reader of the settings: a value that is not what its setting takes stops the
start with ``ImproperlyConfigured`` naming the variable (one line and exit 2, through
``gpuplatform.startup``).

django-environ's own casts were either a traceback or a silent guess:
- ``OIDC_TIMEOUT_SECONDS=abc`` was a ``ValueError`` traceback, and a ``DATABASE_URL`` of an
  unknown scheme a ``KeyError: 'ENGINE'``;
- a float kept only its digits, so ``SCHEDULER_CYCLE_SECONDS=1O`` (a letter O) was 1 second and
  ``nan`` a traceback about ``''``;
- a boolean was true for six words and false for everything else, so
  ``DJANGO_SECURE_COOKIES=flase`` (or ``disabled``) quietly turned HTTPS-only cookies off.

Every number the platform reads from the environment is a size, a count, a duration or a rate,
so a negative one is refused too.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, TypeVar
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

Number = TypeVar("Number", int, float)
_T = TypeVar("_T")

# The platform relies on PostgreSQL (advisory locks, concurrent index builds); SQLite is the demo.
SUPPORTED_DATABASE_ENGINES = frozenset(
    {"django.db.backends.postgresql", "django.db.backends.sqlite3"}
)
TRUE_WORDS = frozenset({"true", "on", "yes", "y", "1"})
FALSE_WORDS = frozenset({"false", "off", "no", "n", "0"})


# django-environ has no types (pyproject's mypy overrides): its Env is Any to mypy.
class SettingsEnv(environ.Env):  # type: ignore[misc]  # untyped library
    """``environ.Env`` whose ``bool``, ``int``, ``float``, ``db`` and ``email_url`` refuse what
    they cannot read exactly."""

    def _raw(self, var: str) -> str | None:
        value = self.ENVIRON.get(var)
        return None if value is None else value.strip()

    def _default(self, var: str, default: _T) -> _T:
        # Empty is unset: compose files pass `X: ${X:-}` through.
        if default is self.NOTSET:
            raise ImproperlyConfigured(f"Set the {var} environment variable")
        return default

    def bool(self, var: str, default: bool = environ.Env.NOTSET) -> bool:
        raw = self._raw(var)
        if not raw:
            return self._default(var, default)
        word = raw.lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ImproperlyConfigured(
            f"{var}: {raw!r} is neither true nor false (true, on, yes or 1; false, off, no or 0)"
        )

    def int(self, var: str, default: int = environ.Env.NOTSET) -> int:
        raw = self._raw(var)
        if not raw:
            return self._default(var, default)
        try:
            value = int(raw)
        except ValueError:
            raise ImproperlyConfigured(f"{var}: {raw!r} is not a whole number") from None
        return _not_negative(var, value)

    def float(self, var: str, default: float = environ.Env.NOTSET) -> float:
        raw = self._raw(var)
        if not raw:
            return self._default(var, default)
        try:
            value = float(raw)
        except ValueError:
            raise ImproperlyConfigured(f"{var}: {raw!r} is not a number") from None
        if not math.isfinite(value):
            raise ImproperlyConfigured(f"{var}: {raw!r} is not a finite number")
        return _not_negative(var, value)

    def db(self, var: str = environ.Env.DEFAULT_DATABASE_ENV, default: Any = environ.Env.NOTSET,
           engine: Any = None) -> dict[str, Any]:  # fmt: skip
        try:
            with warnings.catch_warnings():
                # Its "Engine not recognized" warning prints the parsed URL, password included.
                warnings.simplefilter("ignore")
                config = super().db(var, default=default, engine=engine)
        except (KeyError, ValueError):
            config = {}
        if config.get("ENGINE") not in SUPPORTED_DATABASE_ENGINES:
            raise ImproperlyConfigured(
                f"{var}: a URL of scheme {_scheme(self._raw(var))!r} is not a database this "
                "platform knows (postgres://user@host:5432/name, or sqlite:///path for a demo)"
            )
        return dict(config)

    def email_url(self, var: str = environ.Env.DEFAULT_EMAIL_ENV, default: Any = environ.Env.NOTSET,
                  backend: Any = None) -> dict[str, Any]:  # fmt: skip
        try:
            return dict(super().email_url(var, default=default, backend=backend))
        except (KeyError, ValueError, ImproperlyConfigured):
            raise ImproperlyConfigured(
                f"{var}: a URL of scheme {_scheme(self._raw(var))!r} is not a mail server "
                "(smtp://, smtp+tls://, smtp+ssl:// or consolemail://)"
            ) from None


def _not_negative(var: str, value: Number) -> Number:
    if value < 0:
        raise ImproperlyConfigured(f"{var}: must not be negative, not {value}")
    return value


def _scheme(url: str | None) -> str:
    """The scheme of ``url`` alone: the rest may hold a password, which a start-up message
    printed to a terminal or a container log must not."""
    if not url or "://" not in url:
        return ""
    return urlsplit(url).scheme
