"""REST endpoints: my teams, quotas, priority classes, quota requests, API tokens, the audit log,
and the token exchange. Views translate HTTP into selector and service calls; permissions come
from ``tenants.permissions`` through the services."""

from __future__ import annotations

from typing import Any

import django_filters
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils.cache import add_never_cache_headers
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.authentication import BaseAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import Throttled
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from catalogue.models import GpuModel
from core.apianswers import AnswerSerializer
from core.bounds import api_number
from core.errors import DomainError, NotFound
from core.ids import parse_id

from . import entitlements as entitlement_services
from . import quotas as quota_services
from . import selectors, services
from . import teams as team_services
from .models import (
    ApiToken,
    AuditEntry,
    Membership,
    MembershipSource,
    PriorityClass,
    Quota,
    QuotaRequest,
    Role,
    Team,
    TeamEntitlements,
)
from .pagination import BoundedLimitOffsetPagination
from .permissions import Caller, is_platform_admin, signed_in, visible_teams
from .throttles import password_attempt_failed, password_attempt_refused


class TeamSerializer(serializers.ModelSerializer[Team]):
    # The stubs read a field named "parent" as Field.parent (the field's own serializer); DRF's
    # metaclass moves declared fields off the class, so the two never meet.
    parent = serializers.SerializerMethodField(  # type: ignore[assignment]
        help_text="the parent team's slug, if the caller may see it (null otherwise, as for a root)"
    )
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "parent", "fair_share_weight", "role"]

    def get_parent(self, team: Team) -> str | None:
        # a parent the caller is no member of is hidden, as the portal's team tree hides it
        visible = self.context.get("visible_team_ids", ())
        return team.parent.slug if team.parent is not None and team.parent_id in visible else None

    def get_role(self, team: Team) -> str | None:
        roles: dict[int, str] = self.context.get("roles", {})
        return roles.get(team.pk)


class QuotaSerializer(serializers.ModelSerializer[Quota]):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    guaranteed_gpus = api_number(Quota, "guaranteed_gpus")
    borrow_limit_gpus = api_number(Quota, "borrow_limit_gpus")
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

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A quota is one team's for one GPU model. Changing either on PUT/PATCH wrote (or
        # created) another team's or model's quota with this one's numbers and left this one as
        # it was, while answering as if this one had changed.
        if self.instance is not None:
            for field in ("team", "gpu_model"):
                if field in attrs and attrs[field] != getattr(self.instance, field):
                    raise serializers.ValidationError(
                        {
                            field: [
                                f"a quota's {field} cannot change; POST /api/v1/quotas/ sets "
                                "the quota of another team or GPU model"
                            ]
                        }
                    )
        return attrs


class PriorityClassSerializer(serializers.ModelSerializer[PriorityClass]):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preemptible_by_default", "restricted", "description"]
        read_only_fields = fields


class EffectiveEntitlementsSerializer(AnswerSerializer):
    """A team's entitlements with what it inherits from its parents and the platform defaults."""

    granted_classes = serializers.ListField(child=serializers.CharField())
    may_opt_out_of_preemption = serializers.BooleanField()
    max_pending_jobs = serializers.IntegerField(allow_null=True)
    max_pending_jobs_per_user = serializers.IntegerField(allow_null=True)


class EntitlementsSerializer(serializers.Serializer[Any]):
    """A team's quota settings beyond GPU quotas. The writable fields are the team's own; the
    ``effective`` object adds what it inherits from its parent teams and the platform defaults."""

    team = serializers.CharField(read_only=True)
    priority_classes = serializers.ListField(
        child=serializers.SlugField(max_length=64),
        max_length=200,
        help_text="restricted priority classes granted to this team (and its sub-teams)",
    )
    may_opt_out_of_preemption = serializers.BooleanField()
    max_pending_jobs = api_number(
        TeamEntitlements, "max_pending_jobs", required=False, allow_null=True, default=None
    )
    max_pending_jobs_per_user = api_number(
        TeamEntitlements,
        "max_pending_jobs_per_user",
        required=False,
        allow_null=True,
        default=None,
    )
    effective = EffectiveEntitlementsSerializer(read_only=True)


