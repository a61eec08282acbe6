"""REST endpoints for reproducibility records and "resubmit exactly this"
(``scheduler.reproducibility``). Another team's job is a 404, as everywhere."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from core.apianswers import AnswerSerializer
from tenants.permissions import signed_in

from .. import reproducibility, selectors
from .contract_schema import ElasticRangeSerializer, EngineConfigSerializer
from .serializers import JobSerializer

# The record serializers below declare the stored JSON (``reproducibility.record_build``) in the
# OpenAPI document; they shape nothing. A record is never rewritten, so a field added to the
# format later is missing from older records: those are declared not required.


def _env() -> serializers.DictField:
    return serializers.DictField(
        child=serializers.CharField(allow_blank=True),
        help_text="variable -> value; passwords, tokens and keys redacted; every value hidden from "
        "the team's viewers",
    )


class RecordImageSerializer(AnswerSerializer):
    reference = serializers.CharField(allow_blank=True)
    digest = serializers.CharField(allow_null=True, help_text="null: not resolved")
    resolved_by = serializers.CharField(
        allow_null=True, help_text="reference (pinned in it), or the backend kind that resolved it"
    )
    note = serializers.CharField(allow_blank=True, help_text="why no digest, when none")


class RecordDatasetSerializer(AnswerSerializer):
    name = serializers.CharField(allow_blank=True)
    version = serializers.CharField(allow_blank=True)


class RecordClusterSerializer(AnswerSerializer):
    name = serializers.CharField(allow_blank=True)
    backend = serializers.CharField(allow_blank=True)


class RecordPlacementSerializer(AnswerSerializer):
    node = serializers.CharField()
    gpu_indices = serializers.ListField(child=serializers.IntegerField())
    gpu_model = serializers.CharField(allow_blank=True)


class RecordPolicySerializer(AnswerSerializer):
    version = serializers.IntegerField(allow_null=True, help_text="the policy version in force")
    sha256 = serializers.CharField(help_text="of the engine configuration's canonical JSON")
    config = EngineConfigSerializer()


class RecordResubmitSerializer(AnswerSerializer):
    """The submission that runs the attempt again (``POST .../resubmit/``)."""

    name = serializers.CharField()
    team = serializers.CharField()
    image = serializers.CharField(allow_blank=True)
    command = serializers.CharField(allow_blank=True)
    env = _env()
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()
    gpu_model = serializers.CharField(allow_null=True)
    priority_class = serializers.CharField()
    preemptible = serializers.BooleanField()
    checkpoint_interval_s = serializers.IntegerField(allow_null=True)
    checkpoint_on_advice = serializers.BooleanField(required=False)
    runtime_limit_s = serializers.IntegerField(allow_null=True)
    deadline = serializers.DateTimeField(allow_null=True)
    dataset = serializers.CharField(allow_blank=True)
    dataset_version = serializers.CharField(allow_blank=True)
    code_ref = serializers.CharField(allow_blank=True)
    elastic = ElasticRangeSerializer(allow_null=True)
    routing = serializers.JSONField(
        required=False, allow_null=True, help_text="as submitted (docs/routing.md)"
    )
    simulated_duration_s = serializers.FloatField(allow_null=True)


class AttemptRecordSerializer(AnswerSerializer):
    """What exactly ran in one attempt (format ``gpuplatform.attempt-record/v1``)."""

    format = serializers.CharField()
    job = serializers.IntegerField()
    attempt = serializers.IntegerField()
    recorded_at = serializers.DateTimeField()
    team = serializers.CharField()
    submitter = serializers.CharField()
    image = RecordImageSerializer()
    command = serializers.CharField(allow_blank=True)
    env = _env()
    code_ref = serializers.CharField(allow_blank=True)
    dataset = RecordDatasetSerializer()
    cluster = RecordClusterSerializer()
    backend_ref = serializers.CharField(allow_blank=True)
    backend_account = serializers.CharField(allow_blank=True, required=False)
    runtime = serializers.DictField(help_text="what the backend said of the run (its own keys)")
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()
    placement = RecordPlacementSerializer(many=True)
    gpu_models = serializers.ListField(child=serializers.CharField())
    policy = RecordPolicySerializer()
    resubmit = RecordResubmitSerializer()


class JobRecordsSerializer(AnswerSerializer):
    job = serializers.IntegerField()
    records = AttemptRecordSerializer(many=True, help_text="first attempt first")


class ResubmitSerializer(serializers.Serializer[Any]):
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

    @extend_schema(responses={200: JobRecordsSerializer})
    def get(self, request: Request, job_id: int) -> Response:
        records = reproducibility.attempt_records(user=request.user, job_id=job_id)
        shown = [reproducibility.record_shown(user=request.user, record=r) for r in records]
        return Response({"job": job_id, "records": shown})


class JobRecordView(APIView):
    """One attempt's reproducibility record, as exported (JSON); env values hidden from the
    team's viewers."""

    # Both record routes would otherwise get the operation id api_v1_jobs_records_retrieve.
    @extend_schema(
        operation_id="api_v1_jobs_record_retrieve", responses={200: AttemptRecordSerializer}
    )
    def get(self, request: Request, job_id: int, attempt: int) -> Response:
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

    conflicts = {"post": "the attempt's record lacks its submission (a record edited by hand)"}

    def get_throttles(self) -> list[BaseThrottle]:
        from tenants.throttles import job_submit_throttles

        return job_submit_throttles()

    @extend_schema(request=ResubmitSerializer, responses={201: ResubmittedJobSerializer})
    def post(self, request: Request, job_id: int) -> Response:
        # Another team's job, or none, is a 404 whatever the body.
        selectors.job_get(user=request.user, job_id=job_id)
        body = ResubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        resubmission = reproducibility.job_resubmit(
            user=signed_in(request), job_id=job_id, attempt=body.validated_data["attempt"]
        )
        job = resubmission.job
        # What JobSerializer reads (a list view's prefetch sets live_allocations) and ours.
        job.live_allocations = []  # type: ignore[attr-defined]
        job.resubmit_notes = list(resubmission.notes)  # type: ignore[attr-defined]
        return Response(
            # The caller just submitted it to the team: they see its command.
            ResubmittedJobSerializer(job, context={"may_see": None}).data,
            status=status.HTTP_201_CREATED,
        )
