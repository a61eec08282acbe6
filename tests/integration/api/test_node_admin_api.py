"""Admin node actions through the API: quarantine, drain, release; audited; admins only."""

import pytest

from scheduler.models import Node, NodeEvent
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db


def test_admin_quarantines_and_releases_a_node(platform, api_as):
    node = Node.objects.get(name="n2")
    admin = api_as(platform["admin"])
    response = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/quarantine/", {"reason": "XID 79"}, format="json"
    )
    assert response.status_code == 200 and response.json()["state"] == "quarantined"
    node.refresh_from_db()
    assert node.state == "quarantined" and node.state_reason == "XID 79"
    assert NodeEvent.objects.filter(node=node, kind="quarantined").exists()
    entry = AuditEntry.objects.get(action="node.quarantined")
    assert entry.actor == platform["admin"]
    released = admin.post(f"/api/v1/admin/nodes/{node.pk}/release/")
    assert released.status_code == 200 and released.json()["state"] == "ready"
    again = admin.post(f"/api/v1/admin/nodes/{node.pk}/release/")
    assert again.status_code == 409


def test_quarantine_needs_a_reason_and_an_admin(platform, api_as):
    node = Node.objects.get(name="n2")
    missing = api_as(platform["admin"]).post(
        f"/api/v1/admin/nodes/{node.pk}/quarantine/", {}, format="json"
    )
    assert missing.status_code == 400 and "reason" in missing.json()
    denied = api_as(platform["alice"]).post(
        f"/api/v1/admin/nodes/{node.pk}/quarantine/", {"reason": "x"}, format="json"
    )
    assert denied.status_code == 403
    node.refresh_from_db()
    assert (
        node.state == "ready" and not AuditEntry.objects.filter(action__startswith="node.").exists()
    )


def test_unknown_node_is_404(platform, api_as):
    response = api_as(platform["admin"]).post("/api/v1/admin/nodes/999999/drain/")
    assert response.status_code == 404


