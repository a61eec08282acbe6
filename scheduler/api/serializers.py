"""Shapes for the REST API. Field names follow the policy contract (workers, gpus_per_worker, …).
Serializers validate types and shape; domain rules live in ``scheduler.services``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalogue.models import GpuModel
from core.bounds import api_number
from tenants.models import PriorityClass, Team

from ..arrays import submit_team_ids
from ..env_visibility import shown_command
from ..models import Cluster, Job, JobEvent, Node
from ..selectors import cluster_backend_error, job_placement
from .contract_schema import ElasticRangeSerializer


class ElasticSerializer(serializers.Serializer[Any]):
    min_workers = api_number(Job, "elastic_min_workers")
    max_workers = api_number(Job, "elastic_max_workers")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["max_workers"] < attrs["min_workers"]:
            raise serializers.ValidationError({"max_workers": "must be >= min_workers"})
        return attrs


class OptionalText(serializers.CharField):
    """Optional text: null means "not given" (stored empty), as for every other optional field."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, allow_blank=True, allow_null=True, default="", **kwargs)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            return True, ""
        return super().validate_empty_values(data)


class AwareDateTimeField(serializers.DateTimeField):
    """A time that states its zone. DRF reads a zoneless time in the server's zone (UTC), so a
    user in Berlin who sent local 18:00 would get a deadline two hours late without a word."""

    default_error_messages = {"naive": "must include a time zone (e.g. 2030-01-31T18:00:00Z)"}

    def enforce_timezone(self, value: datetime) -> datetime:
        if value.tzinfo is None:
            self.fail("naive")
        return super().enforce_timezone(value)


class JobSubmitSerializer(serializers.Serializer[Any]):
    """A submission. Every optional field accepts null for "not given"; numbers are bounded as
    the Job model declares (``core.bounds``)."""

    name = serializers.CharField(max_length=200)
    team = serializers.SlugField()
    image = OptionalText(max_length=300)
    command = OptionalText()
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True), required=False, allow_null=True
    )
    workers = api_number(Job, "workers")
    gpus_per_worker = api_number(Job, "gpus_per_worker")
    gpu_model = serializers.CharField(required=False, allow_null=True, default=None)
    priority_class = serializers.CharField(required=False, allow_null=True, default=None)
    preemptible = serializers.BooleanField(required=False, allow_null=True, default=None)
    checkpoint_interval_s = api_number(
        Job, "checkpoint_interval_s", required=False, allow_null=True, default=None
    )
    runtime_limit_s = api_number(
        Job, "runtime_limit_s", required=False, allow_null=True, default=None
    )
    deadline = AwareDateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="When the job must be finished (ISO 8601 with a time zone; at most 90 days "
        "ahead). The scheduler ranks it first within its class as the time runs short.",
    )
    dataset = OptionalText(max_length=200)
    dataset_version = OptionalText(max_length=100)
    checkpoint_on_advice = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Let the platform ask the job to checkpoint on the advised schedule.",
    )
    code_ref = OptionalText(
        max_length=200, help_text="The code that runs, e.g. a git commit; kept in the record."
    )
    elastic = ElasticSerializer(required=False, allow_null=True, default=None)
    routing = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Where the job may and would rather run (docs/routing.md): clusters, regions, "
        "prefer_clusters, prefer_regions, max_price_per_gpu_h, spot, comm_heavy.",
    )
    simulated_duration_s = api_number(
        Job,
        "simulated_duration_s",
        required=False,
        allow_null=True,
        default=None,
        help_text="Simulated clusters only: seconds of work the job takes when run alone.",
    )

    def to_internal_value(self, data: Any) -> Any:
        # A misspelt field (runtime_limit for runtime_limit_s) would otherwise be dropped and the
        # job submitted without it; an array's template refuses it the same way.
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            unknown = {
                key: ["not a job field"]
                for key in data
                # a form posted from a signed-in browser carries its CSRF token
                if key not in self.fields and key != "csrfmiddlewaretoken"
            }
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**unknown, **exc.detail}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class JobSerializer(serializers.ModelSerializer[Job]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    submitter: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    # Null until the job is placed when it was submitted for any GPU model.
    gpu_model: serializers.SlugRelatedField[GpuModel] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    priority_class: serializers.SlugRelatedField[PriorityClass] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    elastic = serializers.SerializerMethodField()
    why = serializers.CharField(source="why_pending", read_only=True)
    placement = serializers.SerializerMethodField()
    total_gpus = serializers.IntegerField(read_only=True)
    # Null until the job is routed to a cluster.
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    command = serializers.SerializerMethodField(
        help_text="As submitted; for a viewer of the team, with --token=... style arguments, "
        "passwords in URLs and API tokens redacted."
    )

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
            "checkpoint_on_advice",
            "runtime_limit_s",
            "deadline",
            "dataset",
            "dataset_version",
            "code_ref",
            "elastic",
            "routing",
            "cluster",
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

    @extend_schema_field(ElasticRangeSerializer(allow_null=True))
    def get_elastic(self, job: Job) -> dict[str, Any] | None:
        return job.elastic

    def get_command(self, job: Job) -> str:
        # The teams whose secrets the caller sees, read once per response (a list shows many);
        # without a request to say who asks, nobody's.
        # DRF keeps the dict its caller passed (a new one when none was); the stubs type it as a
        # read-only Mapping. A page's serializers share what was computed once there.
        context = cast(dict[str, Any], self.context)
        if "may_see" not in context:
            request = context.get("request")
            context["may_see"] = submit_team_ids(request.user) if request is not None else set()
        may_see = context["may_see"]
        return shown_command(job.command, visible=may_see is None or job.team_id in may_see)

    def get_placement(self, job: Job) -> dict[str, list[int]]:
        return job_placement(job)


class JobEventSerializer(serializers.ModelSerializer[JobEvent]):
    class Meta:
        model = JobEvent
        fields = ["time", "kind", "message", "data"]


class GpuModelSerializer(serializers.ModelSerializer[GpuModel]):
    class Meta:
        model = GpuModel
        fields = ["name", "memory_gib"]


class ClusterSerializer(serializers.ModelSerializer[Cluster]):
    backend_error = serializers.SerializerMethodField(
        help_text="Why the backend last failed; empty while it answers. Platform admins get the "
        "backend's own text; everyone else only that it failed and when, since the text may "
        "echo another team's job."
    )

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "backend_kind",
            "enabled",
            "backend_available",
            "backend_error",
            "retiring_since",
            "retired_at",
        ]

    def get_backend_error(self, cluster: Cluster) -> str:
        return cluster_backend_error(user=self.context["request"].user, cluster=cluster)


