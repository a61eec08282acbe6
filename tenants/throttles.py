"""Rate limits on job submission, per user and per team, backed by Django's cache (Redis in
production, so limits hold across workers).

Rates come from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` under the scopes ``job_submit_user``
and ``job_submit_team`` and are read at request time (so tests and operators can change them
without a restart of the class). A missing or empty rate disables that limit. An exceeded limit is
a 429 with a ``Retry-After`` header (DRF's ``Throttled`` through the API's exception handler).
"""

from __future__ import annotations

import logging

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from .models import SUBMIT_ROLES, hash_token
from .permissions import is_platform_admin, submission_target

log = logging.getLogger(__name__)


def _rate(scope: str) -> str | None:
    rates = getattr(settings, "REST_FRAMEWORK", {}).get("DEFAULT_THROTTLE_RATES") or {}
    return rates.get(scope) or None


class _SettingsRateThrottle(SimpleRateThrottle):
    """A sliding-window rate limit kept as two counters per client in the cache.

    DRF's SimpleRateThrottle stores every request time of the window in one cache entry that each
    request reads and rewrites: at 500 submissions/s over a minute, a 30,000-entry list per request.
    Here a request costs one read of two integers and one atomic increment. The count over the last
    ``duration`` seconds is estimated as this window's count plus the previous window's weighted
    by how much of it still overlaps (exact when requests were spread evenly; never lets through
    more than the limit plus the requests racing at the same instant). Refused requests do not
    count, as with DRF's throttle.
    """

    def __init__(self):
        # DRF reads the rate in __init__ from a class attribute frozen at import; read it now.
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self._wait = None

    def get_rate(self):
        return _rate(self.scope)

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        # Fail open: with the cache (Redis) down, a rate limit must not turn every submission
        # into a 500; the platform keeps accepting work and the limit resumes with the cache.
        try:
            return self._count_if_allowed(key, self.timer())
        except Exception:
            log.warning("rate limit %s skipped: cache unavailable", self.scope)
            return True

    def _count_if_allowed(self, key: str, now: float) -> bool:
        window, into = divmod(now, self.duration)
        current_key, previous_key = f"{key}:{int(window)}", f"{key}:{int(window) - 1}"
        counts = self.cache.get_many([current_key, previous_key])
        current, previous = counts.get(current_key, 0), counts.get(previous_key, 0)
        overlap = 1.0 - into / self.duration
        if previous * overlap + current + 1 > self.num_requests:
            self._wait = self._seconds_until_allowed(current, previous, into)
            return False
        try:
            self.cache.incr(current_key)
        except ValueError:  # first request of the window (a racing one may have added it)
            if not self.cache.add(current_key, 1, timeout=int(2 * self.duration) + 1):
                self.cache.incr(current_key)
        return True

    def _seconds_until_allowed(self, current: int, previous: int, into: float) -> float:
        left_in_window = self.duration - into
        room = self.num_requests - current - 1
        if room < 0 or previous == 0:
            return left_in_window
        # previous * (1 - (into + t) / duration) <= room  =>  t >= duration * (1 - room / previous)
        return max(1.0, min(left_in_window, self.duration * (1 - room / previous) - into))

    def wait(self):
        return self._wait


class JobSubmitUserThrottle(_SettingsRateThrottle):
    """Submissions per signed-in user."""

    scope = "job_submit_user"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None  # anonymous requests are refused by authentication anyway
        return f"throttle_{self.scope}_{request.user.pk}"


class JobSubmitTeamThrottle(_SettingsRateThrottle):
    """Submissions per team named in the body. Only submissions the caller may make to that team
    count, so nobody can exhaust another team's budget by naming it."""

    scope = "job_submit_team"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None
        try:
            slug = request.data.get("team")
        except Exception:  # an unparsable body is the view's 400, not ours
            return None
        if not isinstance(slug, str) or not slug:
            return None
        team, role = submission_target(request.user, slug)
        # The view validates the same team next; it reuses this answer instead of asking again.
        request.submission_target = (slug, team, role)
        if team is None or not (is_platform_admin(request.user) or role in SUBMIT_ROLES):
            return None
        return f"throttle_{self.scope}_{team.pk}"


class TokenExchangeThrottle(_SettingsRateThrottle):
    """Password-for-token exchanges per client address and username: slows down guessing a
    user's password without letting one address lock everybody out."""

    scope = "token_exchange"

    def get_cache_key(self, request, view):
        try:
            username = request.data.get("username")
        except Exception:  # an unparsable body is the view's 400
            username = None
        if not isinstance(username, str):
            username = ""
        return f"throttle_{self.scope}_{self.get_ident(request)}_{hash_token(username)[:16]}"


def token_exchange_throttles() -> list[SimpleRateThrottle]:
    return [TokenExchangeThrottle()] if _rate(TokenExchangeThrottle.scope) else []


def job_submit_throttles() -> list[SimpleRateThrottle]:
    """The throttles of the job create action (only those with a configured rate)."""
    return [cls() for cls in (JobSubmitUserThrottle, JobSubmitTeamThrottle) if _rate(cls.scope)]
