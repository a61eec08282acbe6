"""The reproducibility record of a job run by the real local Slurm: shown on the job page and
exported (API and portal). The local Slurm has no container plugin, so no image digest is
resolved; the record says so and keeps instead the sha256 of the batch script submitted (checked
against the script slurmctld stored) and the Slurm version."""

from __future__ import annotations

import hashlib
import json

import pytest

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job, Node

from .conftest import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.mark.slurm_smoke
def test_record_of_a_slurm_job_is_shown_and_exported(
    slurm_platform, submit, alice, bob, api_as, client
):
    gpu_model = Node.objects.filter(cluster=slurm_platform["cluster"]).first().gpu_model.name
    job_id = submit(
        alice,
        name="repro-on-slurm",
        image="registry.example.com/vision/train:1.4",
        command="echo reproducible && sleep 4",
        env={"API_TOKEN": "tok-secret-1", "LR": "0.1"},
        code_ref="git:0123abc",
        dataset="imagenet-1k",
        dataset_version="2012-v2",
        gpus_per_worker=2,
        gpu_model=gpu_model,
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == "running" and job.backend_ref

    record = api_as(alice).get(f"/api/v1/jobs/{job_id}/records/1/").json()
    assert record["cluster"]["backend"] == "slurm"
    assert record["backend_ref"] == job.backend_ref
    assert record["image"]["reference"] == "registry.example.com/vision/train:1.4"
    assert record["image"]["digest"] is None
    assert "without a container plugin" in record["image"]["note"]
    assert record["runtime"]["slurm_version"].startswith("slurm")
    assert record["env"]["API_TOKEN"] == "[redacted]" and record["env"]["LR"] == "0.1"
    assert (record["code_ref"], record["dataset"]["version"]) == ("git:0123abc", "2012-v2")
    placed = sorted({a.node.name for a in job.allocations.all()})
    assert [p["node"] for p in record["placement"]] == placed
    assert record["gpu_models"] == [gpu_model]
    # The hash is that of the script slurmctld holds for the job.
    stored = slurm_platform["slurm"].run(
        "scontrol", "write", "batch_script", job.backend_ref, "-", check=False
    )
    assert stored.returncode == 0 and stored.stdout.startswith("#!"), stored.stderr
    digest = hashlib.sha256(stored.stdout.encode()).hexdigest()
    assert record["runtime"]["batch_script_sha256"] == digest
    assert "tok-secret-1" not in json.dumps(record)

    def finished():
        run_cycle()
        return Job.objects.get(pk=job_id).state == "succeeded"

    wait_for(finished, 90, "the Slurm job to succeed", every=1.0)
    # Shown on the job page and exported from the portal; another team sees neither.
    client.force_login(alice)
    page = client.get(f"/jobs/{job_id}/").content.decode()
    assert record["runtime"]["batch_script_sha256"] in page and "git:0123abc" in page
    export = client.get(f"/jobs/{job_id}/records/1.json")
    assert json.loads(export.content) == record
    assert api_as(bob).get(f"/api/v1/jobs/{job_id}/records/1/").status_code == 404
