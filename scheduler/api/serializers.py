"""Shapes for the REST API. Field names follow the policy contract (workers, gpus_per_worker, …).
Serializers validate types and shape; domain rules live in ``scheduler.services``."""

from __future__ import annotations

from rest_framework import serializers

from ..models import Cluster, GpuModel, Job, JobEvent, Node
from ..selectors import job_placement


class ElasticSerializer(serializers.Serializer):
    min_workers = serializers.IntegerField(min_value=1)
    max_workers = serializers.IntegerField(min_value=1)

    def validate(self, attrs):
        if attrs["max_workers"] < attrs["min_workers"]:
            raise serializers.ValidationError({"max_workers": "must be >= min_workers"})
        return attrs


class JobSubmitSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    team = serializers.SlugField()
    image = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    command = serializers.CharField(required=False, allow_blank=True, default="")
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    workers = serializers.IntegerField(min_value=1, max_value=4096)
    gpus_per_worker = serializers.IntegerField(min_value=1, max_value=64)
    gpu_model = serializers.CharField(required=False, allow_null=True, default=None)
    priority_class = serializers.CharField(required=False, allow_null=True, default=None)
    preemptible = serializers.BooleanField(required=False, allow_null=True, default=None)
    checkpoint_interval_s = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, default=None
    )
    runtime_limit_s = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, default=None
    )
    dataset = serializers.CharField(required=False, allow_blank=True, default="")
    elastic = ElasticSerializer(required=False, allow_null=True, default=None)
    simulated_duration_s = serializers.FloatField(
        min_value=1,
        required=False,
        allow_null=True,
        default=None,
        help_text="Simulated clusters only: seconds of work the job takes when run alone.",
    )


class JobSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    submitter = serializers.SlugRelatedField(slug_field="username", read_only=True)
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True)
    priority_class = serializers.SlugRelatedField(slug_field="name", read_only=True)
    elastic = serializers.SerializerMethodField()
    why = serializers.CharField(source="why_pending", read_only=True)
    placement = serializers.SerializerMethodField()
    total_gpus = serializers.IntegerField(read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "team",
            "submitter",
            "image",
            "command",
            "workers",
            "gpus_per_worker",
            "total_gpus",
            "gpu_model",
            "priority_class",
            "preemptible",
            "checkpoint_interval_s",
            "runtime_limit_s",
            "dataset",
            "elastic",
            "state",
            "why",
            "estimated_start",
            "submitted_at",
            "started_at",
            "finished_at",
            "attempts",
            "last_checkpoint_at",
            "placement",
            "exit_code",
        ]
        read_only_fields = fields

    def get_elastic(self, job: Job) -> dict | None:
        return job.elastic

    def get_placement(self, job: Job) -> dict[str, list[int]]:
        return job_placement(job)


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["time", "kind", "message", "data"]


class GpuModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["name", "memory_gib"]


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "backend_kind", "enabled", "backend_available", "backend_error"]


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "cluster",
            "name",
            "gpu_model",
            "gpu_count",
            "zone",
            "rack",
            "nvlink_domain",
            "fabric",
            "spot",
            "state",
            "state_reason",
            "health",
        ]
