"""REST endpoints of billing: the price book (platform-wide and per-cluster rates), budgets,
budget alerts, statements (with close, CSV export and adjustments) and the cost dashboard. Views translate HTTP into selector and service calls; every queryset
comes from a selector scoped to the caller's teams, so another team's statement is a 404 and a
``team`` in a body is looked up among the caller's teams only."""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal
from typing import Any, cast

import django_filters
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from catalogue.models import GpuModel
from core.apianswers import AnswerSerializer
from core.bounds import api_number
from core.errors import DomainError, NotFound
from core.ids import parse_id
from scheduler.models import Cluster
from tenants.models import Team
from tenants.permissions import visible_teams

from . import calc, dashboards, selectors, services, statements
from .models import (
    Adjustment,
    Budget,
    BudgetAlert,
    Capacity,
    PriceRate,
    Statement,
    StatementMode,
)


def _context(serializer: serializers.BaseSerializer[Any]) -> dict[str, Any]:
    """The serializer's context, where a page's serializers share what they computed once.
    DRF keeps the dict its caller passed (a new one when none was); the stubs type it as a
    read-only Mapping."""
    return cast(dict[str, Any], serializer.context)


def _many(serializer: serializers.BaseSerializer[Any]) -> list[dict[str, Any]]:
    """The data of a ``many=True`` serializer: a list of dicts (DRF's ReturnList). The stubs
    cannot tell ``many=True`` apart and type it as one object's dict."""
    return cast(list[dict[str, Any]], serializer.data)


class PriceRateSerializer(serializers.ModelSerializer[PriceRate]):
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    capacity = serializers.ChoiceField(choices=Capacity.choices)
    rate_per_gpu_hour = api_number(PriceRate, "rate_per_gpu_hour")
    # A cluster's name: the rate overrides the platform-wide one there. Null or absent: the
    # platform-wide rate. An unknown name is a 400 on this field.
    cluster = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Cluster.objects.all(),
        required=False,
        allow_null=True,
        default=None,
    )

    class Meta:
        model = PriceRate
        fields = [
            "id",
            "gpu_model",
            "capacity",
            "effective_from",
            "rate_per_gpu_hour",
            "note",
            "cluster",
        ]


class PriceRateViewSet(
    viewsets.GenericViewSet[PriceRate], mixins.ListModelMixin, mixins.RetrieveModelMixin
):
    """The price book: USD per GPU-hour by GPU model and capacity type, with effective dates,
    platform-wide (``cluster`` null) or for one cluster, where it overrides the platform-wide
    rate. Everyone signed in reads it; platform admins add rates (from now on, never
    backdated)."""

    serializer_class = PriceRateSerializer
    filterset_fields = ["capacity"]

    def get_queryset(self) -> QuerySet[PriceRate]:
        return selectors.price_list()

    def create(self, request: Request) -> Response:
        incoming = PriceRateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        rate = services.price_set(
            user=request.user,
            gpu_model=data["gpu_model"],
            capacity=data["capacity"],
            rate_per_gpu_hour=data["rate_per_gpu_hour"],
            effective_from=data["effective_from"],
            cluster=data.get("cluster"),
            note=data.get("note", ""),
        )
        return Response(PriceRateSerializer(rate).data, status=status.HTTP_201_CREATED)


@extend_schema_field({"type": "string", "pattern": r"^\d{4}-\d{2}$", "example": "2026-12"})
class MonthField(serializers.Field[date, object, str, Any]):
    """A month as ``"YYYY-MM"`` on the wire, the month's first day inside."""

    def to_representation(self, value: date) -> str:
        return f"{value:%Y-%m}"

    def to_internal_value(self, data: object) -> date:
        try:
            return calc.parse_month(str(data)[:20])
        except ValueError as exc:
            raise serializers.ValidationError(
                f"{exc}" if "from" in str(exc) else "must be a month like 2026-12"
            ) from None


