"""A shared cluster: another user's Slurm job that carries one of our run names is not our run.

Anyone may call a job ``gp-<id>-a<n>``. The backend runs as an account with Slurm's Admin level
(for drains), and as root here, so ``scancel --name`` would stop such a job, and squeue (22.05's
JSON ignores ``--me``) and the jobcomp file list it: it must never be adopted by ``submit``,
reported as our run's state, listed by ``live_runs`` (whose runs the sweep cancels) or
cancelled. The other user is ``nobody``, which exists on the host and in every root.
"""

from __future__ import annotations

import pytest

from scheduler.backends.base import BackendJobState, LiveRun, backend_job_name
from tests.integration.slurm.conftest import run_ref, spec, wait_for

pytestmark = pytest.mark.slurm


def _state(slurm_cluster, slurm_id: str) -> str:
    out = slurm_cluster.run("squeue", "-h", "-j", slurm_id, "-o", "%T", check=False).stdout
    return out.strip()


@pytest.mark.slurm_smoke
def test_another_users_job_named_like_our_run_is_left_alone(backend, slurm_cluster, job_id):
    name = backend_job_name(job_id, 1)
    # Held: it waits without taking a node, as long as the test needs it.
    foreign = (
        slurm_cluster.run(
            "runuser",
            "-u",
            "nobody",
            "--",
            "sbatch",
            "--parsable",
            "--hold",
            "--partition=gpu",
            f"--job-name={name}",
            "--chdir=/tmp",
            "--output=/dev/null",
            "--wrap=sleep 600",
        )
        .stdout.strip()
        .split(";")[0]
    )
    ours = ""
    try:
        assert _state(slurm_cluster, foreign) == "PENDING"

        (status,) = backend.poll_jobs([run_ref(job_id)])
        assert status.state is BackendJobState.UNKNOWN and status.backend_ref == ""
        assert backend.live_runs(job_id) == []

        backend.cancel(run_ref(job_id))
        backend.checkpoint(run_ref(job_id))
        assert _state(slurm_cluster, foreign) == "PENDING"

        ours = backend.submit(spec(job_id, "sleep 60", {"node1": (0,)}))
        assert ours != foreign
        (status,) = backend.poll_jobs([run_ref(job_id)])
        assert status.backend_ref == ours
        assert backend.live_runs(job_id) == [LiveRun(job_id, 1)]

        backend.cancel(run_ref(job_id))
        wait_for(
            lambda: backend.poll_jobs([run_ref(job_id)])[0].state is BackendJobState.CANCELLED,
            30,
            "our run to be cancelled",
        )
        assert _state(slurm_cluster, foreign) == "PENDING"
    finally:
        slurm_cluster.run("scancel", foreign, *([ours] if ours else []), check=False)
