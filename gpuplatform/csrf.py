"""CSRF refusals that say why: the words the portal's failure page (``gpuplatform.api.
csrf_failure``) and the API's session authentication share.

Django's reason is kept as it is; over plain http with HTTPS-only cookies (a browser keeps no
Secure cookie there, localhost aside) the missing cookie has a cause an admin can fix, named
with the fix. Nothing here relaxes a check: the API's ``SessionAuthentication`` runs DRF's own
(the CSRF middleware's), and only words its refusal.

This module imports no ``rest_framework.views``: DRF imports the authentication classes named in
its settings while defining ``APIView``, so a module it imports that way must not import back.
"""

from __future__ import annotations

from typing import cast

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import REASON_CSRF_TOKEN_MISSING, REASON_NO_CSRF_COOKIE
from rest_framework import exceptions
from rest_framework.authentication import CSRFCheck
from rest_framework.authentication import SessionAuthentication as DrfSessionAuthentication
from rest_framework.request import Request

CSRF_REFUSED = "CSRF verification failed; the request was refused"
# Where the cookies went: over plain http a browser keeps no Secure cookie (localhost aside),
# so with DJANGO_SECURE_COOKIES on every form posted over http arrives without its CSRF cookie.
# {sent}: what came without it (the form, the request).
HTTP_WITH_SECURE_COOKIES = (
    "The portal was reached over plain http, but its cookies are HTTPS-only "
    "(DJANGO_SECURE_COOKIES is on, the production default), so the browser did not send the "
    "CSRF cookie back with the {sent}."
)
HTTP_WITH_SECURE_COOKIES_FIX = (
    'Serve the portal over https (docs/deploy.md, "TLS and host names"), or, for a trial '
    'without TLS, set DJANGO_SECURE_COOKIES=false (docs/deploy.md, "First start").'
)
# A session's API write without the token: where it goes, and what scripts use instead.
API_TOKEN_MISSING_FIX = (
    "A write with the portal's session sends the csrftoken cookie's value in the X-CSRFToken "
    "header; scripts and other clients use an API token (Authorization: Bearer <token>, "
    "docs/tenancy.md) and need no CSRF token."
)


def http_cause(request: HttpRequest | Request, reason: str) -> bool:
    """Whether the CSRF cookie was missing because the request came over plain http while the
    cookies are HTTPS-only. Only the missing cookie: a form whose token is wrong or missing over
    http (a browser on localhost keeps Secure cookies) has another cause, and the hint would
    mislead."""
    return (
        reason == REASON_NO_CSRF_COOKIE
        and not request.is_secure()
        and bool(settings.CSRF_COOKIE_SECURE)
    )


class SessionAuthentication(DrfSessionAuthentication):
    """DRF's session authentication, its CSRF check unchanged, refusing as the portal does: a
    403 in the API's error shape (``{"detail": ...}``) with Django's reason and, as
    ``csrf_failure`` says them, the cause and fix over plain http with HTTPS-only cookies (DRF
    said only "CSRF Failed: <reason>"); a missing token also says where it goes."""

    def enforce_csrf(self, request: Request) -> None:
        def no_view(request: HttpRequest) -> HttpResponse:  # the check never calls it
            return HttpResponse()

        # What DRF's own enforce_csrf does: the middleware's checks, on the request DRF wraps.
        # DRF's CSRFCheck returns the reason where the middleware returns a 403 (its _reject):
        # the stubs know only the middleware's answer.
        check = CSRFCheck(no_view)
        check.process_request(request)
        reason = cast("str | None", check.process_view(request, no_view, (), {}))
        if not reason:
            return
        detail = f"{CSRF_REFUSED}: {reason}"
        if http_cause(request, reason):
            cause = HTTP_WITH_SECURE_COOKIES.format(sent="request")
            detail = f"{detail} {cause} {HTTP_WITH_SECURE_COOKIES_FIX}"
        elif reason == REASON_CSRF_TOKEN_MISSING:
            detail = f"{detail} {API_TOKEN_MISSING_FIX}"
        raise exceptions.PermissionDenied(detail)
