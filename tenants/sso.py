"""Django glue of sign-in: the password backend that honours ``LOCAL_LOGIN_ENABLED``, the OpenID
Connect backend (mozilla-django-oidc: authorization code flow with PKCE and nonce, ID token
signature checked against the provider's JWKS), the views that 404 while single sign-on is not
configured, RP-initiated logout, and the login page's options.

What a login does to the user and their teams is in ``tenants.identity``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from functools import cached_property
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, User
from django.contrib.sessions.backends.base import SessionBase
from django.core.cache import cache
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.urls import reverse
from django.utils.encoding import smart_str
from django.utils.module_loading import import_string
from django.views import View

# mozilla-django-oidc ships no type information (pyproject.toml): its classes are Any to mypy, so
# the four subclassing them below say so with `type: ignore[misc]`; their own methods are typed.
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.middleware import SessionRefresh as _SessionRefresh
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView
from requests.auth import HTTPBasicAuth

from .identity import SsoRefused, sso_login
from .provider_http import provider_request

log = logging.getLogger(__name__)


class LocalPasswordBackend(ModelBackend):
    """Django's password check, limited to platform admins (break-glass) while local password
    login is turned off. Applies everywhere a password is accepted: the login page, the
    break-glass page, the admin site and the API's token exchange."""

    def user_can_authenticate(self, user: User | AnonymousUser | None) -> bool:
        if not super().user_can_authenticate(user):
            return False
        # Django asks only of a user it holds; the stubs allow None, which is nobody's admin.
        return settings.LOCAL_LOGIN_ENABLED or bool(user is not None and user.is_superuser)


class SsoBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # untyped library
    """Verified claims (ID token merged with userinfo: some providers put groups only in the
    token) become a user and memberships through ``tenants.identity.sso_login``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Django builds the backend anew for each login; one failed cache call marks the cache
        # down for the rest of it.
        self._jwks_cache_down = False

    def verify_token(self, token: str | bytes, **kwargs: Any) -> dict[str, Any]:
        """The library's signature and nonce checks, and the issuer and audience it leaves out (it
        decodes with ``verify_aud`` off): an ID token the provider issued to another of its
        clients, or for another organisation signed with the same keys, must not sign anyone in
        here (OpenID Connect Core 3.1.3.7).

        A signature that fails against a cached key is checked once more against a freshly
        fetched JWKS: a provider may replace a key and keep its key id, and a cached key must
        not refuse every login until the cache expires."""
        self._jwk_cached = False
        payload: dict[str, Any]
        try:
            payload = super().verify_token(token, **kwargs)
        except SuspiciousOperation:
            if not self._jwk_cached:
                raise
            self._jwks_cache_call("delete", self._jwks_cache_key())
            self._jwk_cached = False
            payload = super().verify_token(token, **kwargs)
        issuer = settings.OIDC_OP_ISSUER
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation("the ID token's issuer is not the configured provider")
        client_id = settings.OIDC_RP_CLIENT_ID
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if client_id not in audiences:
            raise SuspiciousOperation("the ID token's audience is not this client")
        if len(audiences) > 1 and payload.get("azp") != client_id:
            raise SuspiciousOperation("the ID token's authorized party is not this client")
        return payload

    # The provider's calls: the library's, each answered in full within OIDC_TIMEOUT
    # (tenants.provider_http), and the JWKS cached.

    def _call(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        return provider_request(
            method,
            url,
            timeout=settings.OIDC_TIMEOUT,
            verify=self.get_settings("OIDC_VERIFY_SSL", True),
            proxies=self.get_settings("OIDC_PROXY", None),
            **kwargs,
        )

    def get_token(self, payload: dict[str, Any]) -> Any:
        auth_ = None
        if self.get_settings("OIDC_TOKEN_USE_BASIC_AUTH", False):  # the library's option
            payload = dict(payload)
            secret = payload.pop("client_secret", "")
            auth_ = HTTPBasicAuth(str(payload.get("client_id", "")), str(secret))
        response = self._call("POST", self.OIDC_OP_TOKEN_ENDPOINT, data=payload, auth=auth_)
        self.raise_token_response_error(response)
        return response.json()

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        response = self._call(
            "GET", self.OIDC_OP_USER_ENDPOINT, headers={"Authorization": f"Bearer {access_token}"}
        )
        response.raise_for_status()
        if response.headers.get("content-type", "").lower().startswith("application/jwt"):
            return self.verify_token(response.text)
        return response.json()

    def retrieve_matching_jwk(self, token: str | bytes) -> jwt.PyJWK:
        """The signing key for ``token`` from the provider's JWKS, cached for
        ``OIDC_JWKS_CACHE_SECONDS``: a login fetched it each time, so each login made one more
        call that could hang or fail. A token signed with a key id the cached set lacks (the
        provider rotated its keys) fetches it once more before failing. Only a set that gave a
        usable key is cached, so a garbage answer is not kept.

        The cache only saves calls to the provider: with the cache down (Redis unreachable or
        answering errors) the JWKS is fetched from the provider, as without a cache, and the
        login goes on (a warning is logged). It raised the cache client's error, a 500 for
        every login while Redis was down."""
        cache_key = self._jwks_cache_key()
        header = jwt.get_unverified_header(token)
        jwks = self._jwks_cache_call("get", cache_key)
        jwk = _matching_jwk(jwks, header) if jwks is not None else None
        if jwk is None:
            response = self._call("GET", self.OIDC_OP_JWKS_ENDPOINT)
            response.raise_for_status()
            jwks = response.json()
            jwk = _matching_jwk(jwks, header)
            if jwk is None:
                raise SuspiciousOperation("Could not find a valid JWKS.")
            key = jwt.PyJWK(jwk)
            self._jwks_cache_call("set", cache_key, jwks, settings.OIDC_JWKS_CACHE_SECONDS)
            return key
        self._jwk_cached = True
        return jwt.PyJWK(jwk)

    def _jwks_cache_key(self) -> str:
        return "sso:jwks:" + hashlib.sha256(self.OIDC_OP_JWKS_ENDPOINT.encode()).hexdigest()

    def _jwks_cache_call(self, operation: str, *args: Any) -> Any:
        """``cache.<operation>(*args)``, or None with a warning when the cache fails. After one
        failure the rest of this login leaves the cache alone: a Redis that does not answer
        costs its socket timeout on each call, and the login would pay it for each."""
        if self._jwks_cache_down:
            return None
        try:
            return getattr(cache, operation)(*args)
        except Exception as exc:  # the client's errors differ by backend; all mean "no cache"
            self._jwks_cache_down = True
            log.warning(
                "single sign-on: JWKS cache unavailable (%s: %s), using the provider's JWKS "
                "without it",
                type(exc).__name__,
                str(exc)[:200],
            )
            return None

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> User | None:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict):
            # the provider's answer, not the user's fault: a refused login, not a 500
            log.warning("single sign-on refused: the userinfo answer is not a JSON object")
            return None
        if userinfo.get("sub") not in (None, payload.get("sub")):
            log.warning("single sign-on refused: userinfo subject differs from the ID token's")
            return None
        claims = {**payload, **userinfo}
        try:
            return sso_login(
                claims=claims,
                issuer=str(payload.get("iss", "")),
                groups_claim=settings.OIDC_GROUPS_CLAIM,
                username_claim=settings.OIDC_USERNAME_CLAIM,
            )
        except SsoRefused as exc:
            log.warning("single sign-on refused: %s", exc)
            return None

    def get_user(self, user_id: Any) -> User | None:
        """The session's user, unless deactivated (Django's ModelBackend rule; the library's
        own returned a deactivated user, whose open sessions then kept using the portal)."""
        user: User | None = super().get_user(user_id)
        return user if user is not None and user.is_active else None


def _matching_jwk(jwks: Any, header: dict[str, Any]) -> dict[str, Any] | None:
    """The library's match: the key with the token's key id and, where the key names one, its
    algorithm (the last such key)."""
    match = None
    for jwk in jwks["keys"]:
        if jwk["kid"] != smart_str(header["kid"]):
            continue
        if "alg" in jwk and jwk["alg"] != smart_str(header["alg"]):
            continue
        match = jwk
    return match


class _OnlyWhenConfigured(View):
    # A View, as every class it is mixed into is (their order of resolution is unchanged), so
    # that mypy knows the dispatch it calls.
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.SSO_ENABLED:
            raise Http404("single sign-on is not configured")
        return super().dispatch(request, *args, **kwargs)


class SsoStartView(_OnlyWhenConfigured, OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Redirects to the provider (state, nonce and a PKCE S256 challenge kept in the session)."""


# What a provider that is down, slow or answering garbage makes the code exchange raise: no
# answer, an HTTP error, a timeout (``OIDC_TIMEOUT``), a body that is not JSON
# (requests.RequestException); JSON of the wrong shape (a list for the token answer, no "keys" in
# the JWKS); an ID token that is no JWT, expired or signed with a key that is not a usable JWK.
PROVIDER_FAILURES = (
    requests.RequestException,
    jwt.PyJWTError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
)


