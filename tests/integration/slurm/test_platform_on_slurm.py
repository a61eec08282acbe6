"""The whole platform driving the real local Slurm: node import, a job submitted through the API
placed by our engine and run by Slurm to SUCCEEDED, a node failure resumed elsewhere, and the sync
cancelling runs the platform has given up on (an older attempt, a job that is over)."""

from __future__ import annotations

import logging
import os
import signal
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

from scheduler.backends import backend_run_id, get_backend, reset_backends
from scheduler.backends.base import BackendJobState
from scheduler.cycle import job_requeue, run_cycle
from scheduler.models import Cluster, Job, Node
from scheduler.services import cluster_import_nodes
from scheduler.states import JobState
from scheduler.sync import job_finish, sync_all

from .conftest import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.fixture
def slurm_platform(slurm_cluster, priorities, alice, teams):
    reset_backends()
    cluster = Cluster.objects.create(
        name="local-slurm",
        backend_kind="slurm",
        backend_config={
            "slurm_conf": str(slurm_cluster.conf),
            "partition": "gpu",
            "job_workdir": str(slurm_cluster.jobs_dir),
            "tries": 2,
            "backoff_s": 0.2,
            # Each test database numbers jobs from 1 again; the namespace keeps this run's
            # Slurm job names apart from earlier runs' still in Slurm's records.
            "run_namespace": f"t{uuid.uuid4().hex[:8]}-",
        },
    )
    created, _ = cluster_import_nodes(cluster=cluster)
    yield {"cluster": cluster, "created": created, "slurm": slurm_cluster}
    # Cancel every Slurm job of this test's namespace, whatever its attempt: a test that stops
    # half-way (or a run the platform gave up on) must not hold a node for the next tests.
    prefix = f"gp-{cluster.backend_config['run_namespace']}"
    listing = slurm_cluster.run("squeue", "-h", "-o", "%i %j", check=False).stdout
    leftovers = [line.split()[0] for line in listing.splitlines() if prefix in line]
    if leftovers:
        slurm_cluster.run("scancel", *leftovers, check=False)
    reset_backends()


def test_node_import_reads_gpus_and_topology(slurm_platform):
    assert slurm_platform["created"] == 4
    nodes = {n.name: n for n in Node.objects.filter(cluster=slurm_platform["cluster"])}
    assert all(n.gpu_count == 8 for n in nodes.values())
    assert {n.rack for n in nodes.values()} == {"r1", "r2"}
    again = cluster_import_nodes(cluster=slurm_platform["cluster"])
    assert again == (0, 0)


