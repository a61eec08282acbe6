"""API wiring: the JSON body parser and the exception handler that turns domain errors into
clear responses.

Every JSON body goes through ``BoundedJSONParser`` (size and depth bounded, strict JSON): a
refusal is a 400 naming why. Domain errors become 400 (or 404 / 409) with ``{field: [reason]}``;
anything unexpected is logged and answered with a generic 500 body (never a traceback in the
response)."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import DomainError
from core.jsonlimits import JsonRefused, loads_bounded

from .csrf import CSRF_REFUSED, HTTP_WITH_SECURE_COOKIES, HTTP_WITH_SECURE_COOKIES_FIX, http_cause

if TYPE_CHECKING:  # the handlers import django.http when called, as they always did
    from django.http import HttpRequest, HttpResponse


class BoundedJSONParser(BaseParser):
    """DRF's JSON parser, bounded: at most ``API_JSON_MAX_BYTES`` are read from the stream and
    the document may nest ``core.jsonlimits.MAX_DEPTH`` levels; anything else is a 400."""

    media_type = "application/json"

    def parse(
        self,
        stream: IO[Any] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = settings.API_JSON_MAX_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.decode(raw, encoding)
            return loads_bounded(text, max_bytes=limit)
        except JsonRefused as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response(exc.as_dict(), status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        return Response(detail, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get(
        "Accept", ""
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a generic answer, never a traceback (the error is logged by Django). JSON for
    the API, the plain error page for the portal."""
    from django.http import HttpResponseServerError, JsonResponse
    from django.views.defaults import server_error as page

    if _wants_json(request):
        return JsonResponse(
            {"detail": "internal error; it has been logged for the platform admins"}, status=500
        )
    response = page(request)
    return response if response.status_code == 500 else HttpResponseServerError()


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: JSON for the API (a route that does not exist, an id out of range)."""
    from django.http import JsonResponse
    from django.views.defaults import page_not_found as page

    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "not found"}, status=404)
    return page(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: our own refusals (``BadRequest``, e.g. a month out of range) say why; other
    suspicious requests get a generic answer."""
    from django.core.exceptions import BadRequest
    from django.http import JsonResponse
    from django.template.loader import render_to_string

    message = str(exception) if type(exception) is BadRequest else ""
    if _wants_json(request):
        return JsonResponse({"detail": message or "bad request"}, status=400)
    from django.http import HttpResponseBadRequest

    return HttpResponseBadRequest(render_to_string("400.html", {"message": message}))


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: the 403 stays and nothing the request asked for happens (Django calls
    this instead of the view). It says Django's reason in the portal's page, or as JSON for a
    client asking for it, and names the cause and fix when the cookie was missing because the
    request came over http while the cookies are HTTPS-only."""
    from django.http import JsonResponse
    from django.shortcuts import render

    over_http = http_cause(request, reason)
    cause = HTTP_WITH_SECURE_COOKIES.format(sent="form")
    if _wants_json(request):
        body = {"detail": CSRF_REFUSED, "reason": reason}
        if over_http:
            body["fix"] = f"{cause} {HTTP_WITH_SECURE_COOKIES_FIX}"
        return JsonResponse(body, status=403)
    context = {
        "reason": reason,
        "http_cause": cause if over_http else "",
        "http_fix": HTTP_WITH_SECURE_COOKIES_FIX if over_http else "",
    }
    return render(request, "403_csrf_failure.html", context, status=403)