def _entitlements_body(team: Team) -> dict[str, Any]:
    row = TeamEntitlements.objects.filter(team=team).first()
    granted = selectors.team_entitlements(team)
    return {
        "team": team.slug,
        "priority_classes": sorted(row.priority_classes.values_list("name", flat=True))
        if row
        else [],
        "may_opt_out_of_preemption": row.may_opt_out_of_preemption if row else False,
        "max_pending_jobs": row.max_pending_jobs if row else None,
        "max_pending_jobs_per_user": row.max_pending_jobs_per_user if row else None,
        "effective": {
            "granted_classes": sorted(granted.granted_classes),
            "may_opt_out_of_preemption": granted.may_opt_out_of_preemption,
            "max_pending_jobs": granted.max_pending_jobs,
            "max_pending_jobs_per_user": granted.max_pending_jobs_per_user,
        },
    }


class MembershipSerializer(serializers.ModelSerializer[Membership]):
    username = serializers.CharField(source="user.username", read_only=True)
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = Membership
        fields = ["username", "team", "role"]
        read_only_fields = fields


class MembershipWriteSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.choices)


class TeamViewSet(viewsets.ReadOnlyModelViewSet[Team]):
    """The teams the caller belongs to (all teams for platform admins)."""

    # When an action answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {
        "members": "the change would leave the team without an owner",
        "member_remove": "the change would leave the team without an owner",
    }

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = TeamSerializer
    lookup_field = "slug"

    def get_queryset(self) -> QuerySet[Team]:
        return visible_teams(self.request.user).select_related("parent").order_by("slug")

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        user = self.request.user
        if user.is_authenticated:
            context["roles"] = dict(
                Membership.objects.filter(user=user).values_list("team_id", "role")
            )
            context["visible_team_ids"] = set(visible_teams(user).values_list("pk", flat=True))
        return context

    @extend_schema(
        request=MembershipWriteSerializer,
        responses={200: MembershipSerializer(many=True), 201: MembershipSerializer},
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def members(self, request: Request, slug: str = "", **kwargs: Any) -> Response:
        """GET: the team's members. POST {username, role}: add or change a member (team owners
        and admins; only owners touch the owner role)."""
        team = selectors.team_get(user=request.user, slug=slug)
        if request.method == "GET":
            members = selectors.membership_list(user=request.user, team=team)
            return Response(MembershipSerializer(members, many=True).data)
        incoming = MembershipWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        membership = team_services.membership_set(
            user=request.user, team=team, **incoming.validated_data
        )
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=EntitlementsSerializer, responses={200: EntitlementsSerializer})
    @action(detail=True, methods=["get", "put"], pagination_class=None)
    def entitlements(self, request: Request, slug: str = "", **kwargs: Any) -> Response:
        """GET: the team's quota settings (restricted classes granted, preemption opt-out,
        pending caps), as its members may read them. PUT: set them (platform admins)."""
        team = selectors.team_get(user=request.user, slug=slug)
        if request.method == "PUT":
            incoming = EntitlementsSerializer(data=request.data)
            incoming.is_valid(raise_exception=True)
            entitlement_services.entitlements_set(
                user=request.user, team=team, **incoming.validated_data
            )
        return Response(_entitlements_body(team))

    @extend_schema(request=None, responses={204: None})
    @action(
        detail=True,
        methods=["delete"],
        url_path=r"members/(?P<username>[^/]+)",
        url_name="member-remove",
    )
    def member_remove(
        self, request: Request, slug: str = "", username: str = "", **kwargs: Any
    ) -> Response:
        team = selectors.team_get(user=request.user, slug=slug)
        team_services.membership_remove(user=request.user, team=team, username=username)
        return Response(status=status.HTTP_204_NO_CONTENT)


class QuotaFilter(django_filters.FilterSet):
    team__slug = django_filters.CharFilter(
        method="filter_team", help_text="a team slug; a team you do not see is a 404"
    )
    gpu_model__name = django_filters.CharFilter(field_name="gpu_model__name")

    class Meta:
        model = Quota
        fields = ["team__slug", "gpu_model__name"]

    def filter_team(self, queryset: QuerySet[Quota], _name: str, value: str) -> QuerySet[Quota]:
        # django-filter hands the view's request in (the filter backend always passes it).
        user = self.request.user if self.request is not None else None
        return queryset.filter(team=selectors.team_get(user=user, slug=value))


class QuotaViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[Quota],
):
    """Quotas of the caller's teams; platform admins may create and change any."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = QuotaSerializer
    filterset_class = QuotaFilter

    def get_queryset(self) -> QuerySet[Quota]:
        teams = visible_teams(self.request.user)
        return Quota.objects.filter(team__in=teams).select_related("team", "gpu_model")

    def _save(self, serializer: serializers.BaseSerializer[Quota]) -> Quota:
        data = serializer.validated_data
        instance = getattr(serializer, "instance", None)
        return quota_services.quota_set(
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

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not is_platform_admin(request.user):
            return Response({"detail": "only platform admins change quotas"}, status=403)
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        quota = self._save(serializer)
        return Response(QuotaSerializer(quota).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        if not is_platform_admin(request.user):
            return Response({"detail": "only platform admins change quotas"}, status=403)
        serializer = self.get_serializer(
            instance, data=request.data, partial=kwargs.get("partial", False)
        )
        serializer.is_valid(raise_exception=True)
        quota = self._save(serializer)
        return Response(QuotaSerializer(quota).data)


class PriorityClassViewSet(viewsets.ReadOnlyModelViewSet[PriorityClass]):
    pagination_class = BoundedLimitOffsetPagination
    serializer_class = PriorityClassSerializer
    queryset = PriorityClass.objects.order_by("-value")
    lookup_field = "name"


class TokenExchangeView(APIView):
    """POST username and password, get a new API token (shown once)."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]

    def get_throttles(self) -> list[BaseThrottle]:
        return []  # failed password attempts are limited in post(), as at the portal's form

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
            ),
            429: OpenApiResponse(
                description="Too many failed password attempts from this address or for this "
                "username; retry after the `Retry-After` header's seconds."
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = request.data
        if not hasattr(data, "get"):  # a JSON list, string, number or null
            return Response({"non_field_errors": ["expected a JSON object"]}, status=400)
        username = data.get("username")
        password = data.get("password")
        errors: dict[str, list[str]] = {}
        for field, value in (("username", username), ("password", password)):
            if value is None or value == "":
                errors[field] = ["this field is required"]
            elif not isinstance(value, str):
                errors[field] = ["must be a string"]
        if errors:
            return Response(errors, status=status.HTTP_400_BAD_REQUEST)
        assert isinstance(username, str) and isinstance(password, str)  # refused above otherwise
        name = data.get("name")
        if name is None:
            name = "api"
        elif not isinstance(name, str) or not name.strip():
            return Response({"name": ["must be a non-empty string"]}, status=400)
        # The portal's login form and this exchange share one budget of failed attempts.
        wait = password_attempt_refused(request)
        if wait is not None:
            raise Throttled(wait=wait)
        try:
            token, raw = services.token_exchange(username=username, password=password, name=name)
        except DomainError:
            password_attempt_failed(request)
            raise
        response = Response(
            {"token": raw, "name": token.name, "expires_at": token.expires_at},
            status=status.HTTP_201_CREATED,
        )
        add_never_cache_headers(response)  # a secret: no cache, proxy or browser may keep it
        return response


def _visible_team_from_body(user: Caller, slug: object) -> Team:
    """The team named in a request body, if the caller may see it. Any other team is refused on
    the field, with one message whether or not it exists."""
    team = visible_teams(user).filter(slug=slug).first() if isinstance(slug, str) else None
    if team is None:
        raise DomainError(f"you are not a member of a team '{slug}'", field="team")
    return team


class QuotaChangeRequestSerializer(serializers.ModelSerializer[QuotaRequest]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    gpu_model: serializers.SlugRelatedField[GpuModel] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    requested_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    decided_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )  # null until decided

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


class QuotaChangeRequestCreateSerializer(serializers.Serializer[Any]):
    team = serializers.SlugField()
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    guaranteed_gpus = api_number(QuotaRequest, "guaranteed_gpus")
    borrow_limit_gpus = api_number(
        QuotaRequest, "borrow_limit_gpus", required=False, allow_null=True, default=None
    )
    reason = serializers.CharField(max_length=2000)
    until = serializers.DateTimeField(required=False, allow_null=True, default=None)


class DecisionSerializer(serializers.Serializer[Any]):
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    confirm_overcommit = serializers.BooleanField(required=False, default=False)


class QuotaRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[QuotaRequest]
):
    """Quota requests of the caller's teams. Team owners and admins create them; platform admins
    approve (which applies the change) or reject them with a comment."""

    # When an action answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {
        "approve": "the request is decided already, or its end date has passed",
        "reject": "the request is decided already",
    }

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = QuotaChangeRequestSerializer
    filterset_fields = ["status"]

    def get_queryset(self) -> QuerySet[QuotaRequest]:
        return selectors.quota_request_list(user=self.request.user)

    def _request_id(self) -> int:
        request_id = parse_id(self.kwargs.get("pk"))
        if request_id is None:
            raise NotFound("no such quota request", field="id")
        return request_id

    def get_object(self) -> QuotaRequest:
        return selectors.quota_request_get(user=self.request.user, request_id=self._request_id())

    @extend_schema(
        request=QuotaChangeRequestCreateSerializer, responses={201: QuotaChangeRequestSerializer}
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        incoming = QuotaChangeRequestCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        req = quota_services.quota_request_create(
            user=signed_in(request),
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
    def approve(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        self.get_object()  # another team's request is a 404 before any permission message
        incoming = DecisionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        req = quota_services.quota_request_approve(
            user=request.user,
            request_id=self._request_id(),
            comment=incoming.validated_data["comment"],
            confirm_overcommit=incoming.validated_data["confirm_overcommit"],
        )
        return Response(QuotaChangeRequestSerializer(req).data)

    @extend_schema(request=DecisionSerializer, responses={200: QuotaChangeRequestSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        self.get_object()
        incoming = DecisionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        req = quota_services.quota_request_reject(
            user=request.user,
            request_id=self._request_id(),
            comment=incoming.validated_data["comment"],
        )
        return Response(QuotaChangeRequestSerializer(req).data)


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
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

    def get_revoked(self, token: ApiToken) -> bool:
        return token.revoked_at is not None


class ApiTokenCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="the plain token, shown only once")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class TokenViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[ApiToken]
):
    """The caller's own API tokens. The plain token appears only in the create response; revoke
    with DELETE or POST …/revoke/. Another user's token is a 404."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = ApiTokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        return selectors.token_list(user=self.request.user)

    def _token_id(self) -> int:
        token_id = parse_id(self.kwargs.get("pk"))
        if token_id is None:
            raise NotFound("no such token", field="id")
        return token_id

    def get_object(self) -> ApiToken:
        token = self.get_queryset().filter(pk=self._token_id()).first()
        if token is None:
            raise NotFound("no such token", field="id")
        return token

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: ApiTokenCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        incoming = ApiTokenCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        token, raw = services.token_create(user=signed_in(request), **incoming.validated_data)
        body = dict(ApiTokenSerializer(token).data)
        body["token"] = raw
        response = Response(body, status=status.HTTP_201_CREATED)
        add_never_cache_headers(response)
        return response

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        services.token_revoke(user=signed_in(request), token_id=self._token_id())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        token = services.token_revoke(user=signed_in(request), token_id=self._token_id())
        return Response(ApiTokenSerializer(token).data)


class AuditEntrySerializer(serializers.ModelSerializer[AuditEntry]):
    # Null for platform-wide actions (a cluster, a node, a price).
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )
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


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet[AuditEntry]):
    """The audit log: all entries for platform admins, their teams' for team owners and admins."""

    pagination_class = BoundedLimitOffsetPagination
    serializer_class = AuditEntrySerializer

    def get_queryset(self) -> QuerySet[AuditEntry]:
        params = self.request.query_params
        return selectors.audit_list(
            user=self.request.user,
            team=params.get("team") or None,
            action=params.get("action") or None,
            actor=params.get("actor") or None,
        )

    def get_object(self) -> AuditEntry:
        pk = parse_id(self.kwargs.get("pk"))
        if pk is None:
            raise NotFound("no such audit entry", field="id")
        entry = self.get_queryset().filter(pk=pk).first()
        if entry is None:
            raise NotFound("no such audit entry", field="id")
        return entry


class MeView(APIView):
    """Who the caller is (token or session): name, teams and roles, how they sign in. ``gpuctl
    login --token-stdin`` checks a token created in the portal with it."""

    @extend_schema(
        responses={
            200: inline_serializer(
                "Me",
                {
                    "username": serializers.CharField(),
                    "email": serializers.CharField(),
                    "platform_admin": serializers.BooleanField(),
                    "sso": serializers.BooleanField(),
                    "teams": inline_serializer(
                        "MeTeam",
                        {
                            "team": serializers.SlugField(),
                            "role": serializers.ChoiceField(choices=Role.choices),
                            "source": serializers.ChoiceField(choices=MembershipSource.choices),
                        },
                        many=True,
                    ),
                },
            )
        }
    )
    def get(self, request: Request) -> Response:
        from .models import Membership

        user = signed_in(request)
        teams = [
            {"team": slug, "role": role, "source": source}
            for slug, role, source in Membership.objects.filter(user=user)
            .order_by("team__slug")
            .values_list("team__slug", "role", "source")
        ]
        return Response(
            {
                "username": user.get_username(),
                "email": user.email,
                "platform_admin": is_platform_admin(user),
                "sso": hasattr(user, "sso_identity"),
                "teams": teams,
            }
        )