class BudgetSerializer(serializers.ModelSerializer[Budget]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    month = MonthField()
    amount = api_number(Budget, "amount")
    spend = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = ["id", "team", "month", "amount", "hard_stop", "spend"]

    def get_spend(self, budget: Budget) -> str:
        # One query per distinct month on the page, not one per budget.
        by_month: dict[date, dict[int, Decimal]] = _context(self).setdefault("spend_by_month", {})
        if budget.month not in by_month:
            by_month[budget.month] = services.team_spends(month=budget.month)
        spent = by_month[budget.month].get(budget.team_id, Decimal(0))
        return str(spent.quantize(calc.CENT))


class BudgetWriteSerializer(serializers.Serializer[Any]):
    team = serializers.SlugField()
    month = MonthField()
    amount = api_number(Budget, "amount")
    hard_stop = serializers.BooleanField(default=False)


class BudgetFilter(django_filters.FilterSet):
    # django-filter's own boolean filter reads "maybe" as "not given" and lists every budget
    hard_stop = django_filters.CharFilter(method="filter_hard_stop", help_text="true or false")

    class Meta:
        model = Budget
        fields = ["hard_stop"]

    def filter_hard_stop(
        self, queryset: QuerySet[Budget], _name: str, value: str
    ) -> QuerySet[Budget]:
        answer = {"true": True, "1": True, "false": False, "0": False}.get(value.strip().lower())
        if answer is None:
            raise serializers.ValidationError({"hard_stop": ["must be true or false"]})
        return queryset.filter(hard_stop=answer)


class BudgetViewSet(
    viewsets.GenericViewSet[Budget], mixins.ListModelMixin, mixins.RetrieveModelMixin
):
    """Budgets of the caller's teams. POST sets (creates or changes) a team's budget for a month;
    team owners/admins and platform admins only."""

    serializer_class = BudgetSerializer
    filterset_class = BudgetFilter

    def get_queryset(self) -> QuerySet[Budget]:
        return selectors.budget_list(user=self.request.user).order_by("-month", "team__slug")

    @extend_schema(request=BudgetWriteSerializer, responses={201: BudgetSerializer})
    def create(self, request: Request) -> Response:
        incoming = BudgetWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        team = visible_teams(request.user).filter(slug=data["team"]).first()
        if team is None:
            raise DomainError(f"you are not a member of a team '{data['team']}'", field="team")
        budget = services.budget_set(
            user=request.user,
            team=team,
            month=data["month"],
            amount=data["amount"],
            hard_stop=data["hard_stop"],
        )
        return Response(BudgetSerializer(budget).data, status=status.HTTP_201_CREATED)


class BudgetAlertSerializer(serializers.ModelSerializer[BudgetAlert]):
    team = serializers.CharField(source="budget.team.slug")
    month = MonthField(source="budget.month")
    budget = serializers.DecimalField(
        source="budget.amount", max_digits=14, decimal_places=2, read_only=True
    )

    class Meta:
        model = BudgetAlert
        fields = ["id", "team", "month", "threshold", "budget", "spend", "fired_at"]
        read_only_fields = fields


class BudgetAlertViewSet(viewsets.ReadOnlyModelViewSet[BudgetAlert]):
    """Budget alert events (50 / 80 / 100 %) of the caller's teams, newest first."""

    serializer_class = BudgetAlertSerializer

    def get_queryset(self) -> QuerySet[BudgetAlert]:
        return selectors.alert_list(user=self.request.user).order_by("-fired_at", "-id")


class StatementLineSerializer(serializers.Serializer[Any]):
    team = serializers.CharField(read_only=True)
    gpu_model = serializers.CharField(read_only=True)
    capacity = serializers.CharField(read_only=True)
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=4, read_only=True)
    cost = serializers.DecimalField(max_digits=14, decimal_places=2, read_only=True)
    cluster = serializers.CharField(read_only=True, help_text='the cluster\'s name; "" if unknown')
    unpriced_gpu_hours = serializers.DecimalField(
        max_digits=16,
        decimal_places=4,
        read_only=True,
        help_text="the part of gpu_hours that had no price in the price book (billed at $0)",
    )


