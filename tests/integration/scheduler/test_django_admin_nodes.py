"""Django admin changes a node's state only through the node services (drain, release: their
audit entries, node events and backend calls), and refuses a rename, cluster move or GPU change
of a node jobs are running on (posted to the admin's real pages)."""

import json

import pytest

from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, Job, Node, NodeEvent, NodeState
from scheduler.states import JobState
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db


def _node_post(node, **fields):
    # Every field the change page ever had, state included: a field made read-only is ignored.
    data = {
        "cluster": node.cluster_id,
        "name": node.name,
        "gpu_model": node.gpu_model_id,
        "gpu_count": node.gpu_count,
        "zone": node.zone,
        "rack": node.rack,
        "nvlink_domain": node.nvlink_domain,
        "fabric": node.fabric,
        "datasets": json.dumps(node.datasets),
        "state": node.state,
        "state_reason": node.state_reason,
        "resume_state": node.resume_state,
        "resume_reason": node.resume_reason,
        "cluster_hold": node.cluster_hold,
        "health": node.health,
        "probation_until_0": "",
        "probation_until_1": "",
        "avoid_until_0": "",
        "avoid_until_1": "",
    }
    data.update(fields)
    return data


def test_admin_change_page_does_not_set_a_nodes_state(platform, client):
    """Set to ready in admin, a quarantined node went back to work with no release: no audit
    entry, no node event, still drained on the backend; set to quarantined, the backend kept
    placing nothing new there only because the loop happened to re-drain it."""
    node = Node.objects.get(name="n1")
    client.force_login(platform["admin"])
    post = _node_post(node, state=NodeState.QUARANTINED, state_reason="by hand", health="0.1")
    response = client.post(f"/admin/scheduler/node/{node.pk}/change/", post)
    assert response.status_code == 302
    node.refresh_from_db()
    assert (node.state, node.state_reason, node.health) == (NodeState.READY, "", 1.0)
    assert not NodeEvent.objects.exists()


def test_admin_drains_and_releases_nodes_through_the_services(platform, client):
    admin = platform["admin"]
    n1, n2 = Node.objects.get(name="n1"), Node.objects.get(name="n2")
    client.force_login(admin)
    response = client.post(
        "/admin/scheduler/node/",
        {"action": "drain_nodes", "_selected_action": [n1.pk, n2.pk]},
    )
    assert response.status_code == 302
    assert set(Node.objects.filter(state=NodeState.DRAINING).values_list("name", flat=True)) == {
        "n1",
        "n2",
    }
    assert NodeEvent.objects.filter(kind="drained").count() == 2
    assert AuditEntry.objects.filter(action="node.drained", actor=admin).count() == 2

    response = client.post(
        "/admin/scheduler/node/",
        {"action": "release_nodes", "_selected_action": [n1.pk, Node.objects.get(name="n3").pk]},
        follow=True,
    )
    n1.refresh_from_db()
    assert n1.state == NodeState.READY
    assert AuditEntry.objects.filter(action="node.released", target_id=str(n1.pk)).exists()
    # n3 was never drained: the service's refusal is shown, n3 is left alone.
    shown = [str(m) for m in response.context["messages"]]
    assert any("n3" in m and "not drained or quarantined" in m for m in shown), shown
    assert Node.objects.get(name="n3").state == NodeState.READY


def _running_job_node(platform, submit) -> Node:
    job_id = submit(
        platform["alice"], team="vision", gpu_model="h100-80gb", simulated_duration_s=100_000
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING
    return job.allocations.get().node


@pytest.mark.parametrize("field", ["name", "cluster", "gpu_model", "gpu_count"])
def test_admin_refuses_to_move_or_regpu_a_node_jobs_are_running_on(
    platform, submit, gpu_models, client, field
):
    """Renamed or moved while a job ran there, the node kept the job's allocation under a name
    (or cluster) the backend runs nothing on: the loop could no longer match the run to it."""
    node = _running_job_node(platform, submit)
    other = Cluster.objects.create(name="other", backend_kind="simulated")
    value = {
        "name": "renamed",
        "cluster": other.pk,
        "gpu_model": gpu_models["a100"].pk,
        "gpu_count": 4,
    }[field]
    before = Node.objects.values().get(pk=node.pk)
    client.force_login(platform["admin"])
    response = client.post(
        f"/admin/scheduler/node/{node.pk}/change/", _node_post(node, **{field: value})
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors[field]
    assert any("running jobs hold 1 of its GPUs: drain the node" in e for e in errors), errors
    assert Node.objects.values().get(pk=node.pk) == before


def test_admin_renames_and_moves_an_idle_node(platform, client):
    node = Node.objects.get(name="n4")
    other = Cluster.objects.create(name="other", backend_kind="simulated")
    client.force_login(platform["admin"])
    response = client.post(
        f"/admin/scheduler/node/{node.pk}/change/",
        _node_post(node, name="gpu-04", cluster=other.pk, rack="r9"),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    node.refresh_from_db()
    assert (node.name, node.cluster, node.rack) == ("gpu-04", other, "r9")
