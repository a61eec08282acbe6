"""Runs that left squeue are found through a real slurmdbd (MariaDB), as on sites' clusters.

Slurm keeps a finished job in squeue for ``MinJobAge`` (300 s by default) and then only its
accounting knows how the job ended. The main test clusters keep that in a jobcomp file; this one
(``accounting_slurm``: slurmdbd, ``MinJobAge=2``, on 24.11 and 22.05) keeps it where sites do, so the
backend's ``sacct`` path reads real slurmdbd records: each way a run can end, with its exit code
and nodes.
"""

from __future__ import annotations

import pytest

from scheduler.backends.base import BackendJobSpec, BackendJobState, backend_job_name
from tests.integration.slurm.conftest import LocalSlurm, run_ref, spec, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions("24.11", "26.05", "22.05")]


def test_runs_that_left_squeue_end_as_slurmdbd_recorded_them(accounting_slurm: LocalSlurm, job_id):
    cluster = accounting_slurm
    # Only slurmdbd may answer: "auto" would fall back to the jobcomp file.
    backend = cluster.backend(accounting="sacct")
    started = cluster.file(f"{job_id}.started")
    runs = {
        "succeeded": spec(f"{job_id}-ok", "true", {"node1": (0,)}),
        "failed": spec(f"{job_id}-bad", "exit 3", {"node1": (0,)}),
        "cancelled": spec(f"{job_id}-cancel", "exec sleep 300", {"node1": (0,)}),
        "node_failed": spec(f"{job_id}-node", f"touch {started}; exec sleep 300", {"node2": (0,)}),
    }
    for run in runs.values():
        backend.submit(run)

    def status(run: BackendJobSpec):
        return backend.poll_jobs([run_ref(run.job_id)])[0]

    wait_for(started.exists, 30, "the run on node2 to start")
    wait_for(lambda: status(runs["cancelled"]).state is BackendJobState.RUNNING, 30, "it to run")
    backend.cancel(run_ref(runs["cancelled"].job_id))
    cluster.kill_node("node2", status(runs["node_failed"]).backend_ref)
    try:
        names = ",".join(backend_job_name(run.job_id, 1) for run in runs.values())
        # Node failure detection (SlurmdTimeout 10 s) and Slurm's purge (about once a minute).
        wait_for(
            lambda: not cluster.run("squeue", "-h", "-t", "all", "-n", names, "-o", "%i").stdout,
            150,
            "every run to leave squeue",
            every=2.0,
        )
    finally:
        assert cluster.script("start").returncode == 0  # the killed slurmd comes back
    found = {
        how: status
        for how, status in zip(
            runs, backend.poll_jobs([run_ref(run.job_id) for run in runs.values()]), strict=True
        )
    }
    assert {how: s.state.value for how, s in found.items()} == {
        "succeeded": "succeeded",
        "failed": "failed",
        "cancelled": "cancelled",
        "node_failed": "node_failed",
    }
    assert (found["succeeded"].exit_code, found["failed"].exit_code) == (0, 3)
    assert found["succeeded"].nodes == ("node1",) and found["node_failed"].nodes == ("node2",)
    assert all(s.backend_ref.isdigit() for s in found.values())
    # Each run is over: nothing to cancel, nothing live, and the cancel of a purged run is quiet.
    backend.cancel(run_ref(runs["node_failed"].job_id))
    assert all(backend.live_runs(run.job_id) == [] for run in runs.values())