class StatementEgressLineSerializer(serializers.Serializer[Any]):
    team = serializers.CharField(read_only=True)
    from_cluster = serializers.CharField(read_only=True)
    to_cluster = serializers.CharField(read_only=True)
    charges = serializers.IntegerField(read_only=True, help_text="job attempts charged")
    gb = serializers.DecimalField(max_digits=16, decimal_places=3, read_only=True)
    cost = serializers.DecimalField(max_digits=14, decimal_places=2, read_only=True)


class AdjustmentSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(read_only=True)
    amount = api_number(Adjustment, "amount")
    reason = serializers.CharField(max_length=300)
    created_at = serializers.DateTimeField(read_only=True)


class StatementSerializer(serializers.ModelSerializer[Statement]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    month = MonthField()

    class Meta:
        model = Statement
        fields = ["id", "team", "month", "status", "mode", "total", "closed_at"]
        read_only_fields = fields


# How the computed amounts are documented: strings, as every DecimalField of the API sends them
# (DRF's COERCE_DECIMAL_TO_STRING), not the JSON numbers OpenApiTypes.DECIMAL would declare.
USD = serializers.DecimalField(max_digits=14, decimal_places=2, read_only=True)
HOURS = serializers.DecimalField(max_digits=16, decimal_places=4, read_only=True)


class StatementDetailSerializer(StatementSerializer):
    """A statement with its lines. ``computed_total`` = ``gpu_total`` + ``egress_total``: the GPU
    lines (``lines``) plus the egress lines (``egress_lines``), each to the cent."""

    lines = serializers.SerializerMethodField()
    egress_lines = serializers.SerializerMethodField()
    adjustments = serializers.SerializerMethodField()
    computed_total = serializers.SerializerMethodField()
    gpu_total = serializers.SerializerMethodField()
    egress_total = serializers.SerializerMethodField()
    adjusted_total = serializers.SerializerMethodField()
    unpriced_gpu_hours = serializers.SerializerMethodField()

    class Meta(StatementSerializer.Meta):
        fields = StatementSerializer.Meta.fields + [
            "lines",
            "egress_lines",
            "adjustments",
            "computed_total",
            "gpu_total",
            "egress_total",
            "adjusted_total",
            "unpriced_gpu_hours",
        ]

    def _view(self, statement: Statement) -> selectors.StatementView:
        cache: dict[int, selectors.StatementView] = _context(self).setdefault("views", {})
        if statement.pk not in cache:
            cache[statement.pk] = selectors.statement_view(statement=statement)
        return cache[statement.pk]

    @extend_schema_field(StatementLineSerializer(many=True))
    def get_lines(self, statement: Statement) -> list[dict[str, Any]]:
        return _many(StatementLineSerializer(self._view(statement).lines, many=True))

    @extend_schema_field(StatementEgressLineSerializer(many=True))
    def get_egress_lines(self, statement: Statement) -> list[dict[str, Any]]:
        return _many(StatementEgressLineSerializer(self._view(statement).egress_lines, many=True))

    @extend_schema_field(USD)
    def get_gpu_total(self, statement: Statement) -> str:
        return str(self._view(statement).gpu_total)

    @extend_schema_field(USD)
    def get_egress_total(self, statement: Statement) -> str:
        return str(self._view(statement).egress_total)

    @extend_schema_field(AdjustmentSerializer(many=True))
    def get_adjustments(self, statement: Statement) -> list[dict[str, Any]]:
        return _many(AdjustmentSerializer(self._view(statement).adjustments, many=True))

    @extend_schema_field(USD)
    def get_computed_total(self, statement: Statement) -> str:
        return str(self._view(statement).total)

    @extend_schema_field(USD)
    def get_adjusted_total(self, statement: Statement) -> str:
        return str(self._view(statement).adjusted_total)

    @extend_schema_field(HOURS)
    def get_unpriced_gpu_hours(self, statement: Statement) -> str:
        return str(self._view(statement).unpriced_gpu_hours)


class StatementCloseSerializer(serializers.Serializer[Any]):
    mode = serializers.ChoiceField(choices=StatementMode.choices, required=False)


class StatementViewSet(
    viewsets.GenericViewSet[Statement], mixins.ListModelMixin, mixins.RetrieveModelMixin
):
    """Monthly statements of the caller's teams (each rolled up over its sub-teams). Another
    team's statement is a 404. Closing freezes it; corrections are adjustments."""

    # When an action answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {
        "close": "the statement is closed already, its month is not over or not all metered, "
        "or a chargeback would charge the same usage twice"
    }
    serializer_class = StatementSerializer
    filterset_fields = ["status", "mode"]

    def get_queryset(self) -> QuerySet[Statement]:
        return selectors.statement_list(
            user=self.request.user, team_slug=self.request.query_params.get("team") or None
        )

    def get_serializer_class(self) -> type[StatementSerializer]:
        return StatementDetailSerializer if self.action == "retrieve" else StatementSerializer

    def get_object(self) -> Statement:
        pk = parse_id(self.kwargs.get("pk"))
        if pk is None:
            raise NotFound("no such statement", field="id")
        return selectors.statement_get(user=self.request.user, statement_id=pk)

    @extend_schema(request=StatementCloseSerializer, responses={200: StatementDetailSerializer})
    @action(detail=True, methods=["post"])
    def close(self, request: Request, pk: str | None = None) -> Response:
        statement = self.get_object()
        incoming = StatementCloseSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        closed = statements.statement_close(
            user=request.user, statement_id=statement.pk, mode=incoming.validated_data.get("mode")
        )
        return Response(StatementDetailSerializer(closed).data)

    @extend_schema(request=AdjustmentSerializer, responses={201: AdjustmentSerializer})
    @action(detail=True, methods=["post"])
    def adjustments(self, request: Request, pk: str | None = None) -> Response:
        statement = self.get_object()
        incoming = AdjustmentSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        adjustment = statements.adjustment_add(
            user=request.user,
            statement_id=statement.pk,
            amount=incoming.validated_data["amount"],
            reason=incoming.validated_data["reason"],
        )
        return Response(AdjustmentSerializer(adjustment).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        responses={
            (200, "text/csv"): OpenApiResponse(
                response=OpenApiTypes.STR, description="statement as CSV"
            )
        }
    )
    @action(detail=True, methods=["get"])
    def csv(self, request: Request, pk: str | None = None) -> HttpResponse:
        statement = self.get_object()
        buffer = io.StringIO()
        csv.writer(buffer).writerows(
            selectors.statement_csv_rows(view=selectors.statement_view(statement=statement))
        )
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="statement-{statement.team.slug}-{statement.month:%Y-%m}.csv"'
        )
        return response


