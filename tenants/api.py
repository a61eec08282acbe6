"""REST endpoints: my teams, quotas, priority classes, quota requests, API tokens, the audit log,
and the token exchange. Views translate HTTP into selector and service calls; permissions come
from ``tenants.permissions`` through the services."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler.errors import DomainError, NotFound
from scheduler.models import GpuModel

from . import selectors, services
from .models import (
    ApiToken,
    AuditEntry,
    Membership,
    PriorityClass,
    Quota,
    QuotaRequest,
    Role,
    Team,
)
from .pagination import BoundedLimitOffsetPagination
from .permissions import is_platform_admin, visible_teams
from .throttles import token_exchange_throttles


class TeamSerializer(serializers.ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "parent", "fair_share_weight", "role"]

    def get_role(self, team) -> str | None:
        roles = self.context.get("roles", {})
        return roles.get(team.pk)


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    guaranteed_gpus = serializers.IntegerField(min_value=0, max_value=100000)
    borrow_limit_gpus = serializers.IntegerField(min_value=0, max_value=100000)
    confirm_overcommit = serializers.BooleanField(
        write_only=True,
        required=False,
        default=False,
        help_text="save even if the guarantees of this GPU model exceed the cluster's capacity",
    )

    class Meta:
        model = Quota
        fields = [
            "id",
            "team",
            "gpu_model",
            "guaranteed_gpus",
            "borrow_limit_gpus",
            "confirm_overcommit",
        ]


class PriorityClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preemptible_by_default", "description"]


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "team", "role"]
        read_only_fields = fields


class MembershipWriteSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.choices)


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    """The teams the caller belongs to (all teams for platform admins)."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = TeamSerializer
    lookup_field = "slug"

    def get_queryset(self):
        return visible_teams(self.request.user).select_related("parent").order_by("slug")

    def get_serializer_context(self):
        context = super().get_serializer_context()
        user = self.request.user
        if user.is_authenticated:
            context["roles"] = dict(
                Membership.objects.filter(user=user).values_list("team_id", "role")
            )
        return context

    @extend_schema(
        request=MembershipWriteSerializer,
        responses={200: MembershipSerializer(many=True), 201: MembershipSerializer},
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def members(self, request, slug=None, **kwargs):
        """GET: the team's members. POST {username, role}: add or change a member (team owners
        and admins; only owners touch the owner role)."""
        team = selectors.team_get(user=request.user, slug=slug)
        if request.method == "GET":
            members = selectors.membership_list(user=request.user, team=team)
            return Response(MembershipSerializer(members, many=True).data)
        incoming = MembershipWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        membership = services.membership_set(
            user=request.user, team=team, **incoming.validated_data
        )
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    @action(
        detail=True,
        methods=["delete"],
        url_path=r"members/(?P<username>[^/]+)",
        url_name="member-remove",
    )
    def member_remove(self, request, slug=None, username=None, **kwargs):
        team = selectors.team_get(user=request.user, slug=slug)
        services.membership_remove(user=request.user, team=team, username=username)
        return Response(status=status.HTTP_204_NO_CONTENT)


class QuotaViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Quotas of the caller's teams; platform admins may create and change any."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = QuotaSerializer
    filterset_fields = ["team__slug", "gpu_model__name"]

    def get_queryset(self):
        teams = visible_teams(self.request.user)
        return Quota.objects.filter(team__in=teams).select_related("team", "gpu_model")

    def _save(self, serializer):
        data = serializer.validated_data
        instance = getattr(serializer, "instance", None)
        return services.quota_set(
            user=self.request.user,
            team=data.get("team", instance.team if instance else None),
            gpu_model=data.get("gpu_model", instance.gpu_model if instance else None),
            guaranteed_gpus=data.get(
                "guaranteed_gpus", instance.guaranteed_gpus if instance else 0
            ),
            borrow_limit_gpus=data.get(
                "borrow_limit_gpus", instance.borrow_limit_gpus if instance else 0
            ),
            confirm_overcommit=data.get("confirm_overcommit", False),
        )

    def create(self, request, *args, **kwargs):
        if not is_platform_admin(request.user):
            return Response({"detail": "only platform admins change quotas"}, status=403)
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        quota = self._save(serializer)
        return Response(QuotaSerializer(quota).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        if not is_platform_admin(request.user):
            return Response({"detail": "only platform admins change quotas"}, status=403)
        serializer = self.get_serializer(
            instance, data=request.data, partial=kwargs.get("partial", False)
        )
        serializer.is_valid(raise_exception=True)
        quota = self._save(serializer)
        return Response(QuotaSerializer(quota).data)


class PriorityClassViewSet(viewsets.ReadOnlyModelViewSet):
    pagination_class = BoundedLimitOffsetPagination
    serializer_class = PriorityClassSerializer
    queryset = PriorityClass.objects.order_by("-value")
    lookup_field = "name"


class TokenExchangeView(APIView):
    """POST username and password, get a new API token (shown once)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get_throttles(self):
        return token_exchange_throttles()

    @extend_schema(
        request=inline_serializer(
            "TokenRequest",
            {
                "username": serializers.CharField(),
                "password": serializers.CharField(),
                "name": serializers.CharField(required=False),
            },
        ),
        responses={
            201: inline_serializer(
                "TokenResponse",
                {
                    "token": serializers.CharField(),
                    "name": serializers.CharField(),
                    "expires_at": serializers.DateTimeField(allow_null=True),
                },
            )
        },
    )
    def post(self, request):
        username = request.data.get("username")
        password = request.data.get("password")
        errors = {}
        if not isinstance(username, str) or not username:
            errors["username"] = ["this field is required"]
        if not isinstance(password, str) or not password:
            errors["password"] = ["this field is required"]
        if errors:
            return Response(errors, status=status.HTTP_400_BAD_REQUEST)
        name = request.data.get("name") or "api"
        if not isinstance(name, str):
            return Response({"name": ["must be a string"]}, status=400)
        token, raw = services.token_exchange(username=username, password=password, name=name)
        return Response(
            {"token": raw, "name": token.name, "expires_at": token.expires_at},
            status=status.HTTP_201_CREATED,
        )


def _visible_team_from_body(user, slug) -> Team:
    """The team named in a request body, if the caller may see it. Any other team is refused on
    the field, with one message whether or not it exists."""
    team = visible_teams(user).filter(slug=slug).first() if isinstance(slug, str) else None
    if team is None:
        raise DomainError(f"you are not a member of a team '{slug}'", field="team")
    return team


class QuotaChangeRequestSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "team",
            "gpu_model",
            "guaranteed_gpus",
            "borrow_limit_gpus",
            "reason",
            "until",
            "status",
            "requested_by",
            "created_at",
            "decided_by",
            "decided_at",
            "decision_comment",
        ]
        read_only_fields = fields


class QuotaChangeRequestCreateSerializer(serializers.Serializer):
    team = serializers.SlugField()
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    guaranteed_gpus = serializers.IntegerField(min_value=0, max_value=100000)
    borrow_limit_gpus = serializers.IntegerField(
        min_value=0, max_value=100000, required=False, allow_null=True, default=None
    )
    reason = serializers.CharField(max_length=2000)
    until = serializers.DateTimeField(required=False, allow_null=True, default=None)


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    confirm_overcommit = serializers.BooleanField(required=False, default=False)


class QuotaRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Quota requests of the caller's teams. Team owners and admins create them; platform admins
    approve (which applies the change) or reject them with a comment."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = QuotaChangeRequestSerializer
    filterset_fields = ["status"]

    def get_queryset(self):
        return selectors.quota_request_list(user=self.request.user)

    def _request_id(self) -> int:
        try:
            return int(self.kwargs["pk"])
        except (TypeError, ValueError):
            raise NotFound("no such quota request", field="id") from None

    def get_object(self):
        return selectors.quota_request_get(user=self.request.user, request_id=self._request_id())

    @extend_schema(
        request=QuotaChangeRequestCreateSerializer, responses={201: QuotaChangeRequestSerializer}
    )
    def create(self, request, *args, **kwargs):
        incoming = QuotaChangeRequestCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        req = services.quota_request_create(
            user=request.user,
            team=_visible_team_from_body(request.user, data["team"]),
            gpu_model=data["gpu_model"],
            guaranteed_gpus=data["guaranteed_gpus"],
            borrow_limit_gpus=data["borrow_limit_gpus"],
            reason=data["reason"],
            until=data["until"],
        )
        return Response(QuotaChangeRequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DecisionSerializer, responses={200: QuotaChangeRequestSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None, **kwargs):
        self.get_object()  # another team's request is a 404 before any permission message
        incoming = DecisionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        req = services.quota_request_approve(
            user=request.user,
            request_id=self._request_id(),
            comment=incoming.validated_data["comment"],
            confirm_overcommit=incoming.validated_data["confirm_overcommit"],
        )
        return Response(QuotaChangeRequestSerializer(req).data)

    @extend_schema(request=DecisionSerializer, responses={200: QuotaChangeRequestSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None, **kwargs):
        self.get_object()
        incoming = DecisionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        req = services.quota_request_reject(
            user=request.user,
            request_id=self._request_id(),
            comment=incoming.validated_data["comment"],
        )
        return Response(QuotaChangeRequestSerializer(req).data)


class ApiTokenSerializer(serializers.ModelSerializer):
    revoked = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "key_prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "revoked",
        ]
        read_only_fields = fields

    def get_revoked(self, token) -> bool:
        return token.revoked_at is not None


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="the plain token, shown only once")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class TokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """The caller's own API tokens. The plain token appears only in the create response; revoke
    with DELETE or POST …/revoke/. Another user's token is a 404."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = ApiTokenSerializer

    def get_queryset(self):
        return selectors.token_list(user=self.request.user)

    def _token_id(self) -> int:
        try:
            return int(self.kwargs["pk"])
        except (TypeError, ValueError):
            raise NotFound("no such token", field="id") from None

    def get_object(self):
        token = self.get_queryset().filter(pk=self._token_id()).first()
        if token is None:
            raise NotFound("no such token", field="id")
        return token

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: ApiTokenCreatedSerializer})
    def create(self, request, *args, **kwargs):
        incoming = ApiTokenCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        token, raw = services.token_create(user=request.user, **incoming.validated_data)
        body = ApiTokenSerializer(token).data
        body["token"] = raw
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None, **kwargs):
        services.token_revoke(user=request.user, token_id=self._token_id())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None, **kwargs):
        token = services.token_revoke(user=request.user, token_id=self._token_id())
        return Response(ApiTokenSerializer(token).data)


class AuditEntrySerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    actor = serializers.CharField(source="actor_name", read_only=True)
    target = serializers.CharField(source="target_repr", read_only=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "time",
            "actor",
            "action",
            "target_type",
            "target_id",
            "target",
            "team",
            "before",
            "after",
            "comment",
        ]
        read_only_fields = fields


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log: all entries for platform admins, their teams' for team owners and admins."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = AuditEntrySerializer

    def get_queryset(self):
        params = self.request.query_params
        return selectors.audit_list(
            user=self.request.user,
            team=params.get("team") or None,
            action=params.get("action") or None,
            actor=params.get("actor") or None,
        )

    def get_object(self):
        try:
            pk = int(self.kwargs["pk"])
        except (TypeError, ValueError):
            raise NotFound("no such audit entry", field="id") from None
        entry = self.get_queryset().filter(pk=pk).first()
        if entry is None:
            raise NotFound("no such audit entry", field="id")
        return entry
