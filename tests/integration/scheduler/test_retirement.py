"""Retiring nodes and clusters (scheduler.retirement): a retired node is drained first, out of
capacity once nothing runs on it, never scheduled again, its history kept; reinstated, it comes
back drained. A retired cluster takes no new job, tells the jobs confined to it why they wait, and
is no longer polled once nothing runs there."""

from __future__ import annotations

import pytest
from django.utils import timezone

from core.errors import Conflict, DomainError, Forbidden, NotFound
from scheduler import reference
from scheduler.backends import reset_backends
from scheduler.loop.cycle import run_cycle
from scheduler.models import Allocation, Cluster, Job, Node, NodeEvent, NodeState
from scheduler.retirement import (
    cluster_reinstate,
    cluster_retire,
    node_reinstate,
    node_retire,
)
from scheduler.services import node_release
from scheduler.snapshot import build_snapshot
from scheduler.states import JobState
from scheduler.transitions import job_finish
from tenants.models import AuditEntry
from tenants.quotas import overcommit_problems
from tenants.selectors import capacity_overview

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_backends():
    reset_backends()
    yield
    reset_backends()


def _snapshot_nodes() -> set[str]:
    snapshot, _ = build_snapshot(now=timezone.now())
    return {n.name for n in snapshot.nodes}


def _h100_capacity() -> int:
    return next(r["capacity"] for r in capacity_overview() if r["gpu_model"] == "h100-80gb")


def _running_on(submit, user, **fields) -> tuple[Job, Node]:
    response = submit(user, gpu_model="h100-80gb", simulated_duration_s=36000, **fields)
    assert response.status_code == 201, response.json()
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == JobState.RUNNING, job.why_pending
    return job, Allocation.objects.filter(job=job).select_related("node").first().node


def test_an_idle_node_is_retired_at_once_and_leaves_capacity(platform):
    admin = platform["admin"]
    n1 = Node.objects.get(name="n1")
    assert _h100_capacity() == 16 and "n1" in _snapshot_nodes()

    node = node_retire(user=admin, node_id=n1.pk, reason="end of lease")

    assert node.state == NodeState.RETIRED and node.retired_at is not None
    assert node.state_reason == "end of lease" and node.retiring_since is not None
    assert "n1" not in _snapshot_nodes()
    assert _h100_capacity() == 8
    reference.clear()
    assert reference.largest_node_gpus(n1.gpu_model, fresh=True) == 8  # n2 still counts
    # Quotas' overcommit check no longer counts its 8 GPUs.
    assert overcommit_problems(team=platform["alice"].memberships.first().team,
                               gpu_model=n1.gpu_model, guaranteed_gpus=12)  # fmt: skip
    entry = AuditEntry.objects.get(action="node.retire")
    assert entry.actor == admin and entry.after["state"] == "draining"
    assert "end of lease" in entry.comment
    kinds = list(NodeEvent.objects.filter(node=n1).order_by("id").values_list("kind", flat=True))
    assert kinds == ["drained", "retired"]
    # Idempotent: a second retire changes nothing and records nothing.
    again = node_retire(user=admin, node_id=n1.pk, reason="other")
    assert again.retired_at == node.retired_at and again.state_reason == "end of lease"
    assert AuditEntry.objects.filter(action="node.retire").count() == 1


def test_a_busy_node_drains_and_retires_when_its_last_job_ends(platform, submit):
    admin = platform["admin"]
    job, node = _running_on(submit, platform["alice"], gpus_per_worker=8)

    retiring = node_retire(user=admin, node_id=node.pk, reason="decommission")
    assert retiring.state == NodeState.DRAINING and retiring.retiring_since is not None
    assert retiring.retired_at is None
    run_cycle()
    node.refresh_from_db()
    assert node.state == NodeState.DRAINING  # its job still runs there
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    # A second job of the same shape does not start on the retiring node.
    other = submit(platform["alice"], gpu_model="h100-80gb", gpus_per_worker=8)
    run_cycle()
    other_job = Job.objects.get(pk=other.json()["id"])
    assert not Allocation.objects.filter(job=other_job, node=node).exists()

    assert job_finish(job=job, target=JobState.SUCCEEDED, now=timezone.now())
    run_cycle()
    node.refresh_from_db()
    assert node.state == NodeState.RETIRED and node.retired_at is not None
    # History kept: the job, its allocation on the node and the node's events.
    assert Allocation.objects.filter(job=job, node=node).exists()
    assert NodeEvent.objects.filter(node=node, kind="retired").exists()
    assert "end" not in _snapshot_nodes() and node.name not in _snapshot_nodes()


