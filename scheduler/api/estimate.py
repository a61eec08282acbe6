"""``POST /api/v1/jobs/estimate/``: when a job would start and finish if it were submitted now,
and whether it would make its deadline (``scheduler.feasibility``), for the API and ``gpuctl``
as the submit form's "Estimate finish" is for the portal. Same checks and 400s as a submission;
nothing is written."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from tenants.permissions import signed_in

from ..feasibility import job_feasibility
from ..services import JobRequest
from .serializers import JobSubmitSerializer


class JobEstimateSerializer(serializers.Serializer[Any]):
    starts_now = serializers.BooleanField()
    start = serializers.DateTimeField(allow_null=True, help_text="null: no start estimate yet")
    finish = serializers.DateTimeField(allow_null=True)
    runtime_s = serializers.FloatField(
        read_only=True, help_text="the run time the scheduler plans with"
    )
    runtime_source = serializers.CharField(
        help_text="your runtime limit, similar past jobs, or the default"
    )
    deadline = serializers.DateTimeField(allow_null=True)
    meets_deadline = serializers.BooleanField(
        allow_null=True, help_text="null: no deadline, or no finish estimate"
    )


class JobEstimateView(APIView):
    def get_throttles(self) -> list[BaseThrottle]:
        # One estimate costs a scheduling cycle without its writes: limited like a submission.
        from tenants.throttles import job_submit_throttles

        return job_submit_throttles()

    @extend_schema(request=JobSubmitSerializer, responses={200: JobEstimateSerializer})
    def post(self, request: Request) -> Response:
        incoming = JobSubmitSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        estimate = job_feasibility(
            user=signed_in(request),
            request=JobRequest(**incoming.validated_data),
            now=timezone.now(),
        )
        return Response(JobEstimateSerializer(estimate).data)
