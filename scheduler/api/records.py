"""REST endpoints for reproducibility records and "resubmit exactly this"
(``scheduler.reproducibility``). Another team's job is a 404, as everywhere."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import reproducibility
from .serializers import JobSerializer


class ResubmitSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(
        min_value=1,
        max_value=100_000,
        required=False,
        allow_null=True,
        default=None,
        help_text="Which attempt to run again (default: the latest that has a record).",
    )


class JobRecordsView(APIView):
    """Every attempt's reproducibility record of a job, first attempt first."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, job_id: int):
        records = reproducibility.attempt_records(user=request.user, job_id=job_id)
        shown = [reproducibility.record_shown(user=request.user, record=r) for r in records]
        return Response({"job": job_id, "records": shown})


class JobRecordView(APIView):
    """One attempt's reproducibility record, as exported (JSON); env values hidden from the
    team's viewers."""

    # Both record routes would otherwise get the operation id api_v1_jobs_records_retrieve.
    @extend_schema(operation_id="api_v1_jobs_record_retrieve", responses={200: OpenApiTypes.OBJECT})
    def get(self, request, job_id: int, attempt: int):
        record = reproducibility.attempt_record_get(
            user=request.user, job_id=job_id, attempt=attempt
        )
        return Response(reproducibility.record_shown(user=request.user, record=record))


class ResubmittedJobSerializer(JobSerializer):
    """The new job, and what of the original's submission it does not carry."""

    notes = serializers.ListField(
        child=serializers.CharField(),
        source="resubmit_notes",
        read_only=True,
        help_text="What of the original's submission the new job does not carry and why, e.g. "
        "a deadline that has passed (the new job has none); empty when it carries everything.",
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "notes"]
        read_only_fields = fields


class JobResubmitView(APIView):
    """Submit a new job that runs exactly what an attempt of this job ran."""

    def get_throttles(self):
        from tenants.throttles import job_submit_throttles

        return job_submit_throttles()

    @extend_schema(request=ResubmitSerializer, responses={201: ResubmittedJobSerializer})
    def post(self, request, job_id: int):
        body = ResubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        resubmission = reproducibility.job_resubmit(
            user=request.user, job_id=job_id, attempt=body.validated_data["attempt"]
        )
        job = resubmission.job
        job.live_allocations = []
        job.resubmit_notes = list(resubmission.notes)
        return Response(
            # The caller just submitted it to the team: they see its command.
            ResubmittedJobSerializer(job, context={"may_see": None}).data,
            status=status.HTTP_201_CREATED,
        )