class CostQuerySerializer(serializers.Serializer[Any]):
    team = serializers.SlugField(required=False, help_text="team slug; omitted: all (admins)")
    month = MonthField(required=False, help_text="YYYY-MM; default: the current month")


@extend_schema_field({"type": "string", "format": "decimal", "example": "12.50"})
class DecimalStringField(serializers.CharField):
    """A decimal sent as a string, of whatever precision the figure has (declaration only)."""


# The cost dashboard's answer, declared (the view writes the JSON itself). Money is a decimal
# string, as every decimal of this API; hours and GB are JSON numbers rounded to 3 places.
class CostAlertSerializer(AnswerSerializer):
    threshold = serializers.IntegerField(help_text="percent of the budget")
    fired_at = serializers.DateTimeField()


class CostDaySerializer(AnswerSerializer):
    day = serializers.DateField()
    gpu_model = serializers.CharField()
    capacity = serializers.CharField()
    gpu_hours = serializers.FloatField()
    cost = DecimalStringField()


class CostTopJobSerializer(AnswerSerializer):
    job = serializers.IntegerField(
        allow_null=True, help_text="null: a sub-team's job the caller is not a member of"
    )
    name = serializers.CharField(allow_blank=True)
    team = serializers.CharField()
    user = serializers.CharField(allow_blank=True)
    gpu_hours = serializers.FloatField()
    cost = DecimalStringField()