def test_a_retired_node_ignores_what_the_backend_says_of_it(platform):
    """A retired node reported down (or gone) by its cluster stays retired: the sync neither
    marks it down nor records a failure against it."""
    from scheduler.models import SimulatedNodeFault

    admin = platform["admin"]
    n1 = Node.objects.get(name="n1")
    node_retire(user=admin, node_id=n1.pk, reason="")
    now = timezone.now()
    SimulatedNodeFault.objects.create(
        cluster=n1.cluster,
        node_name="n1",
        failed_at=now - timezone.timedelta(seconds=5),
        repaired_at=now + timezone.timedelta(hours=1),
    )
    run_cycle()
    n1.refresh_from_db()
    assert n1.state == NodeState.RETIRED
    assert not NodeEvent.objects.filter(node=n1, kind="failed").exists()


def test_reinstate_returns_a_retired_node_drained(platform):
    admin = platform["admin"]
    n1 = Node.objects.get(name="n1")
    node_retire(user=admin, node_id=n1.pk, reason="")
    node = node_reinstate(user=admin, node_id=n1.pk)
    assert node.state == NodeState.DRAINING
    assert (node.retiring_since, node.retired_at, node.retire_reason) == (None, None, "")
    assert AuditEntry.objects.filter(action="node.reinstate", actor=admin).exists()
    assert NodeEvent.objects.filter(node=n1, kind="reinstated").exists()
    assert _h100_capacity() == 16  # counted again, though drained
    assert "n1" in _snapshot_nodes()
    released = node_release(user=admin, node_id=n1.pk)
    assert released.state == NodeState.READY
    with pytest.raises(Conflict):
        node_reinstate(user=admin, node_id=n1.pk)


def test_node_retirement_is_for_platform_admins(platform):
    n1 = Node.objects.get(name="n1")
    with pytest.raises(Forbidden):
        node_retire(user=platform["alice"], node_id=n1.pk, reason="")
    with pytest.raises(NotFound):
        node_retire(user=platform["admin"], node_id=999999, reason="")
    with pytest.raises(DomainError) as too_long:
        node_retire(user=platform["admin"], node_id=n1.pk, reason="x" * 301)
    assert too_long.value.field == "reason"
    n1.refresh_from_db()
    assert n1.state == NodeState.READY and n1.retiring_since is None
    assert not AuditEntry.objects.filter(action__startswith="node.").exists()


def _second_cluster(gpu_models) -> Cluster:
    old = Cluster.objects.create(name="old", backend_kind="simulated", backend_config={"seed": 2})
    for i in (1, 2):
        Node.objects.create(
            cluster=old, name=f"o{i}", gpu_model=gpu_models["h100"], gpu_count=8, rack="r9"
        )
    return old


def test_a_retired_cluster_takes_no_new_job_and_says_why_to_those_confined(
    platform, submit, gpu_models
):
    admin, alice = platform["admin"], platform["alice"]
    old = _second_cluster(gpu_models)
    # One of old's two nodes draining (a gang no cluster could ever hold is refused outright).
    Node.objects.filter(cluster=old, name="o1").update(state=NodeState.DRAINING)
    confined = submit(alice, gpu_model="h100-80gb", gpus_per_worker=8, workers=2,
                      routing={"clusters": ["old"]})  # fmt: skip
    assert confined.status_code == 201, confined.json()
    run_cycle()  # 2 x 8 GPUs do not fit "old" with one of its two nodes draining: it waits there

    cluster = cluster_retire(user=admin, name="old", reason="moved to the new hall")

    assert cluster.retiring_since is not None
    run_cycle()
    cluster.refresh_from_db()
    assert cluster.retired_at is not None
    assert set(Node.objects.filter(cluster=old).values_list("state", flat=True)) == {"retired"}
    job = Job.objects.get(pk=confined.json()["id"])
    assert job.state == JobState.PENDING
    assert "may run only on old (retired)" in job.why_pending
    assert job.estimated_start is None
    assert AuditEntry.objects.filter(action="cluster.retire", actor=admin).exists()
    # A new submission confined to it is refused, naming the field.
    refused = submit(alice, routing={"clusters": ["old"]})
    assert refused.status_code == 400
    assert "cluster 'old' is retired" in refused.json()["routing.clusters[0]"][0]
    # Its backend is no longer asked: a configuration that cannot build would otherwise mark
    # it unavailable on the next pass.
    Cluster.objects.filter(pk=old.pk).update(backend_config={"no_such_setting": 1})
    run_cycle()
    cluster.refresh_from_db()
    assert cluster.backend_available and cluster.backend_error == ""


def test_a_retiring_cluster_is_polled_until_its_last_job_ends(platform, submit, gpu_models):
    admin, alice = platform["admin"], platform["alice"]
    _second_cluster(gpu_models)
    job, node = _running_on(submit, alice, gpus_per_worker=8, routing={"clusters": ["old"]})
    cluster = cluster_retire(user=admin, name="old", reason="")
    run_cycle()
    cluster.refresh_from_db()
    assert cluster.retired_at is None  # its job still runs
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINING
    assert job_finish(job=job, target=JobState.SUCCEEDED, now=timezone.now())
    run_cycle()
    cluster.refresh_from_db()
    assert cluster.retired_at is not None


