"""REST API of the policy history (platform admins; a 404 for every other signed-in user):
the version in force, the history, one version, a diff, apply, rollback. Bad input is a 400
whose keys name the field (``engine_config.<field>``, ``team_weights.<slug>``, ...)."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import FieldErrors
from scheduler.api.contract_schema import ENGINE_CONFIG_BY_KEY_SCHEMA
from tenants.permissions import is_platform_admin

from . import selectors, services, whatif_runs
from .models import MAX_VERSION_NUMBER, VERSION_NUMBER_RANGE, PolicyVersion, WhatIfRun
from .whatif import MAX_WINDOW_DAYS, WINDOW_DAYS_RANGE


class AdminElseNotFound(BasePermission):
    """Signed-in platform admins; any other signed-in user gets a 404 whatever the method (the
    routes do not exist for them), before a 405 could tell them otherwise."""

    # The OpenAPI document declares the 404 it answers (gpuplatform/apischema.py).
    refused_status = 404

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not request.user.is_authenticated:
            return False
        if not is_platform_admin(request.user):
            raise exceptions.NotFound()
        return True


class PolicyVersionSerializer(serializers.ModelSerializer[PolicyVersion]):
    class Meta:
        model = PolicyVersion
        fields = [
            "number",
            "created_at",
            "created_by_name",
            "reason",
            "source",
            "restores",
            "engine_config",
            "team_weights",
            "priority_classes",
        ]
        read_only_fields = fields


class DiffRowSerializer(serializers.Serializer[Any]):
    section = serializers.CharField(read_only=True)
    key = serializers.CharField(read_only=True)
    before = serializers.JSONField(read_only=True)
    after = serializers.JSONField(read_only=True)


@extend_schema_field(ENGINE_CONFIG_BY_KEY_SCHEMA)
class EngineConfigByKeyField(serializers.DictField):
    """The engine configuration by JSON key (policyversions.selectors.effective_engine_config)."""


class PolicyInForceSerializer(serializers.Serializer[Any]):
    in_force = PolicyVersionSerializer(read_only=True)
    engine = EngineConfigByKeyField(read_only=True, help_text="every engine field's value")
    drift = DiffRowSerializer(many=True, read_only=True)


class PolicyApplySerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=500)
    engine_config = serializers.JSONField(
        required=False, help_text="engine fields that differ from the defaults (replaces)"
    )
    team_weights = serializers.DictField(
        child=serializers.JSONField(), required=False, help_text="team slug -> weight (merged)"
    )
    priority_classes = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text="name -> {value, preemptible_by_default, restricted} (merged)",
    )


class RollbackSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=500)


def _flat_errors(errors: Any, where: str = "") -> dict[str, list[str]]:
    """A serializer's errors as field -> reasons, a value inside an object named by its path
    (``candidate_versions.old``): DRF gives an object's errors as an object of its own, whose
    keys would otherwise be read as the reasons."""
    if isinstance(errors, dict):
        out: dict[str, list[str]] = {}
        for key, nested in errors.items():
            out.update(_flat_errors(nested, f"{where}.{key}" if where else str(key)))
        return out
    return {where: [str(m) for m in errors]}


def _validated(serializer_class: type[serializers.Serializer[Any]], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise FieldErrors(_flat_errors(serializer.errors))
    validated: dict[str, Any] = serializer.validated_data
    return validated


class PolicyView(APIView):
    permission_classes = [AdminElseNotFound]

    @extend_schema(responses={200: PolicyInForceSerializer}, operation_id="policy_in_force")
    def get(self, request: Request) -> Response:
        services.policy_version_seed()
        current = selectors.policy_in_force(user=request.user)
        # Seeded just above, and no path deletes a version.
        assert current is not None
        return Response(
            {
                "in_force": PolicyVersionSerializer(current).data,
                "engine": selectors.effective_engine_config(current.engine_config),
                "drift": DiffRowSerializer(
                    selectors.policy_drift(user=request.user, version=current), many=True
                ).data,
            }
        )


class PolicyVersionListView(APIView):
    permission_classes = [AdminElseNotFound]
    # When it answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {"post": "another version was put in force meanwhile; try again"}

    @extend_schema(responses={200: PolicyVersionSerializer(many=True)})
    def get(self, request: Request) -> Response:
        services.policy_version_seed()
        versions = selectors.policy_version_list(user=request.user)[:500]
        return Response(PolicyVersionSerializer(versions, many=True).data)

    @extend_schema(request=PolicyApplySerializer, responses={201: PolicyVersionSerializer})
    def post(self, request: Request) -> Response:
        data = _validated(PolicyApplySerializer, request.data)
        version = services.policy_apply(user=request.user, **data)
        return Response(PolicyVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class PolicyVersionView(APIView):
    permission_classes = [AdminElseNotFound]

    @extend_schema(responses={200: PolicyVersionSerializer})
    def get(self, request: Request, number: int) -> Response:
        version = selectors.policy_version_get(user=request.user, number=number)
        return Response(PolicyVersionSerializer(version).data)


class PolicyRollbackView(APIView):
    permission_classes = [AdminElseNotFound]
    conflicts = {"post": "another version was put in force meanwhile; try again"}

    @extend_schema(request=RollbackSerializer, responses={201: PolicyVersionSerializer})
    def post(self, request: Request, number: int) -> Response:
        selectors.policy_version_get(user=request.user, number=number)
        data = _validated(RollbackSerializer, request.data)
        version = services.policy_rollback(user=request.user, number=number, **data)
        return Response(PolicyVersionSerializer(version).data, status=status.HTTP_201_CREATED)


def _version_number(request: Request, key: str) -> int:
    number = selectors.version_number(request.query_params.get(key, ""))
    if number is None:
        raise FieldErrors({key: ["must be a version number"]})
    return number


class PolicyDiffView(APIView):
    permission_classes = [AdminElseNotFound]

    @extend_schema(
        parameters=[
            OpenApiParameter("a", int, required=True, description="from version"),
            OpenApiParameter("b", int, required=True, description="to version"),
        ],
        responses={200: DiffRowSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        rows = selectors.policy_diff(
            user=request.user, a=_version_number(request, "a"), b=_version_number(request, "b")
        )
        return Response(DiffRowSerializer(rows, many=True).data)


urlpatterns = [
    path("", PolicyView.as_view(), name="api-policy"),
    path("versions", PolicyVersionListView.as_view(), name="api-policy-versions"),
    path("versions/<id:number>", PolicyVersionView.as_view(), name="api-policy-version"),
    path(
        "versions/<id:number>/rollback",
        PolicyRollbackView.as_view(),
        name="api-policy-rollback",
    ),
    path("diff", PolicyDiffView.as_view(), name="api-policy-diff"),
]


# ------------------------------------------------------------------------------ what-if runs


class WhatIfRunSerializer(serializers.ModelSerializer[WhatIfRun]):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    policies = serializers.SerializerMethodField()

    class Meta:
        model = WhatIfRun
        fields = [
            "id",
            "cluster",
            "status",
            "created_at",
            "created_by_name",
            "since",
            "until",
            "baseline_version",
            "candidates",
            "candidate_versions",
            "policies",
            "progress_fraction",
            "progress_text",
            "cancel_requested",
            "started_at",
            "finished_at",
            "error",
        ]
        read_only_fields = fields

    def get_policies(self, run: WhatIfRun) -> list[str]:
        return selectors.whatif_policies(run)


class WhatIfRunDetailSerializer(WhatIfRunSerializer):
    class Meta(WhatIfRunSerializer.Meta):
        fields = [*WhatIfRunSerializer.Meta.fields, "results", "details"]
        read_only_fields = fields


class WhatIfStartSerializer(serializers.Serializer[Any]):
    cluster = serializers.CharField(
        required=False, help_text="cluster name (default: the only enabled cluster)"
    )
    window_days = serializers.FloatField(
        required=False,
        default=30,
        min_value=0,  # 0 itself is refused by the service, with the same message
        max_value=MAX_WINDOW_DAYS,
        error_messages={"min_value": WINDOW_DAYS_RANGE, "max_value": WINDOW_DAYS_RANGE},
        help_text=f"replay the jobs submitted in the last N days (at most {MAX_WINDOW_DAYS})",
    )
    candidates = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text="candidate name -> a policy: any of engine_config (fields that differ from "
        "the defaults; replaces the one in force), team_weights (slug -> weight) and "
        "priority_classes (name -> {value, preemptible_by_default, restricted}), the named "
        "teams and classes changing; an object with none of the three is an engine_config",
    )
    candidate_versions = serializers.DictField(
        child=serializers.IntegerField(
            min_value=1,
            max_value=MAX_VERSION_NUMBER,
            error_messages={"min_value": VERSION_NUMBER_RANGE, "max_value": VERSION_NUMBER_RANGE},
        ),
        required=False,
        help_text="candidate name -> an earlier policy version to try whole (its engine "
        "configuration, team weights and priority classes)",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A misspelt field (``window`` for ``window_days``) would otherwise be dropped and the
        # replay run on the default instead of what was asked.
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({key: ["unknown field"] for key in unknown})
        return attrs


class WhatIfApplySerializer(serializers.Serializer[Any]):
    candidate = serializers.CharField(max_length=60)
    reason = serializers.CharField(max_length=500)


class WhatIfRunListView(APIView):
    permission_classes = [AdminElseNotFound]
    conflicts = {"post": "another replay of the cluster is live"}

    @extend_schema(responses={200: WhatIfRunSerializer(many=True)}, operation_id="whatif_list")
    def get(self, request: Request) -> Response:
        runs = selectors.whatif_run_list(user=request.user)[:200]
        return Response(WhatIfRunSerializer(runs, many=True).data)

    @extend_schema(
        request=WhatIfStartSerializer,
        responses={201: WhatIfRunSerializer},
        operation_id="whatif_start",
        description="Queue a replay of the cluster's finished history under the policy in force "
        "and the candidates (409 while another replay of the cluster is live).",
    )
    def post(self, request: Request) -> Response:
        data = _validated(WhatIfStartSerializer, request.data)
        run = whatif_runs.whatif_run_start(user=request.user, **data)
        return Response(WhatIfRunSerializer(run).data, status=status.HTTP_201_CREATED)


class WhatIfRunView(APIView):
    permission_classes = [AdminElseNotFound]

    @extend_schema(responses={200: WhatIfRunDetailSerializer}, operation_id="whatif_retrieve")
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.whatif_run_get(user=request.user, run_id=run_id)
        return Response(WhatIfRunDetailSerializer(run).data)


class WhatIfCancelView(APIView):
    permission_classes = [AdminElseNotFound]
    conflicts = {"post": "the run is not live any more"}

    @extend_schema(request=None, responses={200: WhatIfRunSerializer}, operation_id="whatif_cancel")
    def post(self, request: Request, run_id: int) -> Response:
        run = whatif_runs.whatif_run_cancel(user=request.user, run_id=run_id)
        return Response(WhatIfRunSerializer(run).data)


class WhatIfApplyView(APIView):
    permission_classes = [AdminElseNotFound]
    conflicts = {
        "post": "the replay compared against a version no longer in force, or another version "
        "was put in force meanwhile"
    }

    @extend_schema(
        request=WhatIfApplySerializer,
        responses={201: PolicyVersionSerializer},
        operation_id="whatif_apply",
        description="Put a candidate of a finished replay in force as the next policy version, "
        "as it was replayed: its engine configuration, team weights and priority classes.",
    )
    def post(self, request: Request, run_id: int) -> Response:
        selectors.whatif_run_get(user=request.user, run_id=run_id)
        data = _validated(WhatIfApplySerializer, request.data)
        version = whatif_runs.whatif_candidate_apply(user=request.user, run_id=run_id, **data)
        return Response(PolicyVersionSerializer(version).data, status=status.HTTP_201_CREATED)


urlpatterns += [
    path("whatif", WhatIfRunListView.as_view(), name="api-whatif-runs"),
    path("whatif/<id:run_id>", WhatIfRunView.as_view(), name="api-whatif"),
    path("whatif/<id:run_id>/cancel", WhatIfCancelView.as_view(), name="api-whatif-cancel"),
    path("whatif/<id:run_id>/apply", WhatIfApplyView.as_view(), name="api-whatif-apply"),
]
