"""The enforce stage's submits, read and written once for the whole batch (``enforce``).

A cycle starts tens to hundreds of jobs. Each submit needs the job's placement, the GPU model
of each of its nodes (the attempt record names them; the checkpoint advice reads the pool from
them), the checkpoint advice and the policy's checkpoint grace; once the backend accepted the
run, its reference is written on the job and the attempt's record is stored. Here each of those
reads is one query for the batch, the references are written by one compare-and-set UPDATE and
the records by one INSERT (``reproducibility.attempt_records_write``). Only the backend's own
call stays per job, so a backend's refusal or error still concerns its job alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from django.db import models, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from ..checkpoint_advice import placement_advice_envs
from ..models import Allocation, Job, Node
from ..reproducibility import AcceptedRun
from ..snapshot import policy_config
from ..states import JobState

# Jobs per reference UPDATE: its statement names each job three times.
_REFS_PER_UPDATE = 500
_JSON = models.JSONField()


def checkpoint_grace_s() -> int:
    """The checkpoint grace a run gets when it is stopped: the policy's ``preemption_grace_s``,
    the time the engine waits before handing a victim's GPUs on, so the run's final checkpoint
    fits inside it."""
    return max(1, round(policy_config().preemption_grace_s))


@dataclass(frozen=True)
class PlacedNode:
    name: str
    gpu_model: str
    spot: bool


@dataclass
class SubmitBatch:
    """The runs to submit (``jobs``: RUNNING in the database without a backend reference) and
    what their submits read, by job id: each placement (node name -> GPU indices), the nodes
    of it found in the job's cluster (in the nodes' order) and each job's checkpoint advice
    (its environment variables; absent: none)."""

    jobs: list[Job]
    placements: dict[int, dict[str, list[int]]]
    nodes: dict[int, list[PlacedNode]]
    advice: dict[int, dict[str, str]]

    @cached_property
    def checkpoint_grace_s(self) -> int:
        # Read once for the batch. A read that raises is not kept: the next job's submit reads
        # again and fails as it would have alone.
        return checkpoint_grace_s()

    def node_models(self) -> dict[int, dict[str, str]]:
        """By job id: the GPU model of each node of its placement (for its attempt record)."""
        return {pk: {n.name: n.gpu_model for n in nodes} for pk, nodes in self.nodes.items()}


def submit_batch_read() -> SubmitBatch:
    """The runs to submit and what their submits read, in a fixed number of queries."""
    jobs = list(
        # The attempt record names the job's model, class and submitter: read with the job.
        Job.objects.filter(state=JobState.RUNNING, backend_ref="").select_related(
            "team", "cluster", "gpu_model", "priority_class", "submitter"
        )
    )
    placements: dict[int, dict[str, list[int]]] = {}
    for job_pk, name, gpu in (
        Allocation.objects.filter(job__in=jobs, ended_at__isnull=True)
        .order_by("job_id", "node__name", "gpu_index")
        .values_list("job_id", "node__name", "gpu_index")
    ):
        placements.setdefault(job_pk, {}).setdefault(name, []).append(gpu)
    nodes = _placed_nodes(jobs, placements)
    advice = placement_advice_envs(
        [job for job in jobs if job.cluster_id is not None],
        {pk: [(n.gpu_model, n.spot) for n in placed] for pk, placed in nodes.items()},
        now=timezone.now(),
    )
    return SubmitBatch(jobs=jobs, placements=placements, nodes=nodes, advice=advice)


def _placed_nodes(
    jobs: Sequence[Job], placements: dict[int, dict[str, list[int]]]
) -> dict[int, list[PlacedNode]]:
    # Each job's nodes are those of its own cluster with the placement's names, as a read of one
    # job's would find them (a job without a cluster has none; a job placed nowhere neither, as
    # its live allocations, just read, are none); ordered by name, as the nodes are (within one
    # cluster, their ordering by cluster name, then name).
    wanted = {
        (job.cluster_id, name)
        for job in jobs
        if job.cluster_id is not None
        for name in placements.get(job.pk, {})
    }
    if not wanted:
        return {}
    found: dict[tuple[int, str], PlacedNode] = {}
    for cluster_id, name, gpu_model, spot in (
        Node.objects.filter(cluster_id__in={c for c, _ in wanted}, name__in={n for _, n in wanted})
        .order_by("cluster_id", "name")
        .values_list("cluster_id", "name", "gpu_model__name", "spot")
    ):
        if (cluster_id, name) in wanted:
            found[(cluster_id, name)] = PlacedNode(name, gpu_model, spot)
    order = {key: i for i, key in enumerate(found)}
    nodes: dict[int, list[PlacedNode]] = {}
    for job in jobs:
        if job.cluster_id is None:
            continue
        own = job.cluster_id
        keys = [(own, n) for n in placements.get(job.pk, {}) if (own, n) in found]
        nodes[job.pk] = [found[key] for key in sorted(keys, key=order.__getitem__)]
    return nodes


def run_refs_write(runs: Sequence[AcceptedRun]) -> set[int]:
    """Write each accepted run's backend reference and account on its job, only while the job is
    still RUNNING in the attempt that was submitted (a member's cancel may have ended it since
    the read): compare-and-set UPDATEs of up to ``_REFS_PER_UPDATE`` jobs each. Returns the ids
    of the jobs written; the other runs are unwanted."""
    written: set[int] = set()
    for start in range(0, len(runs), _REFS_PER_UPDATE):
        chunk = runs[start : start + _REFS_PER_UPDATE]
        by_attempt: dict[int, list[int]] = {}
        for run in chunk:
            by_attempt.setdefault(run.job.attempts, []).append(run.job.pk)
        still = Q(state=JobState.RUNNING) & Q(
            *[Q(attempts=attempt, pk__in=ids) for attempt, ids in by_attempt.items()],
            _connector=Q.OR,
        )
        refs = Case(
            *[When(pk=run.job.pk, then=Value(run.ref)) for run in chunk],
            default=F("backend_ref"),
        )
        accounts = Case(
            *[When(pk=run.job.pk, then=Value(_accounts(run), output_field=_JSON)) for run in chunk],
            default=F("backend_accounts"),
            output_field=_JSON,
        )
        with transaction.atomic():
            Job.objects.filter(still).update(backend_ref=refs, backend_accounts=accounts)
            # The rows the UPDATE wrote are locked until this transaction ends (a cancel waits
            # for it), and a row it passed over, out of that attempt, would have to be started
            # again to meet the condition, which only a cycle does, and this one holds the
            # loop's lock: the same condition reads exactly the rows written.
            written.update(Job.objects.filter(still).order_by().values_list("pk", flat=True))
    return written


def _accounts(run: AcceptedRun) -> dict[str, str]:
    # Every later call about the run names the account, whatever the team's is then; "" (the
    # backend's own identity) is recorded too, so the sync never has to ask the cluster whose
    # the run is (scheduler.loop.run_accounts: only runs submitted before accounts were
    # recorded are asked about).
    return {**(run.job.backend_accounts or {}), str(run.job.attempts): run.account}