class NodeSerializer(serializers.ModelSerializer[Node]):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    gpu_model: serializers.SlugRelatedField[GpuModel] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    # Declared rather than derived from the model: the model's choices would make them an enum
    # without the blank value they mostly hold.
    resume_state = serializers.CharField(
        read_only=True,
        help_text="Only while the node is down: `draining` or `quarantined` when it comes back "
        "drained or quarantined (a drain or quarantine made before or during the outage; a "
        "release lifts it), empty when it comes back ready or is not down.",
    )
    resume_reason = serializers.CharField(
        read_only=True,
        help_text="The reason of the drain or quarantine a down node comes back with "
        "(its state_reason then); empty when resume_state is.",
    )

    cluster_hold = serializers.CharField(
        read_only=True,
        help_text="Why the cluster itself keeps new work off a node the platform has ready (a "
        "site admin's drain, an active Slurm reservation), e.g. `drained on the cluster: bios "
        "update`; empty when it does not. It ends when the cluster lets the node go; a release "
        "does not lift it.",
    )

    avoid_until = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="No new run is placed on the node before this time: the cluster kept a run "
        "placed there pending for a reason about the node (a maintenance reservation ahead), "
        "so the platform gave up on that run; null when it does not apply. In the past, it "
        "no longer applies.",
    )

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
            "resume_state",
            "resume_reason",
            "cluster_hold",
            "avoid_until",
            "health",
            "retiring_since",
            "retired_at",
            "retire_reason",
        ]
        extra_kwargs = {
            "retiring_since": {
                "help_text": "Since when an admin retires the node (drained; it becomes "
                "`retired` once nothing runs on it); null when it is not retiring or retired."
            },
            "retired_at": {
                "help_text": "When the node became `retired`: out of capacity from then on, its "
                "history kept; null unless retired."
            },
        }


class JobAttemptSerializer(serializers.Serializer[Any]):
    """One attempt as the API shows it (output only)."""

    attempt = serializers.IntegerField(read_only=True)
    nodes = serializers.ListField(child=serializers.CharField(), read_only=True)
    gpus = serializers.IntegerField(read_only=True)
    started_at = serializers.DateTimeField(allow_null=True, read_only=True)
    ended_at = serializers.DateTimeField(allow_null=True, read_only=True)
    outcome = serializers.CharField(
        read_only=True, help_text="running, preempted, requeued, succeeded, failed or cancelled"
    )
    reason = serializers.CharField(read_only=True)
    resumed_from_s = serializers.FloatField(
        read_only=True,
        help_text="Seconds of work saved by earlier attempts, where this one started.",
    )
    lost_gpu_s = serializers.FloatField(
        read_only=True,
        help_text="GPU-seconds of work lost when this attempt was stopped (since its checkpoint).",
    )


class JobLogQuerySerializer(serializers.Serializer[Any]):
    attempt = serializers.IntegerField(
        min_value=1,
        max_value=100_000,
        required=False,
        help_text="Which attempt (default: the latest).",
    )
    cursor = serializers.RegexField(
        r"^[A-Za-z0-9-]{1,64}$",
        required=False,
        help_text="The `cursor` of the previous answer: return what was written since. "
        "Omitted: the tail of the output.",
    )
    limit_bytes = serializers.IntegerField(
        min_value=1, max_value=1024 * 1024, required=False, default=64 * 1024
    )


class JobLogSerializer(serializers.Serializer[Any]):
    """A read of a job's output (output only)."""

    job = serializers.IntegerField(source="job.pk", read_only=True)
    state = serializers.CharField(source="job.state")
    attempts = serializers.IntegerField(source="job.attempts", read_only=True)
    attempt = serializers.IntegerField(
        allow_null=True, read_only=True, help_text="null: the job never started"
    )
    text = serializers.CharField(allow_blank=True)
    cursor = serializers.CharField(
        allow_null=True, help_text="Pass it back as `cursor` to read what follows."
    )
    truncated = serializers.BooleanField(help_text="Earlier output was skipped (a tail).")
    finished = serializers.BooleanField(
        help_text="The attempt has ended: once a read returns no text, there is no more."
    )