class CostByUserSerializer(AnswerSerializer):
    user = serializers.CharField(allow_blank=True)
    gpu_hours = serializers.FloatField()
    cost = DecimalStringField()


class CostByClusterSerializer(AnswerSerializer):
    cluster = serializers.CharField(help_text='"(unknown)": metered before clusters were kept')
    gpu_hours = serializers.FloatField()
    cost = DecimalStringField()


class CostEgressChargeSerializer(AnswerSerializer):
    job = serializers.IntegerField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    team = serializers.CharField()
    dataset = serializers.CharField()
    from_cluster = serializers.CharField()
    to_cluster = serializers.CharField()
    size_gb = serializers.FloatField()
    price_per_gb = DecimalStringField()
    cost = DecimalStringField()
    time = serializers.DateTimeField()


class CostEgressSerializer(AnswerSerializer):
    cost = DecimalStringField()
    gb = serializers.FloatField()
    charges = CostEgressChargeSerializer(many=True)


class CostLostWorkSerializer(AnswerSerializer):
    gpu_hours = serializers.FloatField()
    cost = DecimalStringField()


class CostIdleSerializer(AnswerSerializer):
    cost = DecimalStringField()
    gpu_hours = serializers.FloatField()
    telemetry_coverage = serializers.FloatField(help_text="share of GPU time with telemetry")


class CostTeamRowSerializer(AnswerSerializer):
    team = serializers.SlugField()
    # DRF's metaclass moves declared fields out of the class, so this does not replace
    # Field.parent at run time; mypy sees only the class body.
    parent = serializers.SlugField(allow_null=True)  # type: ignore[assignment]
    own_spend = DecimalStringField()
    own_egress = DecimalStringField()
    spend = DecimalStringField(help_text="GPU time + egress, sub-teams included")
    gpu_spend = DecimalStringField()
    egress = DecimalStringField()
    gpu_hours = serializers.FloatField()
    budget = DecimalStringField(allow_null=True)
    forecast = DecimalStringField()
    idle_cost = DecimalStringField(allow_null=True, help_text="null: no telemetry")
    lost_cost = DecimalStringField()


class CostDashboardSerializer(AnswerSerializer):
    """One team's month (rolled up over its sub-teams), or every team's for platform admins."""

    team = serializers.SlugField(allow_null=True, help_text="null: every team (admins)")
    month = MonthField()
    spend = DecimalStringField(help_text="GPU time + egress: what the budget counts")
    gpu_spend = DecimalStringField()
    forecast = DecimalStringField()
    budget = DecimalStringField(allow_null=True, help_text="null: no budget")
    hard_stop = serializers.BooleanField()
    alerts = CostAlertSerializer(many=True)
    gpu_hours = serializers.FloatField()
    unpriced_gpu_hours = serializers.FloatField()
    daily = CostDaySerializer(many=True)
    top_jobs = CostTopJobSerializer(many=True)
    by_user = CostByUserSerializer(many=True)
    by_cluster = CostByClusterSerializer(many=True)
    egress = CostEgressSerializer()
    lost_work = CostLostWorkSerializer()
    idle = CostIdleSerializer(allow_null=True, help_text="null: no telemetry (unknown, not 0)")
    teams = CostTeamRowSerializer(
        many=True, required=False, help_text="every team's row: admins, without `team`"
    )


