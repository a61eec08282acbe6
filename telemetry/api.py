"""HTTP endpoints: the node agents' ingest (``POST /api/v1/telemetry/samples``, node token) and
Prometheus' ``GET /metrics`` (platform admins, or the scrape token ``METRICS_BEARER_TOKEN``).

The ingest answers 202 with the count stored, or 400 naming each bad field
(``{"samples[3].utilization": ["must be between 0 and 100"]}``) with nothing stored, or 429 (with
``Retry-After``) with nothing stored once the node wrote its rows for the minute.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any, cast

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
from rest_framework import authentication, exceptions, permissions, serializers, status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.auth import BearerTokenAuthentication
from tenants.authentication import ApiTokenAuthentication
from tenants.permissions import is_platform_admin

from . import conf
from . import ingest as limits
from .ingest import BatchInvalid
from .metrics import render_latest
from .models import NodeAgentToken
from .services import BatchInFlight, NodeGone, NodeOverBudget, samples_ingest
from .tokens import TOKEN_PREFIX, node_token_for


class NodeTokenAuthentication(BearerTokenAuthentication):
    """``Authorization: Bearer gpn_…``: a node agent. ``request.auth`` is its token row; there
    is no user (agents are not people and reach nothing else)."""

    prefix = TOKEN_PREFIX

    def authenticate_token(self, raw: str) -> tuple[AnonymousUser, NodeAgentToken]:
        token = node_token_for(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("invalid or revoked node token")
        return AnonymousUser(), token


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "telemetry.api.NodeTokenAuthentication"
    name = "nodeTokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "a node agent token (gpn_…)"}


class IsNodeAgent(permissions.BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.auth, NodeAgentToken)


# The batch as telemetry.ingest.parse_batch reads it, for the OpenAPI document (exporters other
# than gpuagent write it too); the view hands the body to parse_batch, which checks all of it.
@extend_schema_field(
    {
        "oneOf": [
            {"type": "number", "description": "epoch seconds"},
            {"type": "string", "format": "date-time", "description": "ISO 8601 with a zone"},
        ]
    }
)
class SampleTimeField(serializers.Field[Any, Any, Any, Any]):
    """A sample's time: epoch seconds or an ISO 8601 time with a zone."""


class AgentInfoSerializer(serializers.Serializer[Any]):
    version = serializers.CharField(
        required=False, allow_blank=True, max_length=limits.MAX_AGENT_VERSION_CHARS
    )
    dropped = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=limits.MAX_DROPPED,
        help_text="samples the agent dropped since it started (its buffer was full)",
    )


class GpuSampleInSerializer(serializers.Serializer[Any]):
    gpu = serializers.IntegerField(
        min_value=0, max_value=1023, help_text="the GPU's index on the node (below its GPU count)"
    )
    time = SampleTimeField(
        help_text="at most TELEMETRY_MAX_FUTURE_SECONDS ahead of the server's clock and "
        "TELEMETRY_RAW_RETENTION_SECONDS behind it"
    )
    utilization = serializers.FloatField(min_value=0, max_value=100, help_text="percent")
    memory_used_mib = serializers.IntegerField(
        min_value=0, max_value=limits.MAX_MEMORY_MIB, help_text="at most memory_total_mib"
    )
    memory_total_mib = serializers.IntegerField(min_value=1, max_value=limits.MAX_MEMORY_MIB)
    temperature_c = serializers.FloatField(
        min_value=limits.TEMPERATURE_C_MIN, max_value=limits.TEMPERATURE_C_MAX
    )
    power_w = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=limits.MAX_POWER_W
    )
    throttle_thermal = serializers.BooleanField(required=False, default=False)
    ecc_sbe = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=limits.MAX_ECC_ERRORS,
        help_text="single-bit ECC errors since the GPU's previous sample",
    )
    ecc_dbe = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=limits.MAX_ECC_ERRORS,
        help_text="double-bit ECC errors since the GPU's previous sample",
    )
    xid = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=limits.MAX_XID_CODE),
        required=False,
        max_length=limits.MAX_XIDS_PER_SAMPLE,
        help_text="XID codes seen since the GPU's previous sample",
    )


class SampleBatchSerializer(serializers.Serializer[Any]):
    agent = AgentInfoSerializer(required=False)
    samples = GpuSampleInSerializer(
        many=True, help_text="at most TELEMETRY_MAX_BATCH_SAMPLES; the batch is stored whole or not"
    )


class SampleBatchView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes: list[type] = []

    @extend_schema(
        summary="Ingest a batch of GPU samples from a node agent",
        request=SampleBatchSerializer,
        responses={
            202: inline_serializer(
                "SampleBatchAccepted",
                {
                    "accepted": serializers.IntegerField(),
                    "errors": serializers.IntegerField(),
                    "duplicate": serializers.BooleanField(),
                },
            )
        },
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            # IsNodeAgent let only a node's token through (DRF types request.auth as any token).
            token = cast(NodeAgentToken, request.auth)
            result = samples_ingest(node=token.node, body=request.data)
        except BatchInvalid as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        except BatchInFlight:
            return Response(
                {"samples": ["this batch is being stored by an earlier request; send it again"]},
                status=status.HTTP_409_CONFLICT,
            )
        except NodeGone:
            raise exceptions.AuthenticationFailed("invalid or revoked node token") from None
        except NodeOverBudget as exc:
            raise exceptions.Throttled(
                wait=exc.retry_after_s,
                detail="this node wrote its telemetry budget for this minute; retry later",
            ) from None
        return Response(
            {"accepted": result.accepted, "errors": result.errors, "duplicate": result.duplicate},
            status=status.HTTP_202_ACCEPTED,
        )


class MetricsTokenAuthentication(BearerTokenAuthentication):
    """The Prometheus scrape token (``METRICS_BEARER_TOKEN``), compared in constant time."""

    def authenticate_token(self, raw: str) -> tuple[AnonymousUser, str] | None:
        expected = conf.get("METRICS_BEARER_TOKEN")
        if expected and hmac.compare_digest(raw.encode(), expected.encode()):
            return AnonymousUser(), "metrics-scrape"
        return None  # maybe a user's API token: the next authenticator decides


class CanScrapeMetrics(permissions.BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth == "metrics-scrape" or is_platform_admin(request.user)


class AnyAcceptNegotiation(BaseContentNegotiation):
    """/metrics picks its own format from Accept (Prometheus text or OpenMetrics); DRF's
    negotiation must not refuse a scraper's Accept header with a 406."""

    def select_parser(
        self, request: HttpRequest, parsers: Iterable[BaseParser]
    ) -> BaseParser | None:
        return next(iter(parsers), None)

    def select_renderer(
        self,
        request: HttpRequest,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        renderer = list(renderers)[0]
        return renderer, renderer.media_type


@extend_schema(exclude=True)
class MetricsView(APIView):
    content_negotiation_class = AnyAcceptNegotiation
    authentication_classes = [
        MetricsTokenAuthentication,
        ApiTokenAuthentication,
        authentication.SessionAuthentication,
    ]
    permission_classes = [CanScrapeMetrics]
    throttle_classes: list[type] = []

    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        body, content_type = render_latest(request.headers.get("Accept", ""))
        return HttpResponse(body, content_type=content_type)
