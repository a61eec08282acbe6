"""Rate limits, backed by Django's cache (Redis in production, so limits hold across workers):
job submissions per user and per team, and password attempts per client address (and username)
at both password doors, the portal's login form and the API's token exchange, which share one
budget so an attacker gains nothing by switching doors.

Rates come from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` under the scopes ``job_submit_user``,
``job_submit_team``, ``login`` and ``login_address`` and are read at request time (so tests and
operators can change them without a restart of the class). A missing or empty rate disables that
limit. An exceeded limit is a 429 with a ``Retry-After`` header.

The client address is :func:`client_address`: the peer's address, or the address a configured
proxy (``TRUSTED_PROXIES``) reports in ``X-Forwarded-For``; a forwarded header from anyone else
is ignored, so a client cannot pick the key its attempts are counted under.
"""

from __future__ import annotations

import ipaddress
import logging
from functools import cache

from django.conf import settings
from django.http import HttpRequest
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle
from rest_framework.views import APIView

from .models import SUBMIT_ROLES, hash_token
from .permissions import is_platform_admin, submission_target

log = logging.getLogger(__name__)


@cache
def _networks(
    entries: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries)


def _trusted(address: str) -> bool:
    networks = _networks(tuple(getattr(settings, "TRUSTED_PROXIES", ()) or ()))
    if not networks:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_address(request: HttpRequest) -> str:
    """The address of the client that sent ``request``.

    The peer's address (``REMOTE_ADDR``), unless the peer is one of ``TRUSTED_PROXIES``: then
    ``X-Forwarded-For`` is read from the right, skipping trusted proxies, and the first other
    address is the client's (each proxy appends the address it received from; only what our own
    proxies wrote can be believed). With no proxy configured the header is ignored."""
    meta = request.META
    remote = meta.get("REMOTE_ADDR", "") or ""
    if not _trusted(remote):
        return remote
    hops = [hop.strip() for hop in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    for hop in reversed([h for h in hops if h]):
        if _trusted(hop):
            continue
        try:
            return str(ipaddress.ip_address(hop))
        except ValueError:
            return remote  # garbage our proxy passed on: count it against the proxy
    return remote


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

    scope: str  # each throttle names its rate's scope

    def __init__(self) -> None:
        # DRF reads the rate in __init__ from a class attribute frozen at import; read it now.
        self.rate = self.get_rate()
        num_requests, duration = self.parse_rate(self.rate)
        # DRF's parse_rate answers (None, None) only when there is no rate, and a throttle without
        # one reads neither: allow_request lets everything through first, and the password doors
        # build only the throttles that have a rate.
        self.num_requests = num_requests or 0
        self.duration = duration or 0
        self._wait: float | None = None

    def get_rate(self) -> str | None:
        return _rate(self.scope)

    def allow_request(self, request: Request, view: APIView) -> bool:
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
        if self._full(key, now):
            return False
        self._count(key, now)
        return True

    def _full(self, key: str, now: float) -> bool:
        """Would one more request in the window pass the rate? (Then ``wait`` says how long.)"""
        window, into = divmod(now, self.duration)
        current_key, previous_key = f"{key}:{int(window)}", f"{key}:{int(window) - 1}"
        counts = self.cache.get_many([current_key, previous_key])
        current, previous = counts.get(current_key, 0), counts.get(previous_key, 0)
        overlap = 1.0 - into / self.duration
        if previous * overlap + current + 1 > self.num_requests:
            self._wait = self._seconds_until_allowed(current, previous, into)
            return True
        return False

    def _count(self, key: str, now: float) -> None:
        current_key = f"{key}:{int(now // self.duration)}"
        try:
            self.cache.incr(current_key)
        except ValueError:  # first request of the window (a racing one may have added it)
            if not self.cache.add(current_key, 1, timeout=int(2 * self.duration) + 1):
                self.cache.incr(current_key)

    def _seconds_until_allowed(self, current: int, previous: int, into: float) -> float:
        left_in_window = self.duration - into
        room = self.num_requests - current - 1
        if room < 0 or previous == 0:
            return left_in_window
        # previous * (1 - (into + t) / duration) <= room  =>  t >= duration * (1 - room / previous)
        return max(1.0, min(left_in_window, self.duration * (1 - room / previous) - into))

    def wait(self) -> float | None:
        return self._wait

    def get_ident(self, request: HttpRequest) -> str:
        return client_address(request)


class JobSubmitUserThrottle(_SettingsRateThrottle):
    """Submissions per signed-in user."""

    scope = "job_submit_user"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not request.user.is_authenticated:
            return None  # anonymous requests are refused by authentication anyway
        return f"throttle_{self.scope}_{request.user.pk}"


class JobSubmitTeamThrottle(_SettingsRateThrottle):
    """Submissions per team named in the body. Only submissions the caller may make to that team
    count, so nobody can exhaust another team's budget by naming it."""

    scope = "job_submit_team"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not request.user.is_authenticated:
            return None
        try:
            data = request.data
        except APIException:  # an unparsable body: the same 400 the view would answer
            raise
        except Exception:  # a body that cannot be read is the view's 400, not ours
            return None
        # A body that is not an object (a JSON list, string or number) is the view's 400 too.
        slug = data.get("team") if isinstance(data, dict) else None
        if not isinstance(slug, str) or not slug:
            return None
        team, role = submission_target(request.user, slug)
        # The view validates the same team next; it reuses this answer instead of asking again.
        # An attribute of our own on the request, read by the view with getattr: DRF's stubs
        # declare none.
        request.submission_target = (slug, team, role)  # type: ignore[attr-defined]
        if team is None or not (is_platform_admin(request.user) or role in SUBMIT_ROLES):
            return None
        return f"throttle_{self.scope}_{team.pk}"


def _username(request: HttpRequest) -> str:
    """The username a password attempt names (a DRF request's body or a portal form)."""
    data = getattr(request, "data", None)
    if data is None:
        data = request.POST
    try:
        username = data.get("username")
    except APIException:  # an unparsable body: the same 400 the view would answer
        raise
    except Exception:  # a body that is not an object is the view's 400
        username = None
    return username.strip().lower() if isinstance(username, str) else ""


class _PasswordThrottle(_SettingsRateThrottle):
    """A limit on password attempts. Asked outside any DRF view (no view), with the request of
    either door: the portal's Django request or the API's DRF one."""

    def get_cache_key(self, request: HttpRequest, view: APIView | None = None) -> str:
        raise NotImplementedError


class PasswordAttemptThrottle(_PasswordThrottle):
    """Failed password attempts per client address and username, at either door: slows down
    guessing one user's password without letting one address lock everybody out."""

    scope = "login"

    def get_cache_key(self, request: HttpRequest, view: APIView | None = None) -> str:
        digest = hash_token(_username(request))[:16]
        return f"throttle_{self.scope}_{self.get_ident(request)}_{digest}"


class PasswordAddressThrottle(_PasswordThrottle):
    """Failed password attempts per client address, whatever the username (spraying)."""

    scope = "login_address"

    def get_cache_key(self, request: HttpRequest, view: APIView | None = None) -> str:
        return f"throttle_{self.scope}_{self.get_ident(request)}"


def _password_throttles() -> list[_PasswordThrottle]:
    return [cls() for cls in (PasswordAttemptThrottle, PasswordAddressThrottle) if _rate(cls.scope)]


def password_attempt_refused(request: HttpRequest) -> float | None:
    """Seconds the client must wait before its next password attempt, or None when it may try.
    Only failed attempts count (:func:`password_attempt_failed`): a user who signs in often is
    never held back, and a right password after too many wrong ones is refused like the rest.
    A cache outage lets attempts through (logged)."""
    waits = []
    for throttle in _password_throttles():
        try:
            if throttle._full(throttle.get_cache_key(request, None), throttle.timer()):
                waits.append(throttle.wait() or 1.0)
        except APIException:
            raise
        except Exception:
            log.warning("password limit %s skipped: cache unavailable", throttle.scope)
    return max(waits) if waits else None


def password_attempt_failed(request: HttpRequest) -> None:
    """Count one failed password attempt of ``request``'s client (and username)."""
    for throttle in _password_throttles():
        try:
            throttle._count(throttle.get_cache_key(request, None), throttle.timer())
        except Exception:
            log.warning("password limit %s not counted: cache unavailable", throttle.scope)


def job_submit_throttles() -> list[BaseThrottle]:
    """The throttles of the job create action (only those with a configured rate), as a view's
    ``get_throttles`` answers them."""
    return [cls() for cls in (JobSubmitUserThrottle, JobSubmitTeamThrottle) if _rate(cls.scope)]
