"""A Slurm cluster's partition is not changed while a run lives in the old one (real 22.05 and
24.11). Saved anyway, squeue (filtered by the partition) no longer listed the run: the poll said
UNKNOWN, the job was requeued as attempt 2 in the new partition, and attempt 1 kept running in
the old one, holding its node, with no sweep that looked there (``scheduler.backend_settings``).
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.utils import timezone

from scheduler.backends import backend_run_id, backend_run_ref, get_backend
from scheduler.backends.base import BackendJobState
from scheduler.loop.cycle import run_cycle
from scheduler.loop.observe import sync_all
from scheduler.models import Cluster, Job, Node
from scheduler.states import JobState
from scheduler.transitions import job_requeue

from .conftest import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.fixture
def other_partition(slurm_platform):
    """A second partition of the same nodes, made with Slurm's own tool for the test."""
    slurm = slurm_platform["slurm"]
    name = f"other{uuid.uuid4().hex[:6]}"
    slurm.run("scontrol", "create", f"PartitionName={name}", "Nodes=ALL", "State=UP")
    yield name
    slurm.run("scontrol", "delete", f"PartitionName={name}", check=False)


def _admin_post(cluster: Cluster, config: dict) -> dict:
    return {
        "name": cluster.name,
        "region": "",
        "interconnect": cluster.interconnect,
        "backend_kind": "slurm",
        "backend_config": json.dumps(config),
        "enabled": "on",
    }


@pytest.mark.slurm_smoke
def test_a_partition_change_is_refused_while_a_run_lives_and_the_run_is_polled_fine(
    slurm_platform, other_partition, submit, alice, platform_admin, client
):
    cluster = slurm_platform["cluster"]
    gpu_model = Node.objects.filter(cluster=cluster).first().gpu_model.name
    job_id = submit(
        alice, name="long", gpus_per_worker=1, gpu_model=gpu_model, command="sleep 300"
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and job.backend_ref
    backend = get_backend(cluster)

    def running_in_slurm():
        (status,) = backend.poll_jobs([backend_run_ref(job)])
        return status.state == BackendJobState.RUNNING

    wait_for(running_in_slurm, 60, "the run to start in Slurm")
    client.force_login(platform_admin)
    moved = {**cluster.backend_config, "partition": other_partition}

    response = client.post(
        f"/admin/scheduler/cluster/{cluster.pk}/change/", _admin_post(cluster, moved)
    )

    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["backend_config"]
    assert error.startswith("partition cannot change while 1 job holds or is starting GPUs")
    cluster.refresh_from_db()
    assert cluster.backend_config["partition"] == "gpu"
    for _ in range(2):
        run_cycle()
    job.refresh_from_db()
    assert (job.state, job.attempts) == (JobState.RUNNING, 1)
    assert running_in_slurm()
    assert not job.events.filter(kind="requeued").exists()


def test_a_partition_change_waits_for_a_requeued_jobs_old_run_to_be_stopped(
    slurm_platform, other_partition, submit, alice, platform_admin, client
):
    """The platform requeued a job but its scancel was lost: the job is pending and its run
    still runs in the old partition. The change was saved (no job held GPUs), and the sweep
    then listed the new partition alone: the run kept its node with nothing left to stop it.
    Now the change is refused until the sweep has stopped the run."""
    cluster, slurm = slurm_platform["cluster"], slurm_platform["slurm"]
    gpu_model = Node.objects.filter(cluster=cluster).first().gpu_model.name
    job_id = submit(
        alice, name="long", gpus_per_worker=1, gpu_model=gpu_model, command="exec sleep 300"
    ).json()["id"]
    run_cycle()
    job = Job.objects.select_related("team", "cluster").get(pk=job_id)
    ref = job.backend_ref
    assert job.state == JobState.RUNNING and ref
    backend = get_backend(cluster)

    def slurm_state() -> str:
        return slurm.run("squeue", "-h", "-t", "all", "-j", ref, "-o", "%T").stdout.strip()

    wait_for(lambda: slurm_state() == "RUNNING", 60, "the run to start in Slurm")
    assert job_requeue(job=job, now=timezone.now(), reason="test: the scancel was lost")
    client.force_login(platform_admin)
    moved = {**cluster.backend_config, "partition": other_partition}
    url = f"/admin/scheduler/cluster/{cluster.pk}/change/"

    response = client.post(url, _admin_post(cluster, moved))

    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["backend_config"]
    assert error.startswith("partition cannot change while 1 job's earlier run is still being")
    assert Cluster.objects.get(pk=cluster.pk).backend_config["partition"] == "gpu"
    assert slurm_state() == "RUNNING"

    sync_all()  # the sweep stops the run
    wait_for(lambda: slurm_state() in ("CANCELLED", ""), 60, "the sweep's scancel")
    assert not backend.live_runs(backend_run_id(job)), "the run is still listed"
    response = client.post(url, _admin_post(cluster, moved))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Cluster.objects.get(pk=cluster.pk).backend_config["partition"] == other_partition