def test_api_submission_runs_on_the_chosen_node_to_success(slurm_platform, submit, alice):
    gpu_model = Node.objects.filter(cluster=slurm_platform["cluster"]).first().gpu_model.name
    job_id = submit(
        alice,
        name="on-slurm",
        gpus_per_worker=2,
        gpu_model=gpu_model,
        command="echo trained on $(hostname) && sleep 1",
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == "running" and job.backend_ref
    chosen = sorted({a.node.name for a in job.allocations.all()})

    def finished():
        run_cycle()
        return Job.objects.get(pk=job_id).state == "succeeded"

    wait_for(finished, 90, "the Slurm job to succeed in the platform", every=1.0)
    accounting = (
        slurm_platform["slurm"]
        .run("sacct", "-c", "-n", "-P", "--format=JobName,NodeList", check=False)
        .stdout
        + slurm_platform["slurm"].run("squeue", "-h", "-o", "%j %N", check=False).stdout
    )
    # Slurm ran it where our engine placed it (the job-completion record names the node).
    run = f"gp-{slurm_platform['cluster'].backend_config['run_namespace']}{job_id}-a1"
    record = [line for line in accounting.splitlines() if run in line]
    assert record and chosen[0] in record[0], (chosen, accounting[-800:])


def test_node_failure_resumes_the_job_elsewhere_from_its_checkpoint(slurm_platform, submit, alice):
    slurm = slurm_platform["slurm"]
    gpu_model = Node.objects.filter(cluster=slurm_platform["cluster"]).first().gpu_model.name
    marks = slurm.jobs_dir / f"resume-{os.getpid()}"
    # Attempt 1 records its pids, saves 120 s of work and runs on; later attempts record where
    # they resume from and finish.
    command = (
        f'if [ "$GPUPLATFORM_ATTEMPT" = 1 ]; then echo $$ $PPID > {marks}.pids; '
        f"echo 120 > $GPUPLATFORM_CHECKPOINT_PROGRESS; exec sleep 300; "
        f"else echo $GPUPLATFORM_RESUME_FROM_S > {marks}.resumed; fi"
    )
    job_id = submit(
        alice,
        name="resumable",
        gpus_per_worker=8,
        gpu_model=gpu_model,
        checkpoint_interval_s=60,
        command=command,
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    first_node = job.allocations.get(gpu_index=0).node.name
    wait_for(Path(f"{marks}.pids").exists, 30, "attempt 1 to start")

    def checkpointed():
        run_cycle()
        return Job.objects.get(pk=job_id).checkpointed_progress_s >= 120

    wait_for(checkpointed, 30, "the platform to see the checkpoint", every=1.0)
    worker, stepd = (int(p) for p in Path(f"{marks}.pids").read_text().split())
    try:
        for pid in (slurm.pid(f"slurmd-{first_node}"), stepd, worker):
            os.kill(pid, signal.SIGKILL)

        def resumed():
            run_cycle()
            return Path(f"{marks}.resumed").exists()

        wait_for(resumed, 120, "the job to resume on another node", every=2.0)
    finally:
        slurm.script("start")  # brings the killed slurmd back
    job.refresh_from_db()
    assert Path(f"{marks}.resumed").read_text().strip() == "120"
    assert job.attempts >= 2 and job.requeued
    assert Node.objects.get(name=first_node).state in ("down", "ready")
    assert job.events.filter(kind="requeued").exists()
    second = job.events.filter(kind="started").order_by("time").last()
    assert first_node not in second.message


def slurm_state(slurm, run_name: str) -> str:
    """Slurm's own state word for the newest job of that name ("" when Slurm has none)."""
    out = slurm.run("squeue", "-h", "-t", "all", "-n", run_name, "-o", "%i %T", check=False)
    rows = sorted(
        (int(i), state) for i, state in (line.split() for line in out.stdout.splitlines())
    )
    return rows[-1][1] if rows else ""


def start_long_job(slurm_platform, submit, alice) -> Job:
    gpu_model = Node.objects.filter(cluster=slurm_platform["cluster"]).first().gpu_model.name
    job_id = submit(
        alice, name="long", gpus_per_worker=1, gpu_model=gpu_model, command="exec sleep 300"
    ).json()["id"]
    run_cycle()
    job = Job.objects.select_related("cluster", "team").get(pk=job_id)
    assert job.state == "running" and job.attempts == 1 and job.backend_ref
    backend = get_backend(job.cluster)
    wait_for(
        lambda: backend.poll_jobs([(backend_run_id(job), 1)])[0].state is BackendJobState.RUNNING,
        30,
        "attempt 1 to run in Slurm",
    )
    return job


def test_sync_cancels_a_run_of_an_attempt_the_platform_moved_past(
    slurm_platform, submit, alice, caplog
):
    slurm = slurm_platform["slurm"]
    job = start_long_job(slurm_platform, submit, alice)
    first = f"gp-{backend_run_id(job)}-a1"
    # The platform requeues the job without stopping attempt 1 on Slurm (what a lost scancel,
    # or Slurm restarting a requeued job once its node came back, leaves behind) and starts
    # attempt 2; the cycle that does so does not sync first.
    assert job_requeue(job=job, now=timezone.now(), reason="test: the platform moved on")
    run_cycle(sync=False)
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("running", 2) and job.backend_ref
    second = f"gp-{backend_run_id(job)}-a2"
    assert slurm_state(slurm, first) == "RUNNING"
    assert slurm_state(slurm, second) in ("PENDING", "RUNNING")

    with caplog.at_level(logging.WARNING, logger="scheduler.backends.stale_runs"):
        sync_all()
    wait_for(lambda: slurm_state(slurm, first) == "CANCELLED", 15, "attempt 1 to be cancelled")
    assert f"cancelled stale run {first} (superseded: the job is on attempt 2)" in caplog.text
    # Attempt 2 is untouched and runs (on the GPUs attempt 1 held, if the engine chose them).
    wait_for(lambda: slurm_state(slurm, second) == "RUNNING", 30, "attempt 2 to run")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scheduler.backends.stale_runs"):
        sync_all()
    assert "stale run" not in caplog.text  # nothing left to cancel; attempt 2 is the wanted run
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("running", 2)
    assert slurm_state(slurm, second) == "RUNNING"


def test_sync_cancels_a_run_of_a_job_that_is_over_in_the_platform(
    slurm_platform, submit, alice, caplog
):
    slurm = slurm_platform["slurm"]
    job = start_long_job(slurm_platform, submit, alice)
    run = f"gp-{backend_run_id(job)}-a1"
    # Final in the platform while the run lives on (the cancel after commit could not reach
    # slurmctld, say).
    assert job_finish(job=job, target=JobState.FAILED, now=timezone.now(), message="test")
    assert slurm_state(slurm, run) == "RUNNING"
    with caplog.at_level(logging.WARNING, logger="scheduler.backends.stale_runs"):
        sync_all()
    wait_for(lambda: slurm_state(slurm, run) == "CANCELLED", 15, "the run to be cancelled")
    assert f"cancelled stale run {run} (the job is failed)" in caplog.text
    job.refresh_from_db()
    assert job.state == "failed"  # the platform's verdict stands; the cancel changes nothing