class CostViewSet(viewsets.ViewSet):
    """The cost dashboard as JSON: one of the caller's teams (rolled up over its sub-teams), or
    every team for platform admins when ``team`` is omitted. Another team is a 404."""

    # Its ``list`` answers one object, not an array (gpuplatform.apischema).
    answers_one_object = True

    @extend_schema(parameters=[CostQuerySerializer], responses={200: CostDashboardSerializer})
    def list(self, request: Request) -> Response:
        from django.utils import timezone

        query = CostQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        now = timezone.now()
        month = query.validated_data.get("month") or calc.month_start(now)
        if slug := query.validated_data.get("team"):
            d = dashboards.team_cost_dashboard(
                user=request.user, team_slug=slug, month=month, now=now
            )
            teams = None
        else:
            overview = dashboards.admin_cost_overview(user=request.user, month=month, now=now)
            d = overview.dashboard
            teams = [
                {
                    "team": r.slug,
                    "parent": r.parent,
                    # Spend is GPU time + egress; the parts are beside it.
                    "own_spend": str(r.own_spend),
                    "own_egress": str(r.own_egress),
                    "spend": str(r.spend),
                    "gpu_spend": str(r.gpu_spend),
                    "egress": str(r.egress),
                    "gpu_hours": round(r.gpu_hours, 3),
                    "budget": None if r.budget is None else str(r.budget),
                    "forecast": str(r.forecast),
                    "idle_cost": None if r.idle_cost is None else str(r.idle_cost),
                    "lost_cost": str(r.lost_cost),
                }
                for r in overview.rows
            ]
        body = {
            "team": d.team_slug,
            "month": f"{month:%Y-%m}",
            # The team's spend is GPU time + egress ("gpu_spend" + "egress"."cost"): what the
            # budget, its alerts, the hard stop and the forecast count.
            "spend": str(d.budget.spend),
            "gpu_spend": str(d.budget.gpu_spend),
            "forecast": str(d.budget.forecast),
            "budget": None if d.budget.amount is None else str(d.budget.amount),
            "hard_stop": d.budget.hard_stop,
            "alerts": [{"threshold": t, "fired_at": at.isoformat()} for t, at in d.budget.alerts],
            "gpu_hours": round(d.gpu_hours, 3),
            "unpriced_gpu_hours": round(d.unpriced_gpu_hours, 3),
            "daily": [
                {
                    "day": x.day.isoformat(),
                    "gpu_model": x.gpu_model,
                    "capacity": x.capacity,
                    "gpu_hours": round(x.gpu_hours, 3),
                    "cost": str(x.cost.quantize(calc.CENT)),
                }
                for x in d.days
            ],
            "top_jobs": [
                {
                    "job": j.job_id,
                    "name": j.name,
                    "team": j.team,
                    "user": j.user,
                    "gpu_hours": round(j.gpu_hours, 3),
                    "cost": str(j.cost.quantize(calc.CENT)),
                }
                for j in d.top_jobs
            ],
            "by_user": [
                {"user": u, "gpu_hours": round(h, 3), "cost": str(c.quantize(calc.CENT))}
                for u, h, c in d.by_user
            ],
            # The GPU spend split by cluster ("(unknown)": usage metered before clusters were
            # recorded whose allocation was gone); the costs add up to "gpu_spend".
            "by_cluster": [
                {
                    "cluster": c.cluster,
                    "gpu_hours": round(c.gpu_hours, 3),
                    "cost": str(c.cost.quantize(calc.CENT)),
                }
                for c in d.by_cluster()
            ],
            # Data movement to clusters without a copy of a job's dataset (part of "spend").
            "egress": {
                "cost": str(d.budget.egress),
                "gb": round(d.egress_gb, 3),
                "charges": [
                    {
                        "job": e.job_id,
                        "attempt": e.attempt,
                        "team": e.team,
                        "dataset": e.dataset,
                        "from_cluster": e.from_cluster,
                        "to_cluster": e.to_cluster,
                        "size_gb": e.size_gb,
                        "price_per_gb": str(e.price_per_gb),
                        "cost": str(e.cost.quantize(calc.CENT)),
                        "time": e.time.isoformat(),
                    }
                    for e in d.egress
                ],
            },
            "lost_work": {
                "gpu_hours": round(d.lost_gpu_hours, 3),
                "cost": str(d.lost_cost.quantize(calc.CENT)),
            },
            # null = no telemetry (unknown), never reported as zero
            "idle": (
                {
                    "cost": str(d.idle.idle_cost),
                    "gpu_hours": round(d.idle.idle_gpu_hours, 3),
                    "telemetry_coverage": round(d.idle.coverage, 4),
                }
                if d.idle.has_telemetry
                else None
            ),
        }
        if teams is not None:
            body["teams"] = teams
        return Response(body)
