"""REST endpoint of the success-rate view (``scheduler.outcomes``): jobs ended by outcome and
cause, and work lost, per day, for the caller's teams. Another team is a 404."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.apianswers import AnswerSerializer
from tenants.permissions import signed_in

from .. import outcomes


class OutcomeQuerySerializer(serializers.Serializer[Any]):
    days = serializers.IntegerField(
        min_value=1, max_value=outcomes.MAX_DAYS, required=False, default=30
    )
    team = serializers.SlugField(
        required=False, allow_blank=True, default="", help_text="Only this team (yours)."
    )


class LostGpuHoursSerializer(AnswerSerializer):
    """GPU-hours of work requeues threw away (since the last checkpoint), by what interrupted."""

    preemption = serializers.FloatField()
    node_failure = serializers.FloatField()
    other = serializers.FloatField()


class OutcomeDaySerializer(AnswerSerializer):
    """Jobs that ended on a UTC day, by outcome (``outcomes.OUTCOMES``), and the work lost."""

    day = serializers.DateField(allow_null=True, help_text="UTC day; null in the totals")
    finished = serializers.IntegerField(help_text="jobs that ended, however")
    failed = serializers.IntegerField(help_text="the failed_* counts added up")
    succeeded = serializers.IntegerField()
    failed_user_error = serializers.IntegerField()
    failed_node_failure = serializers.IntegerField()
    failed_preemption_limit = serializers.IntegerField()
    failed_timeout = serializers.IntegerField()
    failed_platform = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    lost_gpu_hours = LostGpuHoursSerializer()
    deadline_met = serializers.IntegerField()
    deadline_missed = serializers.IntegerField()


# Declares the answer (``OutcomeReport.as_dict()``); built with type() because one field is
# named "from", a Python keyword.
OutcomeReportSerializer = type(
    "OutcomeReportSerializer",
    (AnswerSerializer,),
    {
        "__doc__": "Jobs ended per UTC day over a window, for the caller's teams.",
        "teams": serializers.ListField(child=serializers.SlugField()),
        "from": serializers.DateField(help_text="the first day (UTC)"),
        "to": serializers.DateField(help_text="the last day (UTC): today"),
        "totals": OutcomeDaySerializer(help_text="the days added up (day: null)"),
        "success_rate": serializers.FloatField(
            allow_null=True, help_text="succeeded / (succeeded + failed); null when none ended"
        ),
        "deadline_hit_rate": serializers.FloatField(
            allow_null=True, help_text="met / (met + missed); null when no deadline was due"
        ),
        "days": OutcomeDaySerializer(many=True),
    },
)


class OutcomesView(APIView):
    """Jobs that ended per UTC day (succeeded, failed by cause: user error, node failure,
    preemption limit, timeout, platform; cancelled), the success rate, and GPU-hours of work
    lost to requeues by what interrupted them."""

    @extend_schema(parameters=[OutcomeQuerySerializer], responses={200: OutcomeReportSerializer})
    def get(self, request: Request) -> Response:
        query = OutcomeQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        report = outcomes.outcome_report(
            user=signed_in(request),
            now=timezone.now(),
            days=query.validated_data["days"],
            team=query.validated_data["team"] or None,
        )
        return Response(report.as_dict())
