"""A Slurm cluster's partition is not changed while a run lives in the old one (real 22.05 and
24.11). Saved anyway, squeue (filtered by the partition) no longer listed the run: the poll said
UNKNOWN, the job was requeued as attempt 2 in the new partition, and attempt 1 kept running in
the old one, holding its node, with no sweep that looked there (``scheduler.backend_settings``).
"""

from __future__ import annotations

import json
import uuid

import pytest

from scheduler.backends import backend_run_ref, get_backend
from scheduler.backends.base import BackendJobState
from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, Job, Node
from scheduler.states import JobState

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
