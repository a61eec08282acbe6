"""Django admin shows the platform's history and never rewrites it: node events, jobs with their
events, allocations, the audit log and quota requests are view-only there (an add, change or
delete POST is a 403 and changes nothing, posted to the admin's real pages). Teams are billed
from these rows and admins read them to learn what happened. The rest of the history (attempt
records, billing's meter rows and statements, notifications) is not in Django admin at all."""

from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job, Node, NodeEvent
from scheduler.services import node_drain
from telemetry.models import JobIdleFlag, NodeTelemetry
from tenants import quotas as quota_services

pytestmark = pytest.mark.django_db

HISTORY_IN_ADMIN = [
    "scheduler.nodeevent",
    "scheduler.job",
    "scheduler.allocation",
    "tenants.auditentry",
    "tenants.quotarequest",
]
# Kept by the telemetry ingest alone (what the agent last reported, why a job was flagged idle);
# every field was read-only, yet the add page took a POST and failed on the missing node or
# job (a 500), and delete dropped the ingest's bookkeeping.
TELEMETRY_BOOKKEEPING = ["telemetry.nodetelemetry", "telemetry.jobidleflag"]
HISTORY_NOT_IN_ADMIN = [
    "scheduler.jobevent",
    "scheduler.attemptrecord",
    "billing.usagerecord",
    "billing.usagedaily",
    "billing.usagejobmonth",
    "billing.allocationmeter",
    "billing.egresscharge",
    "billing.lostwork",
    "billing.statement",
    "billing.statementline",
    "billing.statementegressline",
    "billing.adjustment",
    "billing.budgetalert",
    "notifications.event",
    "notifications.message",
    "notifications.deliveryattempt",
    "telemetry.gpusample",
    "telemetry.gpurollup",
    "telemetry.gpuerrorevent",
]


@pytest.fixture
def history(platform, gpu_models, submit, teams):
    """One row of each: a drained node (its event and audit entry), a running job (its events
    and allocation), a quota request, the node's telemetry and the job's idle flag."""
    admin, alice = platform["admin"], platform["alice"]
    node_drain(user=admin, node_id=Node.objects.get(name="n4").pk, reason="cabling")
    job_id = submit(alice, gpu_model="h100-80gb").json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.allocations.exists() and job.events.exists()
    quota_services.quota_request_create(
        user=admin,
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=4,
        reason="deadline",
    )
    now = timezone.now()
    NodeTelemetry.objects.create(node=Node.objects.get(name="n1"), samples_received=12)
    JobIdleFlag.objects.create(
        job=job, idle_since=now - timedelta(hours=1), flagged_at=now, utilization=0.01
    )


def _rows(label: str) -> list[dict]:
    return list(apps.get_model(label).objects.order_by("pk").values())


@pytest.mark.parametrize("label", HISTORY_IN_ADMIN + TELEMETRY_BOOKKEEPING)
def test_admin_shows_history_and_refuses_to_add_change_or_delete_it(
    history, platform, client, label
):
    """Node events were editable and deletable: an admin could turn a node's "failed" into
    "recovered", or delete it, and the node's history (what quarantine counted, what the
    cluster page and its stream showed) said what never happened. A quota request could be
    deleted: an approved temporary one then never expired, its extra GPUs kept for good."""
    app_label, model_name = label.split(".")
    base = f"/admin/{app_label}/{model_name}/"
    before = _rows(label)
    assert before, f"the fixture made no {label}"
    pk = apps.get_model(label).objects.order_by("pk").first().pk
    client.force_login(platform["admin"])

    assert client.get(base).status_code == 200
    assert client.get(f"{base}{pk}/change/").status_code == 200  # shown, view only
    assert client.post(f"{base}{pk}/change/", {"message": "forged"}).status_code == 403
    assert client.post(f"{base}{pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.get(f"{base}add/").status_code == 403
    assert client.post(f"{base}add/", {"message": "forged"}).status_code == 403
    # Bulk delete is no action of the list either.
    client.post(base, {"action": "delete_selected", "_selected_action": [pk], "post": "yes"})
    assert _rows(label) == before


@pytest.mark.parametrize("label", HISTORY_NOT_IN_ADMIN)
def test_the_rest_of_the_history_is_not_in_admin(platform, client, label):
    """Guard: registering one of these later must make it view-only too (a 403 here)."""
    app_label, model_name = label.split(".")
    apps.get_model(label)  # the name is a model's
    client.force_login(platform["admin"])
    assert client.get(f"/admin/{app_label}/{model_name}/add/").status_code in (403, 404)


def test_admin_refuses_to_delete_a_node_with_history(history, platform, client):
    """Deleting a node took its events along (a cascade): with them view-only, admin refuses."""
    node = Node.objects.get(name="n4")
    events = list(NodeEvent.objects.filter(node=node).values())
    assert events
    client.force_login(platform["admin"])
    response = client.post(f"/admin/scheduler/node/{node.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert list(NodeEvent.objects.filter(node=node).values()) == events
