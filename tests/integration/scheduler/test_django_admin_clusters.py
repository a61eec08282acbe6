"""Django admin refuses a cluster whose backend configuration the loop's backend registry would
refuse, with the registry's reason on ``backend_config`` (posted to the admin's real pages)."""

import json

import pytest

from scheduler.models import Cluster, Job
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db


def _cluster_post(name, kind, config):
    return {
        "name": name,
        "region": "eu-west",
        "interconnect": "infiniband",
        "backend_kind": kind,
        "backend_config": config if isinstance(config, str) else json.dumps(config),
        "enabled": "on",
        "backend_available": "on",
        "backend_error": "",
        "backend_checked_at_0": "",
        "backend_checked_at_1": "",
    }


@pytest.mark.parametrize(
    "kind,config,reason",
    [
        ("slurm", {"partiton": "gpu"}, "unknown slurm backend settings: ['partiton']"),
        ("slurm", {"extra_sbatch_args": ["--requeue"]}, "must not contain --requeue"),
        ("kubernetes", {"namespace": "Team_A"}, "namespace 'Team_A' is not a DNS-1123 label"),
        ("simulated", {"run_namespace": "Prod1"}, "run_namespace 'Prod1': use lowercase"),
        ("simulated", [1, 2], "must be a JSON object of backend settings"),
    ],
    ids=["slurm-typo", "slurm-requeue", "k8s-namespace", "run-namespace", "not-an-object"],
)
def test_admin_refuses_a_backend_config_the_loop_cannot_build(
    platform, client, kind, config, reason
):
    client.force_login(platform["admin"])
    response = client.post("/admin/scheduler/cluster/add/", _cluster_post("cloud", kind, config))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["backend_config"]
    assert any(reason in e for e in errors), errors
    assert not Cluster.objects.filter(name="cloud").exists()
    # and on an existing cluster's page, where the loop would pick the change up
    cluster = platform["cluster"]
    response = client.post(
        f"/admin/scheduler/cluster/{cluster.pk}/change/", _cluster_post("test", kind, config)
    )
    assert response.status_code == 200
    cluster.refresh_from_db()
    assert cluster.backend_kind == "simulated" and cluster.backend_config == {"seed": 1}


def test_admin_saves_a_backend_config_the_loop_can_build(platform, client):
    from scheduler.backends import get_backend, reset_backends

    client.force_login(platform["admin"])
    config = {"partition": "gpu", "run_namespace": "prod-", "dry_run": True}
    response = client.post("/admin/scheduler/cluster/add/", _cluster_post("hpc", "slurm", config))
    assert response.status_code == 302, response.context["adminform"].form.errors
    cluster = Cluster.objects.get(name="hpc")
    assert cluster.backend_config == config
    reset_backends()
    try:
        assert get_backend(cluster).partition == "gpu"
    finally:
        reset_backends()


@pytest.mark.parametrize(
    "region,reason",
    [
        ("EU-West", "'EU-West' is not a region name"),
        ("eu west", "'eu west' is not a region name"),
        ("eu-west-", "'eu-west-' is not a region name"),
    ],
)
def test_admin_refuses_a_region_routing_cannot_match(platform, client, region, reason):
    """Saved as posted, "EU-West" was a region no dataset residency or job's regions (checked
    by region_error: lowercase) ever matched, so routing silently kept such jobs off it."""
    client.force_login(platform["admin"])
    post = _cluster_post("cloud", "simulated", {}) | {"region": region}
    response = client.post("/admin/scheduler/cluster/add/", post)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["region"]
    assert any(reason in e for e in errors), errors
    assert not Cluster.objects.filter(name="cloud").exists()
    cluster = platform["cluster"]
    post = _cluster_post("test", "simulated", {"seed": 1}) | {"region": region}
    response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
    assert response.status_code == 200
    cluster.refresh_from_db()
    assert cluster.region == ""


@pytest.mark.parametrize("region", ["us-east-1", ""])
def test_admin_saves_a_region_name_or_none(platform, client, region):
    client.force_login(platform["admin"])
    cluster = platform["cluster"]
    post = _cluster_post("test", "simulated", {"seed": 1}) | {"region": region}
    response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
    assert response.status_code == 302, response.context["adminform"].form.errors
    cluster.refresh_from_db()
    assert cluster.region == region