def test_cluster_reinstate_brings_back_what_its_retirement_retired(platform, gpu_models):
    admin = platform["admin"]
    old = _second_cluster(gpu_models)
    o1 = Node.objects.get(name="o1")
    node_retire(user=admin, node_id=o1.pk, reason="broken board")  # before the cluster's
    cluster_retire(user=admin, name="old", reason="")
    with pytest.raises(Conflict) as refused:
        node_reinstate(user=admin, node_id=Node.objects.get(name="o2").pk)
    assert refused.value.field == "cluster"

    cluster = cluster_reinstate(user=admin, name="old")

    assert (cluster.retiring_since, cluster.retired_at) == (None, None)
    states = dict(Node.objects.filter(cluster=old).values_list("name", "state"))
    assert states == {"o1": NodeState.RETIRED, "o2": NodeState.DRAINING}
    assert AuditEntry.objects.filter(action="cluster.reinstate").exists()
    with pytest.raises(Conflict):
        cluster_reinstate(user=admin, name="old")
    with pytest.raises(Forbidden):
        cluster_retire(user=platform["alice"], name="old", reason="")
    with pytest.raises(NotFound):
        cluster_retire(user=admin, name="nope", reason="")


def test_metrics_and_the_cluster_page_leave_a_retired_node_out(platform, client, settings):
    """The GPU gauge keyed free GPUs by their node's state and knew no "retired": a retired
    node made every scrape raise."""
    admin = platform["admin"]
    node_retire(user=admin, node_id=Node.objects.get(name="n1").pk, reason="")
    settings.METRICS_BEARER_TOKEN = "t"
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t")
    assert response.status_code == 200
    text = response.content.decode()
    assert 'gpuplatform_gpus{gpu_model="h100-80gb",state="idle"} 8.0' in text
    client.force_login(platform["alice"])
    page = client.get("/cluster/")
    assert page.status_code == 200
    assert page.context["totals"]["total"] == 24


def test_a_retired_clusters_nodes_are_not_imported_again(platform, gpu_models):
    from django.core.management import CommandError, call_command

    admin = platform["admin"]
    old = _second_cluster(gpu_models)
    cluster_retire(user=admin, name="old", reason="")
    before = list(Node.objects.filter(cluster=old).values_list("name", "state"))
    # Its backend would list its nodes again, and a new one would come in ready.
    with pytest.raises(CommandError, match="cluster old is retired: reinstate it"):
        call_command("import_nodes", "old")
    assert list(Node.objects.filter(cluster=old).values_list("name", "state")) == before


def test_a_what_if_replays_the_cluster_not_retired_by_default(platform, gpu_models):
    from core.errors import FieldErrors
    from policyversions import whatif_runs

    admin = platform["admin"]
    _second_cluster(gpu_models)
    with pytest.raises(FieldErrors) as two:
        whatif_runs.whatif_run_start(user=admin, window_days=1, candidates={"a": {}})
    assert "cluster" in two.value.errors
    cluster_retire(user=admin, name="old", reason="")
    run = whatif_runs.whatif_run_start(user=admin, window_days=1, candidates={"a": {}})
    assert run.cluster.name != "old"


def test_a_team_allowed_only_retired_clusters_is_told_so(platform, submit, gpu_models, teams):
    """The engine saw no pool of the job's team and said "no ready, healthy nodes with
    h100-80gb GPUs", as if the fleet were broken: the team's cluster list was the cause."""
    from scheduler.models import TeamClusterAccess

    admin, alice = platform["admin"], platform["alice"]
    old = _second_cluster(gpu_models)
    # On the parent team: vision is held to its ancestors' lists too.
    TeamClusterAccess.objects.create(team=teams["research"], cluster=old)
    # Submitted before the retirement: a new submission is refused once every cluster the team
    # may use is retired (test_retired_team_submission.py); a job already pending stays.
    waiting = submit(alice, gpu_model="a100-40gb", gpus_per_worker=8)
    assert waiting.status_code == 201, waiting.json()
    run_cycle()  # "old" has no A100: it waits there
    cluster_retire(user=admin, name="old", reason="moved to the new hall")

    run_cycle()

    job = Job.objects.get(pk=waiting.json()["id"])
    assert job.state == JobState.PENDING and job.estimated_start is None
    assert job.why_pending.startswith(
        "every cluster team vision may use is retired: old (retired); no new job starts there"
    ), job.why_pending
    # Given a cluster in service as well, the same team's job runs there.
    TeamClusterAccess.objects.create(team=teams["research"], cluster=platform["cluster"])
    TeamClusterAccess.objects.create(team=teams["vision"], cluster=platform["cluster"])
    TeamClusterAccess.objects.create(team=teams["vision"], cluster=old)
    run_cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.why_pending
    assert Allocation.objects.filter(job=job, node__cluster=platform["cluster"]).exists()
