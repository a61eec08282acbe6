"""A scheduling cycle (``scheduler.tasks.run_cycle``) meets an admin's or a member's action at the
worst moment: after the cycle read a row (the snapshot's nodes, the jobs to submit) and before
it wrote what it decided from it. The action runs to its commit on a second connection right
after the cycle's read (``tests.integration.concurrency.right_after``); the cycle must end
cleanly, its other work done, nothing written on the row that went or changed."""

from __future__ import annotations

import pytest

from scheduler.loop.cycle import run_cycle
from scheduler.models import Allocation, Job, Node
from tests.integration.concurrency import require_postgresql, right_after

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast_simulation(fast_simulation, jobs_outlive_the_test):
    """(the loop tests' simulated backend, its jobs running as long as the test)"""


def _snapshot_reads_nodes(sql: str, params: object) -> bool:
    # The snapshot's read of the capacity: the nodes of enabled clusters, with their cluster.
    return (
        sql.startswith("SELECT")
        and 'FROM "scheduler_node" INNER JOIN "scheduler_cluster"' in sql
        and 'WHERE ("scheduler_cluster"."enabled" AND' in sql
    )


@pytest.fixture
def spare(platform, gpu_models):
    """A new H100 node (no history), the only one a whole-node H100 job can start on: the
    other two are drained."""
    Node.objects.filter(name__in=["n1", "n2"]).update(state="draining", state_reason="firmware")
    return Node.objects.create(
        cluster=platform["cluster"],
        name="spare",
        gpu_model=gpu_models["h100"],
        gpu_count=8,
        rack="r9",
        zone="z1",
    )


def _two_jobs(platform, submit) -> tuple[int, int]:
    """One job that can only start on the spare node, one that starts on an A100 node."""
    on_spare = submit(platform["alice"], name="h", gpus_per_worker=8, gpu_model="h100-80gb")
    elsewhere = submit(platform["alice"], name="a", gpus_per_worker=8, gpu_model="a100-40gb")
    return on_spare.json()["id"], elsewhere.json()["id"]


def test_a_node_deleted_after_the_snapshot_read_it_starts_nothing_there(platform, submit, spare):
    """An admin deletes the new node (the Django admin allows it: no history) after the cycle's
    snapshot read it and before the apply placed a job there: the job's allocations failed
    their foreign key at commit, which rolled back every start and preemption of the cycle and
    raised out of the task."""
    require_postgresql()
    job_on_spare, job_elsewhere = _two_jobs(platform, submit)

    with right_after(_snapshot_reads_nodes, lambda: Node.objects.get(pk=spare.pk).delete()) as (
        moment
    ):
        result = run_cycle(sync=False)
    assert moment, "the snapshot's read of the nodes was not seen"
    assert result.ran and result.started == [job_elsewhere]
    assert not Node.objects.filter(pk=spare.pk).exists()
    assert Job.objects.get(pk=job_on_spare).state == "pending"
    assert not Allocation.objects.filter(job_id=job_on_spare).exists()
    assert Job.objects.get(pk=job_elsewhere).state == "running"


def test_a_node_retired_after_the_snapshot_read_it_starts_nothing_there(platform, submit, spare):
    """An admin retires the node after the cycle's snapshot read it ready and before the apply
    placed a job there: the job started on a node just drained for good, which then stayed
    retiring, still counted in the capacity, for as long as that job ran."""
    from scheduler.retirement import node_retire

    require_postgresql()
    job_on_spare, job_elsewhere = _two_jobs(platform, submit)

    def retire() -> None:
        node_retire(user=platform["admin"], node_id=spare.pk, reason="decommissioned")

    with right_after(_snapshot_reads_nodes, retire) as moment:
        result = run_cycle(sync=False)
    assert moment, "the snapshot's read of the nodes was not seen"
    assert result.started == [job_elsewhere]
    assert Job.objects.get(pk=job_on_spare).state == "pending"
    assert not Allocation.objects.filter(node=spare).exists()
    run_cycle(sync=False)
    spare.refresh_from_db()
    assert spare.state == "retired"  # nothing ran there: retired by the next cycle


def _enforce_reads_placements(sql: str, params: object) -> bool:
    # The enforce stage's read of the placements of the runs it is about to submit (the last
    # before the submit: a cancel before it leaves no placement, and the run is refused).
    return (
        sql.startswith("SELECT")
        and 'FROM "scheduler_allocation" INNER JOIN "scheduler_node"' in sql
        and '"scheduler_allocation"."job_id" IN' in sql
    )


