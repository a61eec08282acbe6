"""A small HTTP client for the gpuplatform REST API (v1), built on httpx.

Guarantees: every failure surfaces as one ``ApiError`` carrying the HTTP status (0 when the
server could not be reached) and the server's ``{field: [reason]}`` body flattened to
``field path → reasons``; the token travels only in the Authorization header and never appears
in an error message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import httpx

from . import __version__

DEFAULT_TIMEOUT = 30.0
# The "code" of the server's 401 for a single sign-on user's token whose provider confirmation
# is too old (tenants.authentication; gpuctl imports nothing of the platform).
SSO_SIGN_IN_REQUIRED = "sso_sign_in_required"


class ApiError(Exception):
    """The API refused or failed a request. ``fields`` maps a field path to reasons."""

    def __init__(self, status: int, message: str, fields: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = fields or {}


def flatten_errors(body: Any, prefix: str = "") -> dict[str, list[str]]:
    """``{"elastic": {"max_workers": ["x"]}}`` → ``{"elastic.max_workers": ["x"]}``.

    DRF answers nested serializers with nested dicts and list fields with lists; both become
    dotted / indexed paths. ``non_field_errors`` and ``detail`` keep their name."""
    out: dict[str, list[str]] = {}
    if isinstance(body, Mapping):
        for key, value in body.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten_errors(value, path))
    elif isinstance(body, list):
        if all(not isinstance(v, (Mapping, list)) for v in body):
            out[prefix or "non_field_errors"] = [str(v) for v in body]
        else:
            for i, value in enumerate(body):
                out.update(flatten_errors(value, f"{prefix}[{i}]"))
    elif body is not None:
        out[prefix or "non_field_errors"] = [str(body)]
    return out


class UnsendableError(ValueError):
    """A request body JSON cannot carry (NaN, infinity); ``field`` is its dotted path."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def encode_body(body: Any) -> bytes:
    """``body`` as JSON, or ``UnsendableError`` naming the first value JSON has no spelling for.

    YAML spells NaN and infinity (``.nan``, ``.inf``) and Python's float() reads 400-digit
    numbers as infinity; JSON has neither, so they are refused here, before anything is sent."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:  # iterative: a body nested deeper than the recursion limit still gets checked
        path, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise UnsendableError(path or "body", f"must be a finite number, not {value}")
        if isinstance(value, Mapping):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
    try:
        return json.dumps(body, allow_nan=False).encode("utf-8")
    except RecursionError:
        raise UnsendableError("body", "is nested too deeply to send") from None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Client:
    """One authenticated session against ``url``. Use as a context manager."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = DEFAULT_TIMEOUT):
        headers = {"Accept": "application/json", "User-Agent": f"gpuctl/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url
        self._http = httpx.Client(base_url=url, headers=headers, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._http.close()

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET with ``params`` as the query; ``UnsendableError`` (nothing sent) for a value that
        is not UTF-8 text."""
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        for key, value in clean.items():
            # Bytes of an argument that are not UTF-8 (`--team $'\xff'`) reach Python as lone
            # surrogates, which no URL can carry: encoding the query raised a traceback.
            if isinstance(value, str) and not _utf8(value):
                raise UnsendableError(key, "is not UTF-8 text")
        return self._request("GET", path, params=clean)

    def post(self, path: str, body: Any = None) -> Any:
        """POST ``body`` as JSON; ``UnsendableError`` (nothing sent) when JSON cannot carry it."""
        if body is None:
            return self._request("POST", path)
        return self._request(
            "POST", path, content=encode_body(body), headers={"Content-Type": "application/json"}
        )

    def get_all(
        self, path: str, params: Mapping[str, Any] | None = None, *, max_pages: int = 100
    ) -> list[Any]:
        """A list endpoint's items across pages (following ``next``), or its plain list."""
        data = self.get(path, params)
        if not (isinstance(data, Mapping) and "results" in data):
            return list(data) if isinstance(data, list) else [data]
        items = list(data["results"])
        pages = 1
        while data.get("next") and pages < max_pages:
            data = self._request("GET", data["next"])
            items.extend(data["results"])
            pages += 1
        return items

    def get_up_to(
        self, path: str, params: Mapping[str, Any] | None = None, *, limit: int
    ) -> tuple[list[Any], int]:
        """The first ``limit`` items of a paginated list endpoint and how many it holds in all.

        The server caps a page (1,000 items); the rest are read page by page by ``offset``, so
        ``limit`` is what the caller gets whatever the server's page size. ``offset`` rather than
        the answer's ``next``: behind a proxy that rewrites the host, ``next`` may name one this
        client cannot reach. An item added at the top between two reads moves the others down a
        place, so the next page repeats one already read: items are kept once by ``id``."""
        items: list[Any] = []
        seen: set[Any] = set()
        read = count = 0
        while len(items) < limit:
            page = {**(params or {}), "limit": limit - len(items), "offset": read}
            data = self.get(path, page)
            if not (isinstance(data, Mapping) and "results" in data):
                plain = list(data) if isinstance(data, list) else [data]
                return plain[:limit], len(plain)
            count = int(data.get("count") or 0)
            read += len(data["results"])
            for item in data["results"]:
                key = item.get("id") if isinstance(item, Mapping) else None
                if key is None or key not in seen:
                    seen.add(key)
                    items.append(item)
            if not data["results"] or not data.get("next"):
                break
        return items[:limit], max(count, len(items))

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise ApiError(0, f"{self.url} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self.url}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            raise _error_from(response)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                response.status_code, f"{method} {path} answered with something other than JSON"
            ) from None


def _error_from(response: httpx.Response) -> ApiError:
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if status == 404 and body is None:
        # The API answers a missing object with JSON; an HTML 404 means no API route matched:
        # a --url that is not the platform's root, or an id no route accepts.
        url = response.request.url  # without its query, and without any user:password in it
        where = f"{url.scheme}://{url.netloc.decode('ascii')}{url.path}"
        return ApiError(
            status,
            f"{where} was not found (HTTP 404): is the URL the gpuplatform server's root, "
            "and the id right?",
        )
    if status in (401, 403):
        detail = body.get("detail") if isinstance(body, Mapping) else None
        if not detail and status == 403 and isinstance(body, Mapping):
            # A role refusal names the object's field, e.g. {"id": ["viewers cannot cancel …"]}.
            reasons = next(iter(flatten_errors(body).values()), None)
            detail = reasons[0] if reasons else None
        if status == 403:
            hint = "your account may not do this"
        elif isinstance(body, Mapping) and body.get("code") == SSO_SIGN_IN_REQUIRED:
            # The token is good; a new one would be refused the same way until the sign-in.
            hint = "no new token needed: sign in, then run the command again"
        else:
            hint = "run `gpuctl login` again"
        return ApiError(status, f"{detail or 'not authorised'} ({hint})")
    if status >= 500 or body is None:
        return ApiError(status, f"the server failed with HTTP {status}")
    fields = flatten_errors(body)
    detail = fields.pop("detail", None)
    if detail and not fields:
        return ApiError(status, detail[0])
    first = next(iter(fields.items()), None)
    message = f"{first[0]}: {first[1][0]}" if first else f"HTTP {status}"
    return ApiError(status, message, fields)
