"""REST API of notifications: the caller's preferences, the webhooks they own or manage (with a
"send test" and an "enable" action) and the delivery log. Another person's or team's webhook or
message is a 404; the team of a webhook is checked by the service, never taken on trust."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError, FieldErrors, NotFound
from core.ids import parse_id
from tenants.models import Team
from tenants.pagination import BoundedLimitOffsetPagination
from tenants.permissions import signed_in

from . import selectors, services
from .events import TEAM_HOOK_EVENTS, Channel, EventKind
from .models import DeliveryAttempt, Message, Webhook, WebhookFormat


class WebhookSerializer(serializers.ModelSerializer[Webhook]):
    # One of the two is set: a team's hook has no owner, a personal hook no team.
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )
    owner: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    # The Standard Webhooks signing key ("whsec_..."), shown to whoever manages the hook.
    signing_key = serializers.CharField(source="secret", read_only=True)

    class Meta:
        model = Webhook
        fields = [
            "id",
            "name",
            "team",
            "owner",
            "url",
            "format",
            "events",
            "enabled",
            "disabled_reason",
            "disabled_at",
            "consecutive_failures",
            "slow_warning",
            "slow_since",
            "allow_private_network",
            "signing_key",
            "created_at",
        ]
        read_only_fields = fields


class WebhookWriteSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    url = serializers.CharField(max_length=500)
    team = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    format = serializers.ChoiceField(choices=WebhookFormat.choices, default=WebhookFormat.GENERIC)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EventKind.choices), required=False, allow_null=True
    )
    allow_private_network = serializers.BooleanField(default=False)


class AttemptSerializer(serializers.ModelSerializer[DeliveryAttempt]):
    class Meta:
        model = DeliveryAttempt
        fields = [
            "number",
            "started_at",
            "duration_ms",
            "ok",
            "status_code",
            "error",
            "response_excerpt",
        ]


class MessageSerializer(serializers.ModelSerializer[Message]):
    webhook: serializers.PrimaryKeyRelatedField[Webhook] = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True
    )  # null: email
    attempt_log = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Message
        fields = [
            "id",
            "channel",
            "webhook",
            "group_key",
            "status",
            "subject",
            "event_count",
            "created_at",
            "next_attempt_at",
            "attempts",
            "delivered_at",
            "last_error",
            "attempt_log",
        ]


def _pk(kwargs: dict[str, Any], what: str) -> int:
    try:
        return int(kwargs["pk"])
    except (TypeError, ValueError):
        raise NotFound(f"no such {what}", field="id") from None


class WebhookViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Webhook]
):
    """Webhooks: your own (``team`` null) and your managed teams'. POST …/test/ queues a test
    message; POST …/enable/ turns a disabled hook back on."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = WebhookSerializer

    def get_queryset(self) -> QuerySet[Webhook]:
        return selectors.webhook_list(user=self.request.user).order_by("id")

    def get_object(self) -> Webhook:
        return services.webhook_get(user=self.request.user, webhook_id=_pk(self.kwargs, "webhook"))

    @extend_schema(request=WebhookWriteSerializer, responses={201: WebhookSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        incoming = WebhookWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        hook = services.webhook_create(user=signed_in(request), **incoming.validated_data)
        return Response(WebhookSerializer(hook).data, status=status.HTTP_201_CREATED)

    def _write(self, request: Request, *, partial: bool) -> Response:
        webhook_id = _pk(self.kwargs, "webhook")
        hook = services.webhook_get(user=signed_in(request), webhook_id=webhook_id)  # 404 first
        incoming = WebhookWriteSerializer(data=request.data, partial=partial)
        incoming.is_valid(raise_exception=True)
        fields = dict(incoming.validated_data)
        # A team stated is accepted when it is the hook's own, so a PUT may send back what a
        # GET answered.
        if "team" in fields and (fields.pop("team") or None) != (
            hook.team.slug if hook.team else None
        ):
            raise FieldErrors({"team": ["a webhook cannot move to another team"]})
        if not partial and fields.get("events") is None:
            # A replacement leaves nothing of the old hook: no events stated means what a new
            # hook gets.
            fields["events"] = list(TEAM_HOOK_EVENTS) if hook.team else None
        hook = services.webhook_update(user=signed_in(request), webhook_id=webhook_id, **fields)
        return Response(WebhookSerializer(hook).data)

    @extend_schema(request=WebhookWriteSerializer, responses={200: WebhookSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._write(request, partial=True)

    @extend_schema(request=WebhookWriteSerializer, responses={200: WebhookSerializer})
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Replace the hook: ``name`` and ``url`` are required; ``format``, ``events`` and
        ``allow_private_network`` not stated take the values a new hook gets."""
        return self._write(request, partial=False)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.webhook_delete(user=signed_in(request), webhook_id=_pk(self.kwargs, "webhook"))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={202: MessageSerializer})
    @action(detail=True, methods=["post"])
    def test(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        message = services.webhook_send_test(
            user=signed_in(request), webhook_id=_pk(self.kwargs, "webhook")
        )
        return Response(MessageSerializer(message).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: WebhookSerializer})
    @action(detail=True, methods=["post"])
    def enable(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        hook = services.webhook_enable(
            user=signed_in(request), webhook_id=_pk(self.kwargs, "webhook")
        )
        return Response(WebhookSerializer(hook).data)


class DeliveryViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Message]
):
    """The delivery log: messages to your email and to the webhooks you may see, each with its
    attempts. Filter by ``?webhook=<id>``: a hook the caller may not see (or none) is a 404."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = MessageSerializer

    def get_queryset(self) -> QuerySet[Message]:
        queryset = selectors.message_list(user=self.request.user)
        webhook = self.request.query_params.get("webhook")
        if webhook is not None:
            webhook_id = parse_id(webhook)
            if webhook_id is None:
                raise DomainError("must be a webhook id (a whole number)", field="webhook")
            # A hook the caller may not see is as missing as one that is not there: a 404, not
            # an empty log (docs/tenancy.md).
            if not selectors.webhook_list(user=self.request.user).filter(pk=webhook_id).exists():
                raise NotFound("no such webhook", field="webhook")
            queryset = queryset.filter(webhook_id=webhook_id)
        return queryset

    def get_object(self) -> Message:
        message = self.get_queryset().filter(pk=_pk(self.kwargs, "message")).first()
        if message is None:
            raise NotFound("no such message", field="id")
        return message


_PREFERENCES = inline_serializer(
    "NotificationPreference",
    {
        "event": serializers.ChoiceField(choices=EventKind.choices),
        "channel": serializers.ChoiceField(choices=Channel.choices),
        "enabled": serializers.BooleanField(),
    },
    many=True,
)


class PreferencesView(APIView):
    """Your event × channel choices (every pair, defaults filled in). PUT or PATCH a list of
    ``{event, channel, enabled}`` to change some."""

    def _body(self, user: User) -> list[dict[str, Any]]:
        return [
            {"event": event, "channel": channel, "enabled": enabled}
            for (event, channel), enabled in services.preferences_of(user).items()
        ]

    @extend_schema(responses={200: _PREFERENCES})
    def get(self, request: Request) -> Response:
        return Response(self._body(signed_in(request)))

    @extend_schema(request=_PREFERENCES, responses={200: _PREFERENCES})
    def put(self, request: Request) -> Response:
        items = request.data
        if not isinstance(items, list):
            raise FieldErrors(
                {"non_field_errors": ["expected a list of {event, channel, enabled}"]}
            )
        choices = {}
        first: dict[tuple[str, str], int] = {}
        for n, item in enumerate(items):
            if not isinstance(item, dict) or not {"event", "channel", "enabled"} <= set(item):
                raise FieldErrors({f"{n}": ["needs event, channel and enabled"]})
            pair = (str(item["event"]), str(item["channel"]))
            # Two choices for one pair are a mistake in the list (the last silently won): say
            # so rather than guess which was meant.
            if pair in first:
                raise FieldErrors(
                    {
                        f"{n}": [
                            f"repeats item {first[pair]} (event {pair[0]!r}, channel "
                            f"{pair[1]!r}): state each pair once"
                        ]
                    }
                )
            first[pair] = n
            choices[pair] = item["enabled"]
        services.preferences_set(user=signed_in(request), choices=choices)
        return Response(self._body(signed_in(request)))

    patch = put