@pytest.mark.parametrize("first", ["health rule", "drain"])
def test_a_hand_quarantine_is_kept_until_released_by_hand(platform, api_as, settings, first):
    """An admin quarantines a node a health rule had already quarantined (on probation), or a
    node they had drained. The API answered 200 and changed nothing: the admin's reason was not
    recorded or audited, the probation stayed, and the loop released the node after it as if
    nobody had asked, back to service. A hand quarantine now replaces the automatic one."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.backends import reset_backends
    from scheduler.loop.cycle import run_cycle
    from telemetry.health_scoring import node_quarantine_health

    settings.SCHEDULER_PROBATION_SECONDS = 60
    reset_backends()
    node = Node.objects.get(name="n2")
    admin = api_as(platform["admin"])
    if first == "drain":
        assert admin.post(f"/api/v1/admin/nodes/{node.pk}/drain/").status_code == 200
    an_hour_ago = timezone.now() - timedelta(hours=1)
    assert node_quarantine_health(node=node, reason="ECC errors", now=an_hour_ago)
    response = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/quarantine/", {"reason": "RMA GPU 3"}, format="json"
    )
    assert response.status_code == 200 and response.json()["state"] == "quarantined"
    node.refresh_from_db()
    assert node.state_reason == "RMA GPU 3" and node.probation_until is None
    entry = AuditEntry.objects.get(action="node.quarantined")
    assert entry.before == {"state": "quarantined"} and "RMA GPU 3" in entry.comment
    run_cycle()  # the probation (60 s from an hour ago) is long over
    node.refresh_from_db()
    assert node.state == "quarantined" and node.state_reason == "RMA GPU 3"
    assert not NodeEvent.objects.filter(node=node, kind="released").exists()
    reset_backends()


def test_release_of_a_down_node_lifts_its_drain_and_it_stays_down(platform, api_as):
    """An admin drains a node for maintenance; it goes down; the work is called off. Release
    refused a down node (409), so the drain could only be lifted once the node was back. As
    Slurm's resume of a DOWN+DRAIN node, release now lifts the drain where the node stands: it
    stays down and comes back ready. A down node with nothing to lift is still a 409."""
    node = Node.objects.get(name="n2")
    Node.objects.filter(pk=node.pk).update(state="down", state_reason="node failure")
    admin = api_as(platform["admin"])
    drained = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/drain/", {"reason": "firmware update"}, format="json"
    )
    assert drained.status_code == 200 and drained.json()["state"] == "down"
    released = admin.post(f"/api/v1/admin/nodes/{node.pk}/release/")
    assert released.status_code == 200
    assert (released.json()["state"], released.json()["state_reason"]) == ("down", "node failure")
    node.refresh_from_db()
    assert (node.state, node.resume_state, node.resume_reason) == ("down", "", "")
    event = NodeEvent.objects.filter(node=node).latest("id")
    by = platform["admin"].get_username()
    assert (event.kind, event.message) == (
        "released",
        f"released by {by}, while down: it comes back ready",
    )
    entry = AuditEntry.objects.get(action="node.released")
    assert entry.actor == platform["admin"]
    assert entry.before == {"state": "down", "resume_state": "draining"}
    assert entry.after == {"state": "down", "resume_state": ""}

    again = admin.post(f"/api/v1/admin/nodes/{node.pk}/release/")
    assert again.status_code == 409
    assert "neither drained nor quarantined" in again.json()["state"][0]
    node.refresh_from_db()
    assert node.state == "down" and NodeEvent.objects.filter(kind="released").count() == 1
    assert AuditEntry.objects.filter(action="node.released").count() == 1


def test_a_down_nodes_hold_is_shown_with_the_node(platform, api_as):
    """An admin drains a node that is down: it stays down and comes back drained. The API showed
    only ``state: down``, so nobody could see the drain waiting for it (nor that a release would
    lift something). The node now shows the state it comes back to and its reason, read-only;
    both are empty when nothing is held."""
    node = Node.objects.get(name="n2")
    Node.objects.filter(pk=node.pk).update(state="down", state_reason="node failure")
    admin = api_as(platform["admin"])
    drained = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/drain/", {"reason": "firmware update"}, format="json"
    )
    assert drained.status_code == 200
    held = {"state": "down", "resume_state": "draining", "resume_reason": "firmware update"}
    assert {k: drained.json()[k] for k in held} == held
    # Every member reads the nodes (as their state_reason): the hold is no more private.
    listed = api_as(platform["alice"]).get("/api/v1/nodes/", {"state": "down"}).json()
    assert [{k: row[k] for k in held} for row in listed["results"]] == [held]
    ready = api_as(platform["alice"]).get(f"/api/v1/nodes/{Node.objects.get(name='n1').pk}/")
    assert (ready.json()["resume_state"], ready.json()["resume_reason"]) == ("", "")

    # Read-only: a body cannot set them (the actions take only a reason).
    released = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/release/", {"resume_state": "quarantined"}, format="json"
    )
    assert released.status_code == 200
    assert (released.json()["resume_state"], released.json()["resume_reason"]) == ("", "")
    node.refresh_from_db()
    assert (node.resume_state, node.resume_reason) == ("", "")


def test_the_schema_documents_the_hold_as_read_only(db):
    from django.test import Client

    schema = Client().get("/api/schema/", {"format": "json"}).json()
    fields = schema["components"]["schemas"]["Node"]["properties"]
    for name in ("resume_state", "resume_reason"):
        assert fields[name].get("readOnly") is True, fields[name]
        assert "down" in fields[name]["description"]


def test_an_unknown_node_state_filter_is_a_400_naming_the_states(platform, api_as):
    """``?state=drained`` (the word gpuctl's help suggested) was "Select a valid choice.
    drained is not one of the available choices.": no state a node can be in was named."""
    Node.objects.filter(name="n2").update(state="draining")
    client = api_as(platform["alice"])
    for query in ("drained", "ready,drained"):
        response = client.get("/api/v1/nodes/", {"state": query})
        assert response.status_code == 400, query
        assert response.json() == {
            "state": [
                "unknown state 'drained' (known: ready, draining, quarantined, down, retired)"
            ]
        }
    listed = client.get("/api/v1/nodes/", {"state": "draining,down", "limit": 100}).json()
    assert [n["name"] for n in listed["results"]] == ["n2"]
