"""The API reference pages (Redoc) under the portal's Content-Security-Policy."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET
from drf_spectacular.views import SpectacularRedocView
from rest_framework.request import Request
from rest_framework.response import Response

from gpuplatform.middleware import content_security_policy

SIDECAR_BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
# Redoc's sidebar footer always renders Redocly's logo from their CDN; the portal loads nothing
# from another host. An empty data: image fails to load, and Redoc then drops the <img>.
REDOCLY_LOGO_URL = "https://cdn.redoc.ly/redoc/logo-mini.svg"
EMPTY_IMAGE = "data:,"
BUNDLE_MAX_AGE_S = 365 * 24 * 3600  # the URL carries the content's hash


@functools.cache
def _bundle() -> tuple[bytes, str]:
    """The sidecar's Redoc bundle with the logo's address replaced, and its content hash."""
    path = finders.find(SIDECAR_BUNDLE)
    if not path:
        raise Http404("the Redoc bundle is not installed")
    with open(path, "rb") as f:
        text = f.read().replace(REDOCLY_LOGO_URL.encode(), EMPTY_IMAGE.encode())
    return text, hashlib.sha256(text).hexdigest()[:16]


@require_GET
def redoc_bundle(request: HttpRequest, digest: str) -> HttpResponse:
    text, current = _bundle()
    if digest != current:
        raise Http404("no such bundle version")
    response = HttpResponse(text, content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = f"public, max-age={BUNDLE_MAX_AGE_S}, immutable"
    return response


class RedocView(SpectacularRedocView):
    """Redoc styles itself with inline <style> elements (styled-components) and renders in a
    blob: worker: its page alone widens the policy for styles and workers. It shows only the
    platform's own schema, with the bundle served by ``redoc_bundle``."""

    @staticmethod
    def _redoc_standalone() -> str:
        return reverse("api-redoc-bundle", kwargs={"digest": _bundle()[1]})

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Content-Security-Policy"] = content_security_policy(
            {"style-src": "'self' 'unsafe-inline'", "worker-src": "'self' blob:"}
        )
        return response