def test_a_backend_config_changed_in_admin_reaches_the_next_backend_use(platform, client):
    """The registry kept one backend object per cluster for the life of the process: after an
    admin moved a Slurm cluster to another partition or mapped a team to its Unix account, every
    worker kept submitting with the old settings (jobs in the old partition, the team's jobs
    refused for want of an account) until it was restarted."""
    from scheduler.backends import get_backend, reset_backends

    reset_backends()
    client.force_login(platform["admin"])
    config = {"partition": "gpu", "run_namespace": "prod-", "dry_run": True}
    response = client.post("/admin/scheduler/cluster/add/", _cluster_post("hpc", "slurm", config))
    assert response.status_code == 302, response.context["adminform"].form.errors
    cluster = Cluster.objects.get(name="hpc")
    try:
        first = get_backend(Cluster.objects.get(pk=cluster.pk))
        assert first.partition == "gpu" and first.team_accounts == {}
        # Unchanged, the same object (and its connections and caches) serves every use.
        assert get_backend(Cluster.objects.get(pk=cluster.pk)) is first

        config = config | {"partition": "a100", "team_accounts": {"vision": "gp-vision"}}
        post = _cluster_post("hpc", "slurm", config)
        response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
        assert response.status_code == 302, response.context["adminform"].form.errors
        changed = get_backend(Cluster.objects.get(pk=cluster.pk))
        assert changed.partition == "a100" and changed.team_accounts == {"vision": "gp-vision"}
        assert get_backend(Cluster.objects.get(pk=cluster.pk)) is changed

        # So does a change of kind.
        post = _cluster_post("hpc", "simulated", {"seed": 3})
        response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
        assert response.status_code == 302, response.context["adminform"].form.errors
        simulated = get_backend(Cluster.objects.get(pk=cluster.pk))
        assert simulated.kind == "simulated" and simulated.seed == 3
    finally:
        reset_backends()


def test_admin_does_not_set_what_the_loop_records(platform, client):
    """Whether the backend answers, its error and when it was checked are the loop's record.
    Saved with the page (a region edit, the boxes as they were when the page loaded), a failing
    cluster read as reachable and took pending jobs, or a healthy one as unreachable."""
    from scheduler.services import cluster_backend_mark

    cluster = platform["cluster"]
    cluster_backend_mark(cluster=cluster, error="sbatch: error: invalid partition")
    cluster.refresh_from_db()
    checked_at = cluster.backend_checked_at
    client.force_login(platform["admin"])
    post = _cluster_post("test", "simulated", {"seed": 1}) | {
        "backend_checked_at_0": "2020-01-01",
        "backend_checked_at_1": "00:00:00",
    }
    response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
    assert response.status_code == 302, response.context["adminform"].form.errors
    cluster.refresh_from_db()
    assert cluster.backend_available is False
    assert cluster.backend_error == "sbatch: error: invalid partition"
    assert cluster.backend_checked_at == checked_at


def test_admin_cannot_rename_a_cluster(platform, client, submit):
    """Jobs name their clusters (``Job.routing``), and a name no cluster has matches nothing:
    renamed from "test" to "onprem", the cluster left alice's job, which may run on "test"
    only, waiting for good. A new cluster still chooses its name."""
    job_id = submit(platform["alice"], routing={"clusters": ["test"]}).json()["id"]
    cluster = platform["cluster"]
    client.force_login(platform["admin"])
    post = _cluster_post("onprem", "simulated", {"seed": 1})
    response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
    assert response.status_code == 302, response.context["adminform"].form.errors
    cluster.refresh_from_db()
    assert cluster.name == "test"
    assert Job.objects.get(pk=job_id).routing["clusters"] == ["test"]
    response = client.post("/admin/scheduler/cluster/add/", _cluster_post("cloud", "simulated", {}))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Cluster.objects.filter(name="cloud").exists()


@pytest.fixture
def cycle_requested(settings):
    """The embedded loop's wake-up event, which a requested cycle sets (after commit)."""
    from scheduler.triggers import wakeup_event

    settings.REDIS_URL = ""
    event = wakeup_event()
    event.clear()
    yield event
    event.clear()


def test_admin_cluster_saves_are_audited_and_request_a_cycle(
    platform, client, cycle_requested, django_capture_on_commit_callbacks
):
    """As ``cluster_routing_set`` does: an entry with the state before and after, and a cycle,
    since where pending jobs may run changed. Saved in admin, a cluster disabled or moved to
    another region left no trace, and pending jobs waited for the next periodic cycle."""
    admin, cluster = platform["admin"], platform["cluster"]
    client.force_login(admin)

    cycle_requested.clear()
    post = _cluster_post("test", "simulated", {"seed": 1}) | {"region": "eu-west", "enabled": ""}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
    assert response.status_code == 302, response.context["adminform"].form.errors
    entry = AuditEntry.objects.get(action="cluster.set")
    assert (entry.before["region"], entry.before["enabled"]) == ("", True)
    assert (entry.after["region"], entry.after["enabled"]) == ("eu-west", False)
    assert entry.actor == admin and entry.comment == "via Django admin"
    assert entry.target_id == str(cluster.pk)
    assert cycle_requested.is_set()

    cycle_requested.clear()
    post = _cluster_post("cloud", "simulated", {"seed": 2})
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/admin/scheduler/cluster/add/", post)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert AuditEntry.objects.get(action="cluster.create").after["name"] == "cloud"
    assert cycle_requested.is_set()

    # A refused save writes nothing and asks for nothing.
    cycle_requested.clear()
    post = _cluster_post("test", "simulated", {"seed": 1}) | {"region": "EU-West"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)
    assert response.status_code == 200
    assert AuditEntry.objects.filter(action__startswith="cluster.").count() == 2
    assert not cycle_requested.is_set()

    # A cluster without history is deleted, audited, and the loop hears of it.
    cloud = Cluster.objects.get(name="cloud")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/scheduler/cluster/{cloud.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert AuditEntry.objects.get(action="cluster.delete").before["name"] == "cloud"
    assert cycle_requested.is_set()
