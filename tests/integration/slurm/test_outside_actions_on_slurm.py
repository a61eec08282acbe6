"""A platform job's run acted on outside the platform, on the real local Slurm: a site admin's
``scancel`` ends the job cancelled (its GPUs and billing end, nothing is resubmitted, no node is
blamed), and a run Slurm reports in a state word no supported Slurm prints is left alone (no
requeue, no cancel) until Slurm says something the platform understands.

How each Slurm state maps is tested on captured output in tests/unit/backends/test_slurm_parsers.py
(an admin's scancel, suspend and hold, and a TIMEOUT, on both versions)."""

from __future__ import annotations

import logging
import sys

import pytest

from scheduler.backends import backend_run_id, reset_backends
from scheduler.loop.cycle import run_cycle
from scheduler.loop.observe import sync_all
from scheduler.models import Cluster, Job, NodeEvent
from scheduler.states import JobState

from .conftest import wait_for
from .test_platform_on_slurm import slurm_state, start_long_job

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.mark.slurm_smoke
def test_site_admin_scancel_ends_the_job_cancelled_and_nothing_more(slurm_platform, submit, alice):
    slurm = slurm_platform["slurm"]
    job = start_long_job(slurm_platform, submit, alice)
    run = f"gp-{backend_run_id(job)}-a1"
    nodes = {a.node for a in job.allocations.all()}
    # By Slurm job id, as an admin types it, not by our run name.
    slurm.run("scancel", job.backend_ref)

    def cancelled():
        run_cycle()
        return Job.objects.get(pk=job.pk).state == JobState.CANCELLED

    wait_for(cancelled, 30, "the platform to see the cancel", every=1.0)
    run_cycle()  # a later cycle changes nothing: the job is over, not lost
    job.refresh_from_db()
    assert (job.state, job.attempts, job.requeued, job.exit_code) == ("cancelled", 1, False, None)
    event = job.events.get(kind="cancelled")
    # Slurm may not have recorded the signal yet when the platform first sees the cancel.
    assert event.message.startswith("cancelled on the cluster, outside the platform")
    assert not job.events.filter(kind__in=["requeued", "failed", "succeeded"]).exists()
    # Billing ends where the platform recorded the end: every allocation closed at finished_at.
    ends = set(job.allocations.values_list("ended_at", flat=True))
    assert ends == {job.finished_at}
    # Not a node failure: the nodes stay in service with no event against them.
    for node in nodes:
        node.refresh_from_db()
        assert node.state == "ready"
        assert not NodeEvent.objects.filter(node=node, kind=NodeEvent.Kind.FAILED).exists()
    assert slurm_state(slurm, run) == "CANCELLED"
    assert slurm_state(slurm, f"gp-{backend_run_id(job)}-a2") == ""


# A stand-in for a newer Slurm: the real command (through the cluster's own prefix) with every
# job's state word replaced by one no supported Slurm prints.
NEW_STATE = r"""
import json, subprocess, sys
command = sys.argv[1:]
proc = subprocess.run(command, capture_output=True, text=True)
out = proc.stdout
if proc.returncode == 0 and "--json" in command and "squeue" in command:
    data = json.loads(out)
    for job in data["jobs"]:
        state = job["job_state"]
        job["job_state"] = ["SOMETHING_NEW"] if isinstance(state, list) else "SOMETHING_NEW"
    out = json.dumps(data)
sys.stdout.write(out)
sys.stderr.write(proc.stderr)
sys.exit(proc.returncode)
"""


def test_a_run_in_a_state_no_supported_slurm_prints_is_left_alone(
    slurm_platform, submit, alice, tmp_path, caplog
):
    slurm = slurm_platform["slurm"]
    cluster = slurm_platform["cluster"]
    job = start_long_job(slurm_platform, submit, alice)
    run = f"gp-{backend_run_id(job)}-a1"
    holding = sorted(job.allocations.filter(ended_at__isnull=True).values_list("id", flat=True))
    script = tmp_path / "new_state.py"
    script.write_text(NEW_STATE)
    config = dict(cluster.backend_config)
    prefix = [sys.executable, str(script), *config.get("command_prefix", [])]
    Cluster.objects.filter(pk=cluster.pk).update(
        backend_config={**config, "command_prefix": prefix}
    )
    reset_backends()

    with caplog.at_level(logging.WARNING, logger="scheduler.backends.slurm"):
        sync_all()
        sync_all()
    # Not "Slurm has no record of the run": that would requeue the job and then cancel the run
    # that still goes on as a superseded attempt.
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("running", 1)
    live = sorted(job.allocations.filter(ended_at__isnull=True).values_list("id", flat=True))
    assert live == holding
    assert not job.events.filter(kind__in=["requeued", "failed", "cancelled"]).exists()
    assert slurm_state(slurm, run) == "RUNNING"
    assert f"{run}: Slurm state SOMETHING_NEW is not one this backend knows" in caplog.text
    cluster.refresh_from_db()
    assert cluster.backend_available

    # Slurm's usual words again: the run is followed as before.
    Cluster.objects.filter(pk=cluster.pk).update(backend_config=config)
    reset_backends()
    slurm.run("scancel", job.backend_ref)

    def cancelled():
        run_cycle()
        return Job.objects.get(pk=job.pk).state == JobState.CANCELLED

    wait_for(cancelled, 30, "the platform to see the cancel", every=1.0)
