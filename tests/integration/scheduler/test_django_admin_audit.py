"""Django admin: node and GPU model saves are audited and ask for a scheduling cycle, as cluster
saves are (``ScheduledAdmin``); nodes and clusters are retired and reinstated from their lists'
actions through ``scheduler.retirement`` (posted to the admin's real pages)."""

import pytest

from catalogue.models import GpuModel
from scheduler.models import Cluster, Node, NodeEvent, NodeState
from tenants.models import AuditEntry

from .test_django_admin_nodes import _node_post

pytestmark = pytest.mark.django_db


@pytest.fixture
def cycle_requested(settings):
    """The embedded loop's wake-up event, which a requested cycle sets (after commit)."""
    from scheduler.triggers import wakeup_event

    settings.REDIS_URL = ""
    event = wakeup_event()
    event.clear()
    yield event
    event.clear()


def test_admin_node_saves_are_audited_and_request_a_cycle(
    platform, client, cycle_requested, django_capture_on_commit_callbacks
):
    """A node moved to another rack or zone, made spot or given a cached dataset in admin left
    no audit entry, and pending jobs that now fit (or no longer should go there) waited for the
    next periodic cycle."""
    admin = platform["admin"]
    node = Node.objects.get(name="n3")
    client.force_login(admin)
    post = _node_post(node, rack="r7", spot="on", datasets='["imagenet"]')
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/scheduler/node/{node.pk}/change/", post)
    assert response.status_code == 302, response.context["adminform"].form.errors
    entry = AuditEntry.objects.get(action="node.set")
    assert entry.actor == admin and entry.target_id == str(node.pk)
    assert (entry.before["rack"], entry.before["spot"], entry.before["datasets"]) == (
        "r2",
        False,
        [],
    )
    assert (entry.after["rack"], entry.after["spot"], entry.after["datasets"]) == (
        "r7",
        True,
        ["imagenet"],
    )
    assert cycle_requested.is_set()

    # Saved unchanged: nothing to audit, no cycle.
    cycle_requested.clear()
    node.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/admin/scheduler/node/{node.pk}/change/",
            # As the change page posts it: datasets (a callable default) with its hidden initial.
            _node_post(node, spot="on") | {"initial-datasets": '["imagenet"]'},
        )
    assert response.status_code == 302
    assert AuditEntry.objects.filter(action__startswith="node.").count() == 1
    assert not cycle_requested.is_set()


def test_admin_gpu_model_saves_are_audited_and_request_a_cycle(
    platform, client, cycle_requested, django_capture_on_commit_callbacks
):
    admin = platform["admin"]
    model = GpuModel.objects.get(name="h100-80gb")
    client.force_login(admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/admin/catalogue/gpumodel/{model.pk}/change/",
            {"name": "h100-80gb", "memory_gib": 94},
        )
    assert response.status_code == 302, response.context["adminform"].form.errors
    entry = AuditEntry.objects.get(action="gpumodel.set")
    assert entry.actor == admin and entry.after["memory_gib"] == 94
    assert entry.before["memory_gib"] == 80
    assert cycle_requested.is_set()

    cycle_requested.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/admin/catalogue/gpumodel/add/", {"name": "b200", "memory_gib": 192}
        )
    assert response.status_code == 302
    assert AuditEntry.objects.get(action="gpumodel.create").after["name"] == "b200"
    assert cycle_requested.is_set()


def test_admin_retires_and_reinstates_nodes(platform, client):
    admin = platform["admin"]
    n1 = Node.objects.get(name="n1")
    client.force_login(admin)
    response = client.post(
        "/admin/scheduler/node/", {"action": "retire_nodes", "_selected_action": [n1.pk]}
    )
    assert response.status_code == 302
    n1.refresh_from_db()
    assert n1.state == NodeState.RETIRED
    assert AuditEntry.objects.filter(action="node.retire", actor=admin).exists()
    assert NodeEvent.objects.filter(node=n1, kind="retired").exists()

    n2 = Node.objects.get(name="n2")
    response = client.post(
        "/admin/scheduler/node/",
        {"action": "reinstate_nodes", "_selected_action": [n1.pk, n2.pk]},
        follow=True,
    )
    n1.refresh_from_db()
    assert n1.state == NodeState.DRAINING and n1.retired_at is None
    shown = [str(m) for m in response.context["messages"]]
    assert any("n2" in m and "not retired or retiring" in m for m in shown), shown
    assert Node.objects.get(name="n2").state == NodeState.READY


def test_admin_retires_and_reinstates_clusters(platform, client):
    admin, cluster = platform["admin"], platform["cluster"]
    client.force_login(admin)
    response = client.post(
        "/admin/scheduler/cluster/",
        {"action": "retire_clusters", "_selected_action": [cluster.pk]},
    )
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert cluster.retired_at is not None  # nothing ran there
    assert set(cluster.nodes.values_list("state", flat=True)) == {NodeState.RETIRED}
    # History is kept: the cluster with node events is still not deleted here.
    response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/delete/", {"post": "yes"})
    assert Cluster.objects.filter(pk=cluster.pk).exists()

    response = client.post(
        "/admin/scheduler/cluster/",
        {"action": "reinstate_clusters", "_selected_action": [cluster.pk]},
    )
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert cluster.retiring_since is None
    assert set(cluster.nodes.values_list("state", flat=True)) == {NodeState.DRAINING}
