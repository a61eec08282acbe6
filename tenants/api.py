"""REST endpoints: my teams, quotas, priority classes, and the token exchange."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler.models import GpuModel

from . import services
from .models import Membership, PriorityClass, Quota, Team
from .permissions import is_platform_admin, visible_teams


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

    class Meta:
        model = Quota
        fields = ["id", "team", "gpu_model", "guaranteed_gpus", "borrow_limit_gpus"]


class PriorityClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preemptible_by_default", "description"]


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    """The teams the caller belongs to (all teams for platform admins)."""

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


class QuotaViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Quotas of the caller's teams; platform admins may create and change any."""

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
    serializer_class = PriorityClassSerializer
    queryset = PriorityClass.objects.order_by("-value")
    lookup_field = "name"


class TokenExchangeView(APIView):
    """POST username and password, get a new API token (shown once)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_scope = "token"

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
