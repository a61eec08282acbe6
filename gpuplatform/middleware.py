"""Request guards and response headers that apply to every view (wiring, no domain logic)."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.http.multipartparser import MultiPartParserError

GetResponse: TypeAlias = Callable[[HttpRequest], HttpResponse]
# An ASGI application's call, as Channels passes it on.
Scope: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[dict[str, Any]]]
Send: TypeAlias = Callable[[dict[str, Any]], Awaitable[None]]
AsgiApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


def content_security_policy(overrides: dict[str, str] | None = None) -> str:
    """The ``Content-Security-Policy`` header value: ``settings.CONTENT_SECURITY_POLICY`` with
    ``overrides`` (directive -> sources) applied."""
    from django.conf import settings

    directives = {**settings.CONTENT_SECURITY_POLICY, **(overrides or {})}
    return "; ".join(f"{name} {value}".strip() for name, value in directives.items())


class SecurityHeadersMiddleware:
    """Sends the Content-Security-Policy on every response that has none of its own (a view
    that needs a wider one, such as the API's documentation pages, sets it with
    ``content_security_policy(overrides)``).

    The portal loads scripts, styles, fonts and images from its own origin only, with no inline
    script or style and no eval; violations are reported to ``/csp-report/`` (logged). HSTS,
    nosniff, the referrer policy and X-Frame-Options come from Django's SecurityMiddleware and
    clickjacking middleware (settings)."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.header = content_security_policy()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from django.conf import settings

        response = self.get_response(request)
        # With DEBUG on, error responses are Django's technical pages, styled inline; the demo
        # and the browser tests read them. With DEBUG off every error page is ours.
        debug_page = settings.DEBUG and response.status_code >= 400
        if "Content-Security-Policy" not in response and not debug_page:
            response["Content-Security-Policy"] = self.header
        return response


class RejectNulBytesMiddleware:
    """Answer 400 to a URL path, query string or form field containing a NUL byte.

    PostgreSQL text cannot hold NUL, so such a value reaching a filter or a form would end as a
    500 (DataError); refusing it up front names the field instead. The path too: a route's
    ``<str:...>`` part (a username to remove from a team) reaches a query as it is.
    """

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path_info:
            return JsonResponse({"path": ["must not contain NUL (0x00) characters"]}, status=400)
        sources: list[QueryDict] = [request.GET]
        form = _form_fields(request)
        if form is not None:
            sources.append(form)
        for source in sources:
            for key, values in source.lists():
                if "\x00" in key or any("\x00" in value for value in values):
                    return JsonResponse(
                        {key.replace("\x00", "\\0"): ["must not contain NUL (0x00) characters"]},
                        status=400,
                    )
        return self.get_response(request)


def _form_fields(request: HttpRequest) -> QueryDict | None:
    """The fields of a form-encoded body (None for any other body). Django parses one only for
    POST; the API's PUT and PATCH take forms too, and their fields reach queries just the same."""
    content_type = request.META.get("CONTENT_TYPE", "")
    urlencoded = content_type.startswith("application/x-www-form-urlencoded")
    multipart = content_type.startswith("multipart/form-data")
    if not (urlencoded or multipart):
        return None
    if request.method == "POST":
        return request.POST
    if request.method not in ("PUT", "PATCH"):
        return None
    if urlencoded:
        return QueryDict(request.body, encoding=request.encoding)
    try:
        fields, _files = request.parse_file_upload(request.META, io.BytesIO(request.body))
    except MultiPartParserError:
        return None  # the view's parser refuses it with a 400
    return fields


class SameOriginWebsocketValidator:
    """ASGI middleware: a websocket handshake is accepted only from the portal's own origin
    (scheme, host and port, the comparison Django's CSRF check makes for forms) or from one of
    ``CSRF_TRUSTED_ORIGINS``; its Host must be one of ``ALLOWED_HOSTS``. Anything else is
    refused before the consumer runs. (Channels' AllowedHostsOriginValidator compares the host
    name only, so another port or plain http on the same host passed.)"""

    def __init__(self, app: AsgiApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and not _same_origin(scope):
            from channels.security.websocket import WebsocketDenier

            await WebsocketDenier()(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _same_origin(scope: Scope) -> bool:
    from django.conf import settings
    from django.http.request import split_domain_port, validate_host
    from django.utils.http import is_same_domain

    headers = {k.lower(): v for k, v in scope.get("headers", [])}
    origin = headers.get(b"origin", b"").decode("latin-1").strip().lower()
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    if not origin or not host:
        return False
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    if origin == f"{scheme}://{host}":
        return True
    # As Django's CSRF check: exact trusted origins, or "https://*.example.com" for subdomains.
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        trusted = trusted.lower()
        if origin == trusted:
            return True
        if "*" in trusted:
            t_scheme, _, t_host = trusted.partition("://")
            o_scheme, _, o_host = origin.partition("://")
            if t_scheme == o_scheme and is_same_domain(o_host, t_host.replace("*", "", 1)):
                return True
    return False
