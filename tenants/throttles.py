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

from .models import Team, hash_token
from .permissions import can_submit_to

log = logging.getLogger(__name__)


def _rate(scope: str) -> str | None:
    rates = getattr(settings, "REST_FRAMEWORK", {}).get("DEFAULT_THROTTLE_RATES") or {}
    return rates.get(scope) or None


class _SettingsRateThrottle(SimpleRateThrottle):
    def __init__(self):
        # DRF reads the rate in __init__ from a class attribute frozen at import; read it now.
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)

    def get_rate(self):
        return _rate(self.scope)

    def allow_request(self, request, view):
        # Fail open: with the cache (Redis) down, a rate limit must not turn every submission
        # into a 500; the platform keeps accepting work and the limit resumes with the cache.
        try:
            return super().allow_request(request, view)
        except Exception:
            log.warning("rate limit %s skipped: cache unavailable", self.scope)
            return True


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
        team = Team.objects.filter(slug=slug).first()
        if team is None or not can_submit_to(request.user, team):
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