class SsoCallbackView(_OnlyWhenConfigured, OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """The provider's redirect back: exchanges the code (with the PKCE verifier) and signs in.

    A login that does not complete ends any session the browser had (a re-check of a signed-in
    user that the provider refuses, or cannot make, must not leave the user signed in: the next
    page load would go round to the provider again) and lands on the login page saying why:
    ``?sso=failed`` when the provider's answer was refused, ``?sso=unavailable`` when the
    provider could not be reached or answered something unusable (a 500 before)."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            response: HttpResponseBase = super().get(request)
            return response
        except SuspiciousOperation as exc:  # bad state, signature, nonce, audience, issuer
            log.warning("single sign-on refused: %s", exc)
            return self._fail(settings.LOGIN_REDIRECT_URL_FAILURE)
        except PROVIDER_FAILURES as exc:
            log.warning(
                "single sign-on failed: the provider's answer was unusable: %s: %s",
                type(exc).__name__,
                str(exc)[:500],
            )
            return self._fail(settings.SSO_UNAVAILABLE_URL)

    def login_failure(self) -> HttpResponseRedirect:
        return self._fail(self.failure_url)

    def _fail(self, url: str) -> HttpResponseRedirect:
        if self.request.user.is_authenticated:
            auth.logout(self.request)
        return HttpResponseRedirect(url)


class SessionRefresh(_SessionRefresh):  # type: ignore[misc]  # untyped library
    """The library's silent re-check of single sign-on sessions (``prompt=none`` once the last
    check is older than ``OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS``; each re-check is a login, so
    group rules are applied again), with our routes exempt: the sign-in views, logout, and what
    cannot follow a redirect to the provider (``SSO_REFRESH_EXEMPT_PATTERNS``, matched at the
    start of the path).

    The library re-checks GET page loads only, and lets every other request of a session due
    for its check through: a user removed from the directory kept submitting and cancelling
    jobs through the API and the portal's forms with their session cookie until it expired
    (two weeks). Here a due session's form POST goes to the provider as a page load does (back
    on the page by GET once renewed), and its requests to the exempt paths (API, JSON state
    reads) are anonymous until a page load has renewed it: the API answers 401, the state
    reads send to the login page, and the portal's sockets (4440) load the page again, which
    makes the check. API tokens are not sessions and are not affected."""

    def is_refreshable_url(self, request: HttpRequest) -> bool:
        """The library's rule without its GET-only condition: any method of a signed-in single
        sign-on session, except the exempt routes."""
        return (
            request.user.is_authenticated
            and _is_sso_session(request.session)
            and not self._exempt(request.path)
        )

    def process_request(self, request: HttpRequest) -> HttpResponseBase | None:
        if (
            request.path not in self.exempt_urls
            and self._exempt(request.path)
            and sso_recheck_due(request.session)
        ):
            request.user = AnonymousUser()
            return None
        response: HttpResponseBase | None = super().process_request(request)
        return response

    def _exempt(self, path: str) -> bool:
        return path in self.exempt_urls or any(p.match(path) for p in self.exempt_url_patterns)

    @cached_property
    def exempt_urls(self) -> set[str]:
        return {
            reverse("oidc_authentication_init"),
            reverse("oidc_authentication_callback"),
            reverse("logout"),
        }

    @cached_property
    def exempt_url_patterns(self) -> set[re.Pattern[str]]:
        return {re.compile(p) for p in settings.SSO_REFRESH_EXEMPT_PATTERNS}


def sso_recheck_due(session: SessionBase) -> bool:
    """Is ``session`` a single sign-on session whose ID token expiry (``oidc_id_token_expiration``,
    now + ``OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS`` at each login) has passed? The library's rule
    for :class:`SessionRefresh` sending the next page load back to the provider. The websockets,
    which no middleware re-checks, close on it so that the browser comes back over HTTP
    (``frontend/consumers.py``). A password session never is."""
    if not _is_sso_session(session):
        return False
    expiration_s: float = session.get("oidc_id_token_expiration", 0)
    return expiration_s <= time.time()


def _is_sso_session(session: SessionBase) -> bool:
    backend = session.get(BACKEND_SESSION_KEY)
    if not backend:
        return False
    return issubclass(import_string(backend), OIDCAuthenticationBackend)


def provider_logout_url(request: HttpRequest) -> str:
    """Where logout sends the browser: the provider's end-session endpoint (ending its session
    too) for a user who signed in with it, else the login page."""
    local = settings.LOGOUT_REDIRECT_URL
    id_token = request.session.get("oidc_id_token")
    if not (settings.SSO_ENABLED and settings.OIDC_OP_LOGOUT_ENDPOINT and id_token):
        return local
    query = urlencode(
        {
            "id_token_hint": id_token,
            "client_id": settings.OIDC_RP_CLIENT_ID,
            "post_logout_redirect_uri": request.build_absolute_uri(local),
        }
    )
    return f"{settings.OIDC_OP_LOGOUT_ENDPOINT}?{query}"


class LogoutView(auth_views.LogoutView):
    """Django's logout; for a single sign-on session it then goes on to the provider's logout."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        provider = provider_logout_url(request)
        response = super().post(request, *args, **kwargs)
        if provider != settings.LOGOUT_REDIRECT_URL:
            return HttpResponseRedirect(provider)
        return response


def login_options(request: HttpRequest) -> dict[str, Any]:
    """Template context: whether to show the single sign-on button and the password form."""
    return {
        "sso_enabled": settings.SSO_ENABLED,
        "sso_provider_name": settings.SSO_PROVIDER_NAME,
        "local_login_enabled": settings.LOCAL_LOGIN_ENABLED,
    }
