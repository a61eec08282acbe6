"""Django admin refuses a cluster whose backend configuration the loop's backend registry would
refuse, with the registry's reason on ``backend_config`` (posted to the admin's real pages)."""

import json

import pytest

from scheduler.models import Cluster

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