def test_a_job_cancelled_before_its_run_was_submitted_leaves_no_run_on_the_cluster(
    platform, submit
):
    """alice cancels her job after the cycle started it and the enforce stage read its run to
    submit (the job and its placement), and before the submit: her cancel had no run to stop
    yet, the stage then submitted one anyway and wrote the attempt's reproducibility record.
    The cancelled job's run held the cluster's GPUs, which the cancel had freed, until the next
    sync's stale-run sweep."""
    from scheduler.models import AttemptRecord, SimulatedRun
    from scheduler.transitions import job_cancel

    require_postgresql()
    job_id = submit(platform["alice"], gpus_per_worker=8).json()["id"]

    def cancel() -> None:
        job_cancel(user=platform["alice"], job_id=job_id)

    with right_after(_enforce_reads_placements, cancel) as moment:
        result = run_cycle(sync=False)
    assert moment, "the enforce stage's read of the placements was not seen"
    assert result.started == [job_id]
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.backend_ref) == ("cancelled", "")
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    live = SimulatedRun.objects.filter(job_id=str(job_id), cancelled_at__isnull=True)
    assert not live.exists(), "the cancelled job's run is still live on the cluster"
    assert not AttemptRecord.objects.filter(job=job).exists()


def test_a_job_cancelled_before_its_run_was_submitted_costs_the_others_nothing(platform, submit):
    """As above, with another job started in the same cycle: the runs' references are written
    for the whole batch at once, and only the cancelled job's is refused; the other run keeps
    its reference and gets its record."""
    from scheduler.models import AttemptRecord, SimulatedRun
    from scheduler.transitions import job_cancel

    require_postgresql()
    cancelled, kept = _two_jobs(platform, submit)

    def cancel() -> None:
        job_cancel(user=platform["alice"], job_id=cancelled)

    with right_after(_enforce_reads_placements, cancel) as moment:
        result = run_cycle(sync=False)
    assert moment, "the enforce stage's read of the placements was not seen"
    assert sorted(result.started) == sorted([cancelled, kept])
    gone = Job.objects.get(pk=cancelled)
    assert (gone.state, gone.backend_ref) == ("cancelled", "")
    assert not SimulatedRun.objects.filter(
        job_id=str(cancelled), cancelled_at__isnull=True
    ).exists()
    assert not AttemptRecord.objects.filter(job=gone).exists()
    running = Job.objects.get(pk=kept)
    assert (running.state, running.backend_ref) == ("running", f"gp-{kept}-a1")
    assert SimulatedRun.objects.filter(job_id=str(kept), cancelled_at__isnull=True).exists()
    assert AttemptRecord.objects.filter(job=running, attempt=1).exists()


def test_a_node_deleted_after_the_sync_read_it_ends_the_clusters_sync_cleanly(platform, spare):
    """The backend reports the new node held by the cluster (a site admin's drain in Slurm), and
    a platform admin deletes the node (just imported, no history) after the sync read the
    cluster's nodes: recording the hold's event failed its foreign key, which ended the
    cluster's sync there (its jobs' news unread that cycle) and marked the cluster unavailable.

    The backend's report is given as the Slurm backend reads it (``BackendNode``): the local
    Slurm clusters are shared by every run on this machine, and the moment is the platform's."""
    from django.utils import timezone

    from scheduler.backends.base import BackendNode
    from scheduler.loop.observe import _sync_nodes
    from scheduler.models import NodeEvent

    require_postgresql()
    report = {"spare": BackendNode(name="spare", gpus=8, state="drained", reason="bios update")}

    def reads_the_clusters_nodes(sql: str, params: object) -> bool:
        return sql.startswith("SELECT") and (
            'WHERE ("scheduler_node"."cluster_id" = %s AND NOT ("scheduler_node"."state" = %s'
            in sql
        )

    with right_after(reads_the_clusters_nodes, lambda: Node.objects.get(pk=spare.pk).delete()) as (
        moment
    ):
        _sync_nodes(platform["cluster"], report, timezone.now())
    assert moment, "the sync's read of the cluster's nodes was not seen"
    assert not Node.objects.filter(pk=spare.pk).exists()
    assert not NodeEvent.objects.filter(message__contains="bios update").exists()


def test_a_cluster_disabled_after_the_snapshot_read_it_starts_nothing_there(platform, submit):
    """An admin disables the cluster (the Django admin's cluster page) after the cycle's
    snapshot read its nodes and before the apply placed a job there: the job started on a
    cluster the sync no longer polls, counted running with nothing to report its end."""
    from scheduler.models import Cluster

    require_postgresql()
    job_id = submit(platform["alice"], gpus_per_worker=8).json()["id"]

    def disable() -> None:
        cluster = Cluster.objects.get(pk=platform["cluster"].pk)
        cluster.enabled = False
        cluster.save()

    with right_after(_snapshot_reads_nodes, disable) as moment:
        result = run_cycle(sync=False)
    assert moment, "the snapshot's read of the nodes was not seen"
    assert result.ran and result.started == []
    assert Job.objects.get(pk=job_id).state == "pending"
    assert not Allocation.objects.filter(job_id=job_id).exists()
