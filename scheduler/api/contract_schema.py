"""Serializers that declare, in the OpenAPI document, the JSON of the policy contract
(/work/shared/contracts/policy-snapshot.md, ``scheduler.policy.codec``): the engine
configuration, a snapshot and its decisions. They shape nothing (the codec writes the JSON);
they exist so generated clients get typed models and the schema conformance test checks the
admin's last cycle and a record's policy field by field.

The configuration's fields are read from ``scheduler.policy.fields.FIELDS``, the one table the
codec and docs/policy.md are written from, so a field added there is declared here too.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from core.apianswers import AnswerSerializer
from scheduler.policy.fields import FIELDS, Field
from scheduler.policy.model import QUEUE_ORDERS


def _config_field(f: Field) -> serializers.Field[Any, Any, Any, Any]:
    # Not required: a configuration recorded before a field existed (a reproducibility record)
    # lacks it; the snapshot always has every field.
    common: dict[str, Any] = {"required": False, "allow_null": f.nullable, "help_text": f.meaning}
    if f.kind == "bool":
        return serializers.BooleanField(**common)
    if f.kind == "integer":
        return serializers.IntegerField(**common)
    if f.kind == "choice":
        return serializers.ChoiceField(choices=list(QUEUE_ORDERS), **common)
    if f.kind == "thresholds":
        return serializers.ListField(child=serializers.FloatField(), **common)
    return serializers.FloatField(**common)


def _config_serializer(name: str, section: str, extra: dict[str, Any]) -> type:
    attrs: dict[str, Any] = {
        "__doc__": "The engine configuration (docs/policy.md, the table of fields)."
        if not section
        else "The least-attained-service section of the engine configuration.",
        **{
            f.name: _config_field(f) for f in FIELDS if f.section == section and f.kind != "section"
        },
        **extra,
    }
    return type(name, (AnswerSerializer,), attrs)


LasConfigSerializer = _config_serializer("LasConfigSerializer", "las", {})
EngineConfigSerializer = _config_serializer(
    "EngineConfigSerializer",
    "",
    {
        "las": LasConfigSerializer(
            required=False, allow_null=True, help_text="null: the LAS queues are off"
        )
    },
)


def _key_schema(f: Field) -> dict[str, Any]:
    by_kind: dict[str, dict[str, Any]] = {
        "bool": {"type": "boolean"},
        "integer": {"type": "integer"},
        "choice": {"type": "string", "enum": list(QUEUE_ORDERS)},
        "thresholds": {"type": "array", "items": {"type": "number"}},
    }
    schema = dict(by_kind.get(f.kind, {"type": "number"}), description=f.meaning)
    return {**schema, "nullable": True} if f.nullable else schema


# The engine configuration flattened by JSON key (``las.long_run_s``), as the policy pages and
# their diffs show it; ``las`` itself appears only when the queues are off, as null.
ENGINE_CONFIG_BY_KEY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        **{f.key: _key_schema(f) for f in FIELDS if f.kind != "section"},
        "las": {
            "type": "object",
            "nullable": True,
            "maxProperties": 0,
            "description": "present, as null, only when the LAS queues are off",
        },
    },
    "additionalProperties": False,
}


def _names(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(child=serializers.CharField(), **kwargs)


def _placement(**kwargs: Any) -> serializers.DictField:
    return serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="node name -> the GPU indices held there",
        **kwargs,
    )


class QuotaEntrySerializer(AnswerSerializer):
    guaranteed = serializers.IntegerField()
    borrow_limit = serializers.IntegerField()


class SnapshotTeamSerializer(AnswerSerializer):
    name = serializers.CharField()
    # The serializer's declared field, not DRF's Field.parent it shadows (the metaclass moves
    # declared fields off the class), which the stubs cannot tell apart.
    parent = serializers.CharField(allow_null=True)  # type: ignore[assignment]
    weight = serializers.FloatField()
    quota = serializers.DictField(child=QuotaEntrySerializer(), help_text="GPU model -> quota")
    usage_gpu_s = serializers.FloatField()
    clusters = _names(required=False, help_text="only when the team is restricted")


class SnapshotNodeSerializer(AnswerSerializer):
    name = serializers.CharField()
    gpu_model = serializers.CharField()
    gpus = serializers.IntegerField()
    free_gpus = serializers.ListField(child=serializers.IntegerField())
    zone = serializers.CharField(allow_blank=True)
    rack = serializers.CharField(allow_blank=True)
    nvlink_domain = serializers.CharField(allow_blank=True)
    fabric = serializers.CharField(allow_blank=True)
    spot = serializers.BooleanField()
    health = serializers.FloatField()
    state = serializers.CharField()
    datasets = _names()
    cluster = serializers.CharField(required=False, help_text="only when clusters are known")


class ElasticRangeSerializer(AnswerSerializer):
    min_workers = serializers.IntegerField()
    max_workers = serializers.IntegerField()


class SnapshotRunningSerializer(AnswerSerializer):
    id = serializers.CharField()
    team = serializers.CharField()
    priority_class = serializers.CharField()
    gpu_model = serializers.CharField(allow_null=True)
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()
    placement = _placement()
    started_at = serializers.FloatField()
    expected_end = serializers.FloatField(allow_null=True)
    preemptible = serializers.BooleanField()
    last_checkpoint_at = serializers.FloatField(allow_null=True)
    checkpoint_interval_s = serializers.FloatField(allow_null=True)
    elastic = ElasticRangeSerializer(allow_null=True)
    releasing_at = serializers.FloatField(allow_null=True)
    attained_service_s = serializers.FloatField()
    submitted_at = serializers.FloatField(allow_null=True)


class SnapshotRoutingSerializer(AnswerSerializer):
    clusters = _names(allow_null=True)
    regions = _names(allow_null=True)
    prefer_clusters = _names()
    prefer_regions = _names()
    max_price_per_gpu_h = serializers.FloatField(allow_null=True)
    spot = serializers.BooleanField(allow_null=True)
    comm_heavy = serializers.BooleanField(allow_null=True)


class SnapshotPendingSerializer(AnswerSerializer):
    id = serializers.CharField()
    team = serializers.CharField()
    priority_class = serializers.CharField()
    gpu_model = serializers.CharField(allow_null=True)
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()
    submitted_at = serializers.FloatField()
    runtime_estimate_s = serializers.FloatField(allow_null=True)
    preemptible = serializers.BooleanField()
    dataset = serializers.CharField(allow_null=True)
    dataset_ready = serializers.BooleanField()
    elastic = ElasticRangeSerializer(allow_null=True)
    attained_service_s = serializers.FloatField()
    requeued = serializers.BooleanField()
    deadline = serializers.FloatField(required=False, help_text="only when set")
    routing = SnapshotRoutingSerializer(required=False, help_text="only when set")
    dataset_size_gb = serializers.FloatField(required=False, help_text="only when known")


class SnapshotClusterSerializer(AnswerSerializer):
    name = serializers.CharField()
    region = serializers.CharField(allow_blank=True)
    interconnect = serializers.CharField()
    prices = serializers.DictField(
        child=serializers.DictField(child=serializers.FloatField()),
        help_text="GPU model -> capacity type -> price per GPU-hour",
    )
    datasets = serializers.DictField(
        child=serializers.FloatField(), help_text="dataset held -> egress price per GB"
    )
    reachable = serializers.BooleanField()
    spot_interruption_rate = serializers.FloatField()


class SnapshotDatasetSerializer(AnswerSerializer):
    name = serializers.CharField()
    regions = _names(allow_null=True)


class SnapshotSerializer(AnswerSerializer):
    """What one scheduling cycle looked at (the contract's snapshot; times in epoch seconds)."""

    now = serializers.FloatField()
    config = EngineConfigSerializer()
    priority_classes = serializers.DictField(
        child=serializers.IntegerField(), help_text="name -> value"
    )
    teams = SnapshotTeamSerializer(many=True)
    nodes = SnapshotNodeSerializer(many=True)
    running = SnapshotRunningSerializer(many=True)
    pending = SnapshotPendingSerializer(many=True)
    clusters = SnapshotClusterSerializer(many=True, required=False, help_text="when known")
    datasets = SnapshotDatasetSerializer(many=True, required=False, help_text="when known")


class StartDecisionSerializer(AnswerSerializer):
    job = serializers.CharField()
    placement = _placement()
    workers = serializers.IntegerField(required=False, help_text="an elastic job's start size")


class PreemptDecisionSerializer(AnswerSerializer):
    job = serializers.CharField()
    reason = serializers.CharField()
    grace_s = serializers.FloatField()


class ReserveDecisionSerializer(AnswerSerializer):
    job = serializers.CharField()
    at = serializers.FloatField()
    nodes = _names()


class ResizeDecisionSerializer(AnswerSerializer):
    job = serializers.CharField()
    workers = serializers.IntegerField()
    placement = _placement(required=False)


class PendingDecisionSerializer(AnswerSerializer):
    job = serializers.CharField()
    why = serializers.CharField()
    estimated_start = serializers.FloatField(required=False)


class DecisionsSerializer(AnswerSerializer):
    """What the cycle decided, in decision order (the contract's decisions)."""

    start = StartDecisionSerializer(many=True)
    preempt = PreemptDecisionSerializer(many=True)
    reserve = ReserveDecisionSerializer(many=True)
    resize = ResizeDecisionSerializer(many=True)
    pending = PendingDecisionSerializer(many=True)


class LastCycleSerializer(AnswerSerializer):
    """The last cycle: replay it with ``python -m scheduler.policy decide``."""

    snapshot = SnapshotSerializer()
    decisions = DecisionsSerializer()
