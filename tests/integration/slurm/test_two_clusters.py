"""Two clusters registered at once, one a real Slurm and one simulated (issue 25's live test):
jobs with routing constraints land only where they are allowed, and one ledger of quotas and
fair share counts both clusters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, ClusterDataset, Dataset, Job, Node, TeamClusterAccess
from scheduler.snapshot import build_snapshot
from tenants.models import Quota, Team

from .conftest import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.fixture
def two_clusters(slurm_platform):
    """The test Slurm (4 nodes x 8 GPUs) in region eu-west, holding dataset c4 which must stay
    in eu-west, and a simulated cloud of two nodes of the same GPU model in us-east."""
    onprem = slurm_platform["cluster"]
    Cluster.objects.filter(pk=onprem.pk).update(region="eu-west", interconnect="infiniband")
    gpu_model = Node.objects.filter(cluster=onprem).first().gpu_model
    cloud = Cluster.objects.create(name="cloud", backend_kind="simulated", region="us-east")
    for i in (1, 2):
        Node.objects.create(cluster=cloud, name=f"cloud-{i}", gpu_model=gpu_model, gpu_count=8)
    c4 = Dataset.objects.create(name="c4", size_gb=200, residency_regions=["eu-west"])
    ClusterDataset.objects.create(cluster=onprem, dataset=c4)
    return {**slurm_platform, "onprem": onprem, "cloud": cloud, "gpu_model": gpu_model}


def _cluster_of(job_id: int) -> str:
    return Job.objects.select_related("cluster").get(pk=job_id).cluster.name


@pytest.mark.slurm_smoke
def test_constrained_jobs_land_where_allowed_on_slurm_and_simulated(two_clusters, submit, alice):
    model = two_clusters["gpu_model"].name
    slurm = two_clusters["slurm"]
    cmd = "echo ran on $(hostname)"
    resident = submit(alice, name="resident", gpu_model=model, dataset="c4", command=cmd)
    to_cloud = submit(alice, name="to-cloud", gpu_model=model, routing={"clusters": ["cloud"]})
    by_region = submit(
        alice, name="by-region", gpu_model=model, command=cmd, routing={"regions": ["eu-west"]}
    )
    for response in (resident, to_cloud, by_region):
        assert response.status_code == 201, response.json()
    ids = {r.json()["name"]: r.json()["id"] for r in (resident, to_cloud, by_region)}
    run_cycle()

    assert {name: _cluster_of(pk) for name, pk in ids.items()} == {
        "resident": "local-slurm",
        "to-cloud": "cloud",
        "by-region": "local-slurm",
    }
    # The Slurm ones really run on Slurm, and to success.
    namespace = two_clusters["onprem"].backend_config["run_namespace"]

    def slurm_jobs_done():
        run_cycle()
        states = {Job.objects.get(pk=ids[n]).state for n in ("resident", "by-region")}
        return states == {"succeeded"}

    wait_for(slurm_jobs_done, 90, "the two Slurm jobs to succeed", every=1.0)
    accounting = slurm.run("sacct", "-c", "-n", "-P", "--format=JobName", check=False).stdout
    for name in ("resident", "by-region"):
        assert f"gp-{namespace}{ids[name]}-a1" in accounting, accounting[-600:]
    # Each start says where and why there.
    resident_job = Job.objects.get(pk=ids["resident"])
    (route,) = resident_job.events.filter(kind="routed")
    excluded = {a["pool"]: a["excluded"] for a in route.data["alternatives"]}
    assert excluded[f"{model}@cloud"].startswith("dataset c4 must stay in eu-west")


def test_a_team_held_to_one_cluster_and_a_job_no_cluster_can_hold(two_clusters, submit, alice):
    model = two_clusters["gpu_model"].name
    TeamClusterAccess.objects.create(
        team=Team.objects.get(slug="vision"), cluster=two_clusters["cloud"]
    )
    held = submit(alice, name="held", gpu_model=model).json()["id"]
    # c4 may not leave eu-west and vision may use only the us-east cloud: nowhere to run.
    stuck = submit(alice, name="stuck", gpu_model=model, dataset="c4").json()["id"]
    run_cycle()
    assert _cluster_of(held) == "cloud"
    stuck_job = Job.objects.get(pk=stuck)
    assert stuck_job.state == "pending"
    assert stuck_job.why_pending.startswith("no allowed cluster can ever hold it")
    assert "team vision may not use cluster local-slurm" in stuck_job.why_pending
    assert "dataset c4 must stay in eu-west" in stuck_job.why_pending


def test_one_quota_and_one_fair_share_ledger_across_both_clusters(two_clusters, submit, alice):
    model = two_clusters["gpu_model"]
    vision = Team.objects.get(slug="vision")
    Quota.objects.create(team=vision, gpu_model=model, guaranteed_gpus=8, borrow_limit_gpus=0)
    on_slurm = submit(
        alice,
        name="q-slurm",
        gpu_model=model.name,
        gpus_per_worker=4,
        command="sleep 60",
        routing={"clusters": ["local-slurm"]},
    ).json()["id"]
    on_cloud = submit(
        alice,
        name="q-cloud",
        gpu_model=model.name,
        gpus_per_worker=4,
        routing={"clusters": ["cloud"]},
    ).json()["id"]
    run_cycle()
    assert (_cluster_of(on_slurm), _cluster_of(on_cloud)) == ("local-slurm", "cloud")
    # 4 + 4 of vision's 8 GPUs are used, on two clusters: a third job waits on the one quota,
    # though both clusters have room.
    third = submit(alice, name="q-third", gpu_model=model.name, gpus_per_worker=4).json()["id"]
    run_cycle()
    third_job = Job.objects.get(pk=third)
    assert third_job.state == "pending"
    assert third_job.why_pending == (
        f"quota: team vision would use 12 {model.name} GPUs, above its limit of 8 "
        "(8 guaranteed + 0 borrowable); 8 in use"
    )
    # Fair share reads one usage per team: an hour of both jobs is 8 GPU-hours, both clusters'.
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk__in=[on_slurm, on_cloud]).update(started_at=an_hour_ago)
    snapshot, _ = build_snapshot(now=timezone.now())
    assert {j.id for j in snapshot.running} == {str(on_slurm), str(on_cloud)}
    usage_gpu_s = {t.name: t.usage_gpu_s for t in snapshot.teams}["vision"]
    assert 0.99 * 8 * 3600 < usage_gpu_s < 1.01 * 8 * 3600, usage_gpu_s
