"""Telemetry state: node agent tokens, raw per-GPU samples, one-minute rollups, GPU error events,
per-node agent/health bookkeeping and idle-job flags.

Raw samples are the hot table (one row per GPU per second on a big cluster): lean columns, a
primary key and two indexes, on time (retention pruning, the rollup of a minute of every node)
and on (node, time) (the rollup of one node's late minutes). ECC and XID errors are
rare, so they live in their own small table (``GpuErrorEvent``) that the health rules read
cheaply; utilization history older than the raw window lives in ``GpuRollup``.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduler.models import Job, Node


def hash_node_token(raw: str) -> str:
    """SHA-256 of a node agent token (tokens are 32 random bytes: a fast hash is enough)."""
    return hashlib.sha256(raw.encode()).hexdigest()


class NodeAgentToken(models.Model):
    """A node agent's credential. Only the hash is stored; the plain token is shown once."""

    node = models.ForeignKey(Node, related_name="agent_tokens", on_delete=models.CASCADE)
    key_hash = models.CharField(max_length=64, unique=True)
    key_prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.key_prefix}… for {self.node_id}"


class GpuSample(models.Model):
    """One reading of one GPU. Utilization in percent (0..100), memory in MiB."""

    node = models.ForeignKey(Node, related_name="+", on_delete=models.CASCADE, db_index=False)
    gpu_index = models.PositiveSmallIntegerField()
    time = models.DateTimeField()
    utilization = models.FloatField()
    memory_used_mib = models.PositiveIntegerField()
    memory_total_mib = models.PositiveIntegerField()
    temperature_c = models.SmallIntegerField()
    power_w = models.FloatField(null=True, blank=True)  # not every GPU reports power
    throttle_thermal = models.BooleanField(default=False)

    class Meta:
        # The hot table pays for every index on each insert, so two only. Time serves retention
        # pruning and the rollup of a minute of every node; (node, time) the rollup of one
        # node's late backlog, which through the time index read every node's samples of those
        # minutes (381 ms against 12 ms on 17 M rows; it adds ~20 KB of WAL to a 240-sample
        # batch: docs/benchmarks.md, "Telemetry rollups"). Other per-node reads go through the
        # rollups.
        indexes = [
            models.Index(fields=["time"], name="gpusample_time"),
            models.Index(fields=["node", "time"], name="gpusample_node_time"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.gpu_index} @ {self.time:%H:%M:%S}"


class GpuRollup(models.Model):
    """One minute of one GPU (``bucket`` is the minute's start). Kept longer than raw samples."""

    node = models.ForeignKey(Node, related_name="+", on_delete=models.CASCADE, db_index=False)
    gpu_index = models.PositiveSmallIntegerField()
    bucket = models.DateTimeField()
    samples = models.PositiveIntegerField()
    util_avg = models.FloatField()
    util_max = models.FloatField()
    memory_used_max_mib = models.PositiveIntegerField()
    memory_total_mib = models.PositiveIntegerField()
    temperature_max_c = models.SmallIntegerField()
    power_avg_w = models.FloatField(null=True, blank=True)
    throttled = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["node", "gpu_index", "bucket"], name="gpurollup_unique_gpu_minute"
            )
        ]
        indexes = [models.Index(fields=["bucket"], name="gpurollup_bucket")]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.gpu_index} minute {self.bucket:%H:%M}"


class GpuRollupPending(models.Model):
    """A minute of a node that received samples since it was last rolled up: written by the
    ingest with the samples (same transaction), cleared by ``rollup_build`` once it rolled the
    minute up. The rollup reads what arrived, per node, however late (within the raw retention),
    instead of scanning the raw table for it."""

    node = models.ForeignKey(Node, related_name="+", on_delete=models.CASCADE, db_index=False)
    minute = models.DateTimeField()
    # The last batch that marked it (when a late minute arrived, for an admin's eyes).
    marked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "minute"], name="gpurolluppending_node_minute")
        ]
        indexes = [models.Index(fields=["minute"], name="gpurolluppending_minute")]

    def __str__(self) -> str:
        return f"{self.node_id} minute {self.minute:%H:%M} to roll up"


class GpuErrorKind(models.TextChoices):
    ECC_SBE = "ecc_sbe", "ECC single-bit (corrected)"
    ECC_DBE = "ecc_dbe", "ECC double-bit (uncorrected)"
    XID = "xid", "XID error"


class GpuErrorEvent(models.Model):
    """ECC errors counted since the GPU's previous sample, or an XID error (``code``) seen
    ``count`` times in one sample."""

    node = models.ForeignKey(Node, related_name="+", on_delete=models.CASCADE, db_index=False)
    gpu_index = models.PositiveSmallIntegerField()
    time = models.DateTimeField()
    kind = models.CharField(max_length=8, choices=GpuErrorKind.choices)
    code = models.PositiveIntegerField(null=True, blank=True)
    count = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [
            models.Index(fields=["node", "time"], name="gpuerror_node_time"),
            models.Index(fields=["time"], name="gpuerror_time"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=GpuErrorKind.values), name="gpuerror_kind_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.code or ''} on {self.node_id}:{self.gpu_index}"


class NodeTelemetry(models.Model):
    """Per-node bookkeeping: what the agent last reported and why the health score is what it
    is (the score itself is ``Node.health``, which the scheduler reads)."""

    node = models.OneToOneField(
        Node, primary_key=True, related_name="telemetry", on_delete=models.CASCADE
    )
    last_batch_at = models.DateTimeField(null=True, blank=True)
    last_sample_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    agent_dropped = models.BigIntegerField(default=0)
    samples_received = models.BigIntegerField(default=0)
    health_reasons = models.JSONField(default=list, blank=True)
    health_evaluated_at = models.DateTimeField(null=True, blank=True)
    # The probation end whose failed health check was already announced (announce once).
    release_blocked_for = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"telemetry of {self.node_id}"


class JobIdleFlag(models.Model):
    """A running job whose GPUs sat idle for the whole idle window. ``cleared_at`` set = the
    job became busy again (or ended); the row is reused if it idles again."""

    job = models.OneToOneField(
        Job, primary_key=True, related_name="idle_flag", on_delete=models.CASCADE
    )
    idle_since = models.DateTimeField()
    flagged_at = models.DateTimeField()
    utilization = models.FloatField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"job {self.job_id} idle since {self.idle_since:%H:%M}"
