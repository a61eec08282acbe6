"""REST endpoint of the success-rate view (``scheduler.outcomes``): jobs ended by outcome and
cause, and work lost, per day, for the caller's teams. Another team is a 404."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import outcomes


class OutcomeQuerySerializer(serializers.Serializer):
    days = serializers.IntegerField(
        min_value=1, max_value=outcomes.MAX_DAYS, required=False, default=30
    )
    team = serializers.SlugField(
        required=False, allow_blank=True, default="", help_text="Only this team (yours)."
    )


class OutcomesView(APIView):
    """Jobs that ended per UTC day (succeeded, failed by cause: user error, node failure,
    preemption limit, timeout, platform; cancelled), the success rate, and GPU-hours of work
    lost to requeues by what interrupted them."""

    @extend_schema(parameters=[OutcomeQuerySerializer], responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        query = OutcomeQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        report = outcomes.outcome_report(
            user=request.user,
            now=timezone.now(),
            days=query.validated_data["days"],
            team=query.validated_data["team"] or None,
        )
        return Response(report.as_dict())
