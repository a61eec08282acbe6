"""Nodes the cluster itself holds out of service: a site admin's drain and a maintenance
reservation, made with Slurm's own tools, on 24.11 and 22.05 (the accounting clusters: two
nodes, so a job has few places to go).

Before, the platform read neither: it kept placing runs on such a node, Slurm kept them pending
("ReqNodeNotAvail"), and the platform counted them as running and billed their GPUs.
"""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from scheduler.backends import reset_backends
from scheduler.loop.observe import sync_cluster
from scheduler.models import Cluster, Node, NodeEvent
from scheduler.services import cluster_import_nodes
from scheduler.snapshot import build_snapshot
from tests.integration.slurm.conftest import LocalSlurm, wait_for

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slurm_versions("24.11", "26.05", "22.05"),
    pytest.mark.django_db,
]


@pytest.fixture
def platform_cluster(accounting_slurm: LocalSlurm, gpu_models):
    reset_backends()
    cluster = Cluster.objects.create(
        name="slurm-with-site-admins",
        backend_kind="slurm",
        backend_config=accounting_slurm.backend_config(run_namespace=f"t{uuid.uuid4().hex[:8]}-"),
    )
    cluster_import_nodes(cluster=cluster)
    yield cluster
    reset_backends()


def schedulable(cluster: Cluster) -> dict[str, str]:
    snapshot, _ = build_snapshot(now=timezone.now())
    names = set(Node.objects.filter(cluster=cluster).values_list("name", flat=True))
    return {n.name: n.state for n in snapshot.nodes if n.name in names}


def test_a_site_admins_drain_and_a_reservation_keep_new_work_off_the_node(
    accounting_slurm: LocalSlurm, platform_cluster
):
    slurm, cluster = accounting_slurm, platform_cluster

    def sync() -> Node:
        sync_cluster(cluster, now=timezone.now())
        return Node.objects.get(cluster=cluster, name="node2")

    assert sync().cluster_hold == ""
    assert schedulable(cluster) == {"node1": "ready", "node2": "ready"}
    slurm.run("scontrol", "update", "nodename=node2", "state=drain", "reason=bios update")
    try:
        node2 = sync()
        assert node2.state == "ready"  # the platform's own state: nothing for a release to lift
        assert node2.cluster_hold == "drained on the cluster: bios update"
        assert schedulable(cluster) == {"node1": "ready", "node2": "draining"}
        event = NodeEvent.objects.filter(node=node2).latest("time")
        assert event.message == "held by the cluster: drained on the cluster: bios update"
        assert sync().cluster_hold == node2.cluster_hold  # no new event while it lasts
        assert NodeEvent.objects.filter(node=node2).count() == 1
    finally:
        slurm.run("scontrol", "update", "nodename=node2", "state=undrain")
    assert sync().cluster_hold == ""
    assert NodeEvent.objects.filter(node__name="node2").latest("time").message == (
        "the cluster let it go"
    )
    assert schedulable(cluster) == {"node1": "ready", "node2": "ready"}

    name = f"maint-{uuid.uuid4().hex[:6]}"
    slurm.run(
        "scontrol", "create", "reservation", f"reservationname={name}", "starttime=now",
        "duration=60", "nodes=node2", "flags=maint", "users=root",
    )  # fmt: skip
    try:
        assert sync().cluster_hold.startswith(f"reserved on the cluster: {name} until ")
        assert schedulable(cluster) == {"node1": "ready", "node2": "draining"}
    finally:
        slurm.run("scontrol", "delete", f"reservation={name}")
    assert sync().cluster_hold == ""
    assert schedulable(cluster) == {"node1": "ready", "node2": "ready"}


def test_a_node_down_with_a_long_reason_is_down_and_the_sync_goes_on(
    accounting_slurm: LocalSlurm, platform_cluster
):
    # Slurm keeps a reason of any length (an admin's, a health check's output); the platform
    # keeps 300 characters of it. Before, PostgreSQL refused the longer value and the cluster's
    # whole sync failed every pass, its jobs' news with it, while the node stayed down.
    from scheduler.loop.observe import sync_all

    slurm, cluster = accounting_slurm, platform_cluster
    reason = "nhc: " + "gpu 3 xid 79 fallen off the bus; " * 20
    try:
        # ReturnToService=2: a slurmd that re-registers (a ping under load) brings the node back
        # at once, sometimes before the sync reads it; then set it down again and sync again.
        for _ in range(5):
            slurm.run("scontrol", "update", "nodename=node2", "state=down", f"reason={reason}")
            sync_all(now=timezone.now())
            if "DOWN" in slurm.run("scontrol", "show", "node", "node2").stdout:
                break
        cluster.refresh_from_db()
        assert cluster.backend_available, cluster.backend_error
        node2 = Node.objects.get(cluster=cluster, name="node2")
        assert node2.state == "down" and node2.state_reason == reason[:300]
        assert NodeEvent.objects.filter(node=node2, kind="failed").exists()
    finally:
        # ReturnToService=2: the node may be back already once its slurmd re-registered, and
        # resuming a node in service is refused (24.11), so resume only where it is not.
        slurm.run("scontrol", "update", "nodename=node2", "state=resume", check=False)
        wait_for(
            lambda: "DOWN" not in slurm.run("scontrol", "show", "node", "node2").stdout,
            60,
            "node2 back in service",
        )
