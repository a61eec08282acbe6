"""HTTP endpoints: the node agents' ingest (``POST /api/v1/telemetry/samples``, node token) and
Prometheus' ``GET /metrics`` (platform admins, or the scrape token ``METRICS_BEARER_TOKEN``).

The ingest answers 202 with the count stored, or 400 naming each bad field
(``{"samples[3].utilization": ["must be between 0 and 100"]}``) with nothing stored.
"""

from __future__ import annotations

import hmac
import time

from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import authentication, exceptions, permissions, serializers, status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.authentication import ApiTokenAuthentication
from tenants.permissions import is_platform_admin

from . import conf
from .ingest import BatchInvalid
from .models import NodeAgentToken, hash_node_token
from .services import TOKEN_PREFIX, samples_ingest

# token hash -> (valid until (monotonic), token row with its node). Agents post every few
# seconds; looking their token up once per TOKEN_CACHE_SECONDS instead of on every batch takes a
# query off the hot path. The price: a revoked token keeps working for up to that long in a
# process that cached it.
TOKEN_CACHE_SECONDS = 30.0
_token_cache: dict[str, tuple[float, NodeAgentToken]] = {}


def _token_for(raw: str) -> NodeAgentToken | None:
    key = hash_node_token(raw)
    now = time.monotonic()
    hit = _token_cache.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    token = (
        NodeAgentToken.objects.select_related("node")
        .filter(key_hash=key, revoked_at__isnull=True)
        .first()
    )
    if token is None:
        _token_cache.pop(key, None)
        return None
    if len(_token_cache) > 50_000:  # bounded: a flood of distinct tokens cannot grow it forever
        _token_cache.clear()
    _token_cache[key] = (now + TOKEN_CACHE_SECONDS, token)
    wall = timezone.now()
    # At most one write a minute per token: batches must not all become writes.
    if token.last_used_at is None or (wall - token.last_used_at).total_seconds() > 60:
        NodeAgentToken.objects.filter(pk=token.pk).update(last_used_at=wall)
        token.last_used_at = wall
    return token


def forget_cached_tokens() -> None:
    """Drop this process's token cache (tests; an emergency revocation from a shell)."""
    _token_cache.clear()


class NodeTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer gpn_…``: a node agent. ``request.auth`` is its token row; there
    is no user (agents are not people and reach nothing else)."""

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != b"bearer":
            return None
        raw = header[1].decode(errors="replace")
        if not raw.startswith(TOKEN_PREFIX):
            return None
        token = _token_for(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("invalid or revoked node token")
        return AnonymousUser(), token

    def authenticate_header(self, request):
        return "Bearer"


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "scheduler.telemetry.api.NodeTokenAuthentication"
    name = "nodeTokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "a node agent token (gpn_…)"}


class IsNodeAgent(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.auth, NodeAgentToken)


class SampleBatchView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes: list = []

    @extend_schema(
        summary="Ingest a batch of GPU samples from a node agent",
        request=inline_serializer(
            "SampleBatch",
            {
                "agent": serializers.DictField(required=False),
                "samples": serializers.ListField(child=serializers.DictField()),
            },
        ),
        responses={
            202: inline_serializer(
                "SampleBatchAccepted",
                {"accepted": serializers.IntegerField(), "errors": serializers.IntegerField()},
            )
        },
    )
    def post(self, request, *args, **kwargs):
        try:
            result = samples_ingest(node=request.auth.node, body=request.data)
        except BatchInvalid as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            {"accepted": result.accepted, "errors": result.errors},
            status=status.HTTP_202_ACCEPTED,
        )


class MetricsTokenAuthentication(authentication.BaseAuthentication):
    """The Prometheus scrape token (``METRICS_BEARER_TOKEN``), compared in constant time."""

    def authenticate(self, request):
        expected = conf.get("METRICS_BEARER_TOKEN")
        header = authentication.get_authorization_header(request).split()
        if not expected or len(header) != 2 or header[0].lower() != b"bearer":
            return None
        if hmac.compare_digest(header[1], expected.encode()):
            return AnonymousUser(), "metrics-scrape"
        return None  # maybe a user's API token: the next authenticator decides

    def authenticate_header(self, request):
        return "Bearer"


class CanScrapeMetrics(permissions.BasePermission):
    def has_permission(self, request, view):
        return request.auth == "metrics-scrape" or is_platform_admin(request.user)


class AnyAcceptNegotiation(BaseContentNegotiation):
    """/metrics picks its own format from Accept (Prometheus text or OpenMetrics); DRF's
    negotiation must not refuse a scraper's Accept header with a 406."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


@extend_schema(exclude=True)
class MetricsView(APIView):
    content_negotiation_class = AnyAcceptNegotiation
    authentication_classes = [
        MetricsTokenAuthentication,
        ApiTokenAuthentication,
        authentication.SessionAuthentication,
    ]
    permission_classes = [CanScrapeMetrics]
    throttle_classes: list = []

    def get(self, request, *args, **kwargs):
        from scheduler.metrics import render_latest

        body, content_type = render_latest(request.headers.get("Accept", ""))
        return HttpResponse(body, content_type=content_type)
