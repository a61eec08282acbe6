"""Retiring and reinstating nodes and clusters through the API (platform admins only): the
responses, refusals (403 for everyone else, 404 for what does not exist, 400 naming the field,
409 for what cannot be reinstated), and that a refusal writes nothing."""

import pytest

from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, Job, Node, NodeState
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db


def _nothing_written(node: Node) -> None:
    node.refresh_from_db()
    assert node.state == NodeState.READY and node.retiring_since is None
    assert not AuditEntry.objects.filter(action__in=["node.retire", "cluster.retire"]).exists()


def test_admin_retires_and_reinstates_a_node(platform, api_as):
    node = Node.objects.get(name="n2")
    admin = api_as(platform["admin"])
    response = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/retire/", {"reason": "RMA chassis"}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["state"] == "retired" and body["retire_reason"] == "RMA chassis"
    assert body["retired_at"] and body["retiring_since"]
    # Still listed for everyone (its history is kept), and filterable.
    listed = api_as(platform["alice"]).get("/api/v1/nodes/", {"state": "retired"}).json()
    assert [n["name"] for n in listed["results"]] == ["n2"]

    again = admin.post(f"/api/v1/admin/nodes/{node.pk}/reinstate/")
    assert again.status_code == 200 and again.json()["state"] == "draining"
    conflict = admin.post(f"/api/v1/admin/nodes/{node.pk}/reinstate/")
    assert conflict.status_code == 409 and "state" in conflict.json()


def test_node_retirement_refusals_write_nothing(platform, api_as):
    node = Node.objects.get(name="n2")
    for user in ("alice", "bob"):
        denied = api_as(platform[user]).post(f"/api/v1/admin/nodes/{node.pk}/retire/")
        assert denied.status_code == 403
        denied = api_as(platform[user]).post(f"/api/v1/admin/nodes/{node.pk}/reinstate/")
        assert denied.status_code == 403
    assert api_as().post(f"/api/v1/admin/nodes/{node.pk}/retire/").status_code in (401, 403)
    admin = api_as(platform["admin"])
    assert admin.post("/api/v1/admin/nodes/999999/retire/").status_code == 404
    assert admin.post("/api/v1/admin/nodes/abc/retire/").status_code == 404
    too_long = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/retire/", {"reason": "x" * 301}, format="json"
    )
    assert too_long.status_code == 400 and "reason" in too_long.json()
    not_text = admin.post(
        f"/api/v1/admin/nodes/{node.pk}/retire/", {"reason": {"a": 1}}, format="json"
    )
    assert not_text.status_code == 400 and "reason" in not_text.json()
    _nothing_written(node)


def test_admin_retires_and_reinstates_a_cluster(platform, api_as, submit, gpu_models):
    old = Cluster.objects.create(name="old", backend_kind="simulated", backend_config={"seed": 2})
    Node.objects.create(cluster=old, name="o1", gpu_model=gpu_models["h100"], gpu_count=8)
    waiting = submit(platform["alice"], gpus_per_worker=8, workers=2, routing={"clusters": ["old"]})
    assert waiting.status_code == 201, waiting.json()
    admin = api_as(platform["admin"])

    response = admin.post("/api/v1/admin/clusters/old/retire/", {"reason": "EOL"}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["retiring_since"] and response.json()["retired_at"]
    assert Node.objects.get(name="o1").state == NodeState.RETIRED
    shown = api_as(platform["alice"]).get("/api/v1/clusters/").json()
    old_shown = next(c for c in shown["results"] if c["name"] == "old")
    assert old_shown["retired_at"]
    run_cycle()
    # The confined job's why, seen by its team; another team does not see the job at all.
    job_id = waiting.json()["id"]
    mine = api_as(platform["alice"]).get(f"/api/v1/jobs/{job_id}/").json()
    assert mine["state"] == "pending" and "old (retired)" in mine["why"]
    assert api_as(platform["bob"]).get(f"/api/v1/jobs/{job_id}/").status_code == 404
    refused = submit(platform["alice"], routing={"prefer_clusters": ["old"]})
    assert refused.status_code == 400
    assert "is retired" in refused.json()["routing.prefer_clusters[0]"][0]

    back = admin.post("/api/v1/admin/clusters/old/reinstate/")
    assert back.status_code == 200 and back.json()["retired_at"] is None
    assert Node.objects.get(name="o1").state == NodeState.DRAINING
    assert admin.post("/api/v1/admin/clusters/old/reinstate/").status_code == 409
    assert Job.objects.get(pk=job_id).state == "pending"


def test_cluster_retirement_refusals_write_nothing(platform, api_as):
    cluster = platform["cluster"]
    for user in ("alice", "bob"):
        denied = api_as(platform[user]).post("/api/v1/admin/clusters/test/retire/")
        assert denied.status_code == 403
    admin = api_as(platform["admin"])
    assert admin.post("/api/v1/admin/clusters/nope/retire/").status_code == 404
    for body, field in (
        ({"reason": "x" * 301}, "reason"),
        ({"reason": 5}, "reason"),
        ({"reasn": "typo"}, "reasn"),
    ):
        response = admin.post("/api/v1/admin/clusters/test/retire/", body, format="json")
        assert response.status_code == 400, body
        assert field in response.json(), response.json()
    not_object = admin.post("/api/v1/admin/clusters/test/retire/", [1], format="json")
    assert not_object.status_code == 400
    cluster.refresh_from_db()
    assert cluster.retiring_since is None
    _nothing_written(Node.objects.get(name="n1"))
