"""The whole platform driving the real local Slurm: node import, a job submitted through the API
placed by our engine and run by Slurm to SUCCEEDED with its output in the logs API, a node
failure resumed elsewhere, the sync cancelling runs the platform has given up on (an older
attempt, a job that is over), and Slurm output of an unknown shape stopping the sync with a named
error before it changes any job or node."""

from __future__ import annotations

import logging
import os
import sys
import uuid

import pytest
from django.utils import timezone

from scheduler.backends import backend_run_id, backend_run_ref, get_backend, reset_backends
from scheduler.backends.base import BackendJobState
from scheduler.loop.cycle import run_cycle
from scheduler.loop.observe import sync_all
from scheduler.models import Cluster, Job, Node
from scheduler.services import cluster_import_nodes
from scheduler.states import JobState
from scheduler.transitions import job_finish, job_requeue

from .conftest import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def test_node_import_reads_gpus_and_topology(slurm_platform):
    assert slurm_platform["created"] == 4
    nodes = {n.name: n for n in Node.objects.filter(cluster=slurm_platform["cluster"])}
    assert all(n.gpu_count == 8 for n in nodes.values())
    assert {n.rack for n in nodes.values()} == {"r1", "r2"}
    again = cluster_import_nodes(cluster=slurm_platform["cluster"])
    assert again == (0, 0)


@pytest.mark.slurm_smoke
def test_api_submission_runs_on_the_chosen_node_to_success(
    slurm_platform, submit, alice, bob, api_as
):
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
    # Its output, through the API (read through the command prefix on 24.11).
    logs = api_as(alice).get(f"/api/v1/jobs/{job_id}/logs/").json()
    assert (logs["attempt"], logs["finished"], logs["state"]) == (1, True, "succeeded")
    assert "trained on " in logs["text"]
    assert (
        api_as(alice).get(f"/api/v1/jobs/{job_id}/logs/", {"cursor": logs["cursor"]}).json()["text"]
        == ""
    )
    assert api_as(bob).get(f"/api/v1/jobs/{job_id}/logs/").status_code == 404


def test_node_failure_resumes_the_job_elsewhere_from_its_checkpoint(slurm_platform, submit, alice):
    slurm = slurm_platform["slurm"]
    gpu_model = Node.objects.filter(cluster=slurm_platform["cluster"]).first().gpu_model.name
    pids = slurm.file(f"resume-{os.getpid()}-{uuid.uuid4().hex[:6]}.pids")
    resumed = slurm.file(f"resume-{os.getpid()}-{uuid.uuid4().hex[:6]}.resumed")
    # Attempt 1 records its pids, saves 120 s of work and runs on; later attempts record where
    # they resume from and finish.
    command = (
        f'if [ "$GPUPLATFORM_ATTEMPT" = 1 ]; then echo $$ $PPID > {pids}; '
        f"echo 120 > $GPUPLATFORM_CHECKPOINT_PROGRESS; exec sleep 300; "
        f"else echo $GPUPLATFORM_RESUME_FROM_S > {resumed}; fi"
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
    wait_for(pids.exists, 30, "attempt 1 to start")

    def checkpointed():
        run_cycle()
        return Job.objects.get(pk=job_id).checkpointed_progress_s >= 120

    wait_for(checkpointed, 30, "the platform to see the checkpoint", every=1.0)
    run = f"gp-{slurm_platform['cluster'].backend_config['run_namespace']}{job_id}-a1"
    slurm_job_id = slurm.run("squeue", "-h", "-n", run, "-o", "%i").stdout.strip()
    try:
        slurm.kill_node(first_node, slurm_job_id)

        def resumed_elsewhere():
            run_cycle()
            return resumed.exists()

        wait_for(resumed_elsewhere, 120, "the job to resume on another node", every=2.0)
    finally:
        assert slurm.script("start").returncode == 0  # brings the killed slurmd back
    job.refresh_from_db()
    assert resumed.read_text().strip() == "120"
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
        lambda: backend.poll_jobs([backend_run_ref(job, 1)])[0].state is BackendJobState.RUNNING,
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

    with caplog.at_level(logging.WARNING, logger="scheduler.loop.stale_runs"):
        sync_all()
    wait_for(lambda: slurm_state(slurm, first) == "CANCELLED", 15, "attempt 1 to be cancelled")
    assert f"cancelled stale run {first} (superseded: the job is on attempt 2)" in caplog.text
    # Attempt 2 is untouched and runs (on the GPUs attempt 1 held, if the engine chose them).
    wait_for(lambda: slurm_state(slurm, second) == "RUNNING", 30, "attempt 2 to run")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scheduler.loop.stale_runs"):
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
    with caplog.at_level(logging.WARNING, logger="scheduler.loop.stale_runs"):
        sync_all()
    wait_for(lambda: slurm_state(slurm, run) == "CANCELLED", 15, "the run to be cancelled")
    assert f"cancelled stale run {run} (the job is failed)" in caplog.text
    job.refresh_from_db()
    assert job.state == "failed"  # the platform's verdict stands; the cancel changes nothing


# A stand-in for a future Slurm: runs the real command (through the cluster's own prefix) and
# reshapes its JSON as no supported generation prints it.
RESHAPE = r"""
import json, subprocess, sys
what, command = sys.argv[1], sys.argv[2:]
proc = subprocess.run(command, capture_output=True, text=True)
out = proc.stdout
if proc.returncode == 0 and "--json" in command and what in command:
    data = json.loads(out)
    if what == "squeue":
        for job in data["jobs"]:
            job["job_state"] = {"current": job["job_state"]}
    else:
        data["node_list"] = data.pop("sinfo", None) or data.pop("nodes")
    out = json.dumps(data)
sys.stdout.write(out)
sys.stderr.write(proc.stderr)
sys.exit(proc.returncode)
"""


@pytest.mark.parametrize("reshaped", ["squeue", "sinfo"])
def test_unknown_output_shape_is_a_named_error_and_changes_nothing(
    slurm_platform, submit, alice, tmp_path, reshaped
):
    cluster = slurm_platform["cluster"]
    job = start_long_job(slurm_platform, submit, alice)
    holding = sorted(job.allocations.filter(ended_at__isnull=True).values_list("id", flat=True))
    nodes_before = sorted(Node.objects.filter(cluster=cluster).values_list("name", "state"))
    script = tmp_path / "reshape.py"
    script.write_text(RESHAPE)
    config = dict(cluster.backend_config)
    prefix = [sys.executable, str(script), reshaped, *config.get("command_prefix", [])]
    Cluster.objects.filter(pk=cluster.pk).update(
        backend_config={**config, "command_prefix": prefix}
    )
    reset_backends()

    sync_all()
    cluster.refresh_from_db()
    assert not cluster.backend_available
    field = "jobs[0].job_state" if reshaped == "squeue" else "sinfo"
    assert f"{reshaped} --json: unsupported output (Slurm " in cluster.backend_error
    assert f"{field}:" in cluster.backend_error, cluster.backend_error
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("running", 1)
    live = sorted(job.allocations.filter(ended_at__isnull=True).values_list("id", flat=True))
    assert live == holding
    assert sorted(Node.objects.filter(cluster=cluster).values_list("name", "state")) == (
        nodes_before
    )
    assert not job.events.filter(kind__in=["requeued", "failed", "cancelled"]).exists()

    # The supported shape again: the next sync answers and the job runs on.
    Cluster.objects.filter(pk=cluster.pk).update(backend_config=config)
    reset_backends()
    sync_all()
    cluster.refresh_from_db()
    assert cluster.backend_available and not cluster.backend_error
    job.refresh_from_db()
    assert job.state == "running"
