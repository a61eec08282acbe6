"""Each team's runs as that team's own Unix account (``team_accounts``), on a real Slurm.

Two team accounts, ``gp-ci-team-a`` and ``gp-ci-team-b`` (system users with a login shell, on
the host and in each root with the same uid, as ``test_service_account_on_slurm.py`` makes its
account). The platform runs as root here and reaches a team's account through
``runuser -u {account} --`` (a site: ``sudo -n -u {account}``), after ``chroot ROOT`` on 24.11.
What is shown: team A's job runs as team A's uid; its command cannot cancel team B's job nor
read or write B's files (it tries, in a real job); the platform still sees, reads, checkpoints
and cancels both; a team with no account is refused before anything reaches Slurm.
"""

from __future__ import annotations

import os
import shlex

import pytest

from scheduler.backends.base import (
    BackendJobState,
    BackendRejected,
    LiveRun,
    backend_job_name,
)
from tests.integration.slurm.conftest import (
    TEAM_ACCOUNTS,
    LocalSlurm,
    idle_nodes,
    run_ref,
    spec,
    wait_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions("24.11", "26.05", "22.05")]


@pytest.fixture()
def team_backend(slurm_cluster: LocalSlurm, team_uids):
    return slurm_cluster.backend(
        team_accounts=TEAM_ACCOUNTS, team_command_prefix=["runuser", "-u", "{account}", "--"]
    )


def test_a_teams_job_runs_as_its_account_and_cannot_touch_another_teams(
    slurm_cluster: LocalSlurm, team_backend, team_uids, job_id
):
    cluster, backend = slurm_cluster, team_backend
    job_a, job_b = f"{job_id}-a", f"{job_id}-b"
    jobs_dir = f"{cluster.dir}/jobs"
    b_files = f"{jobs_dir}/gp-ci-team-b/{backend_job_name(job_b, 1)}"

    teams = {job_a: "team-a", job_b: "team-b"}

    def state(job: str) -> BackendJobState:
        return backend.poll_jobs([run_ref(job, team=teams[job])])[0].state

    node_a, node_b = idle_nodes(cluster, 2)

    b_ref = backend.submit(
        spec(
            job_b,
            'echo "b secret"; echo 42 > "$GPUPLATFORM_CHECKPOINT_PROGRESS"; exec sleep 300',
            {node_b: (0,)},
            team="team-b",
        )
    )
    a_ref = ""
    try:
        wait_for(
            lambda: "b secret" in backend.read_log(run_ref(job_b, team="team-b")).text,
            30,
            "B's output",
        )
        # Every attempt prints what happened: a refusal, or what it got.
        tries = {
            "scancel": f"scancel {b_ref}",
            "read-log": f"cat {shlex.quote(b_files + '.out')}",
            "read-progress": f"cat {shlex.quote(b_files + '.progress')}",
            "request-checkpoint": f"touch {shlex.quote(b_files + '.checkpoint-request')}",
            "list": f"ls {shlex.quote(jobs_dir + '/gp-ci-team-b')}",
        }
        command = "echo ran as $(id -un) uid $(id -u)\n"
        command += f"echo sees B as $(squeue -h -j {b_ref} -o %T)\n"
        for what, attempt in tries.items():
            command += (
                f"if {attempt} 2>&1; then echo '{what}: done'; else echo '{what}: refused'; fi\n"
            )
        command += "echo tried all; exec sleep 300\n"
        a_ref = backend.submit(spec(job_a, command, {node_a: (0,)}, team="team-a"))

        def a_log_when_done() -> str:
            text = backend.read_log(run_ref(job_a, team="team-a")).text
            return text if "tried all" in text else ""

        log = wait_for(a_log_when_done, 30, "A's attempts")
        assert f"ran as gp-ci-team-a uid {team_uids['gp-ci-team-a']}" in log
        assert "sees B as RUNNING" in log  # Slurm's commands work in the job: a fair try
        for what in tries:
            assert f"{what}: refused" in log, log
        # Refused for the reason under test, not for a missing tool or configuration.
        assert f"Kill job error on job id {b_ref}: Access/permission denied" in log
        assert log.count("Permission denied") == 4, log
        assert "b secret" not in log

        # The platform sees both, as their accounts own them, and reads B's progress.
        for slurm_id, account in ((a_ref, "gp-ci-team-a"), (b_ref, "gp-ci-team-b")):
            owner = cluster.run("squeue", "-h", "-j", slurm_id, "-o", "%U").stdout.strip()
            assert owner == str(team_uids[account])
        assert state(job_b) is BackendJobState.RUNNING
        (status_b,) = backend.poll_jobs([run_ref(job_b, team="team-b")])
        assert status_b.checkpointed_progress_s == 42
        live = set(backend.live_runs(job_id))
        assert {LiveRun(job_a, 1, "gp-ci-team-a"), LiveRun(job_b, 1, "gp-ci-team-b")} <= live
        for account in ("gp-ci-team-a", "gp-ci-team-b"):
            private = os.stat(f"{cluster.host_dir}/jobs/{account}")
            assert (private.st_uid, private.st_mode & 0o777) == (team_uids[account], 0o700)

        # It asks each for a checkpoint (the request file appears, written by the job itself)
        # and cancels each.
        for job, account in ((job_a, "gp-ci-team-a"), (job_b, "gp-ci-team-b")):
            backend.checkpoint(run_ref(job, team=teams[job]))
            request = (
                f"{cluster.host_dir}/jobs/{account}/{backend_job_name(job, 1)}.checkpoint-request"
            )
            wait_for(lambda r=request: os.path.exists(r), 15, f"{job}'s checkpoint request")
            assert os.stat(request).st_uid == team_uids[account]
        for job in (job_a, job_b):
            backend.cancel(run_ref(job, team=teams[job]))
        for job in (job_a, job_b):
            wait_for(lambda j=job: state(j) is BackendJobState.CANCELLED, 30, f"{job} cancelled")
    finally:
        cluster.run("scancel", b_ref, *([a_ref] if a_ref else []), check=False)


def test_a_team_without_an_account_is_refused_and_nothing_reaches_slurm(
    slurm_cluster: LocalSlurm, team_backend, job_id
):
    with pytest.raises(BackendRejected, match="team 'team-c' has no Unix account"):
        team_backend.submit(spec(job_id, "exec sleep 300", {"node1": (0,)}, team="team-c"))
    name = backend_job_name(job_id, 1)
    assert slurm_cluster.run("squeue", "-h", f"--name={name}", "-o", "%i").stdout.strip() == ""


@pytest.mark.django_db
def test_the_platform_runs_a_mapped_teams_job_as_its_account_and_fails_an_unmapped_teams(
    slurm_platform, team_uids, submit, alice, bob, api_as
):
    """Through the API and the loop: vision (mapped) runs as its account and its output reaches
    its member; nlp (no account) fails with the reason, and nothing of it reaches Slurm."""
    from scheduler.backends import reset_backends
    from scheduler.loop.cycle import run_cycle
    from scheduler.models import Job, Node

    cluster = slurm_platform["cluster"]
    cluster.backend_config = {
        **cluster.backend_config,
        "team_accounts": {"vision": "gp-ci-team-a"},
        "team_command_prefix": ["runuser", "-u", "{account}", "--"],
    }
    cluster.save(update_fields=["backend_config"])
    reset_backends()
    gpu_model = Node.objects.filter(cluster=cluster).first().gpu_model.name
    mapped = submit(alice, gpu_model=gpu_model, command="echo trained as $(id -un)").json()["id"]
    unmapped = submit(bob, team="nlp", gpu_model=gpu_model, command="echo ran").json()["id"]
    run_cycle()
    refused = Job.objects.get(pk=unmapped)
    assert refused.state == "failed", refused.state
    # Its owner reads why (the job's "why" and its failed event).
    assert "team 'nlp' has no Unix account on this cluster" in refused.why_pending
    run = f"gp-{cluster.backend_config['run_namespace']}{unmapped}-a1"
    slurm = slurm_platform["slurm"]
    assert slurm.run("squeue", "-h", f"--name={run}", "-o", "%i").stdout.strip() == ""

    def succeeded():
        run_cycle()
        return Job.objects.get(pk=mapped).state == "succeeded"

    wait_for(succeeded, 60, "vision's job to succeed", every=1.0)
    logs = api_as(alice).get(f"/api/v1/jobs/{mapped}/logs/").json()
    assert "trained as gp-ci-team-a" in logs["text"]
    run = f"gp-{cluster.backend_config['run_namespace']}{mapped}-a1"
    assert os.path.exists(f"{slurm.host_dir}/jobs/gp-ci-team-a/{run}.out")


def test_another_teams_copy_of_a_run_that_left_squeue_is_never_taken_for_it(
    accounting_slurm: LocalSlurm, team_uids, job_id
):
    """Team A's run ends and leaves squeue (``MinJobAge`` 2 s: only slurmdbd knows it now); then
    team B's account sbatches a job with the run's name, its output where B's run's log would
    be. The backend found runs by name among all its accounts' jobs, so B's copy stood for A's
    run: the poll said RUNNING, a fresh backend read B's output as A's log, and checkpoint and
    cancel signalled and cancelled B's job (as B's account). Now only A's account (or the
    service account) can own A's run."""
    cluster = accounting_slurm
    config = {
        "team_accounts": TEAM_ACCOUNTS,
        "team_command_prefix": ["runuser", "-u", "{account}", "--"],
        "accounting": "sacct",  # only slurmdbd may answer for the run that left squeue
    }
    backend = cluster.backend(**config)
    run = run_ref(job_id, team="team-a")
    name = backend_job_name(job_id, 1)
    a_ref = backend.submit(spec(job_id, 'echo "a output"', {"node1": (0,)}, team="team-a"))
    wait_for(lambda: backend.poll_jobs([run])[0].state is BackendJobState.SUCCEEDED, 60, "A to end")
    wait_for(
        lambda: not cluster.run("squeue", "-h", "-t", "all", "-n", name, "-o", "%i").stdout,
        150,
        "A's job to leave squeue",
        every=2.0,
    )

    as_b = ["runuser", "-u", "gp-ci-team-b", "--"]
    b_dir = f"{cluster.dir}/jobs/gp-ci-team-b"
    cluster.run(*as_b, "install", "-d", "-m", "0700", b_dir)
    copy_script = 'echo "b secret"; exec sleep 300'
    copy = cluster.run(
        *as_b,
        "sbatch",
        "--parsable",
        "--partition=gpu",
        f"--job-name={name}",
        f"--chdir={b_dir}",
        f"--output={b_dir}/{name}.out",
        f"--wrap={copy_script}",
    ).stdout.strip()
    copy = copy.split(";")[0]
    b_out = cluster.host_dir / "jobs" / "gp-ci-team-b" / f"{name}.out"
    try:
        wait_for(lambda: b_out.exists() and "b secret" in b_out.read_text(), 30, "B's copy")

        def copy_state() -> str:
            return cluster.run("squeue", "-h", "-j", copy, "-o", "%T", check=False).stdout.strip()

        assert copy_state() == "RUNNING"

        # A fresh backend each time: another worker, nothing remembered of A's run.
        (status,) = cluster.backend(**config).poll_jobs([run])
        assert (status.state, status.backend_ref) == (BackendJobState.SUCCEEDED, a_ref)
        log = cluster.backend(**config).read_log(run).text
        assert "a output" in log and "b secret" not in log

        # slurmctld logs every signal and cancel request (scancel) as it takes it, before
        # scancel returns: none may have reached B's job. (Its output would not do: a signal
        # reaches the job some time after scancel returns.)
        requests = f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={copy} "
        ctld_log = cluster.host_dir / "log" / "slurmctld.log"
        cluster.backend(**config).checkpoint(run)
        assert requests not in ctld_log.read_text()
        cluster.backend(**config).cancel(run)
        assert requests not in ctld_log.read_text()
        assert copy_state() == "RUNNING" and "b secret" in b_out.read_text()
    finally:
        cluster.run("scancel", copy, check=False)


def test_another_teams_job_named_like_a_run_does_not_keep_the_run_from_starting(
    slurm_cluster: LocalSlurm, team_backend, team_uids, job_id
):
    """Run names are predictable (job ids count up): team B's account sbatches a held job named
    like team A's next run before the platform submits it. submit refused A's run then ("belongs
    to uid …"), so one team could fail another's next job. Now A's run is submitted beside B's
    job, runs as A, and every call about it is A's job's alone."""
    cluster, backend = slurm_cluster, team_backend
    name = backend_job_name(job_id, 1)
    (node,) = idle_nodes(cluster, 1)
    as_b = ["runuser", "-u", "gp-ci-team-b", "--"]
    b_dir = f"{cluster.dir}/jobs/gp-ci-team-b"
    cluster.run(*as_b, "install", "-d", "-m", "0700", b_dir)
    squatter = cluster.run(
        *as_b, "sbatch", "--parsable", "--hold", "--partition=gpu", f"--job-name={name}",
        f"--chdir={b_dir}", f"--output={b_dir}/{name}.out", "--wrap=sleep 300",
    ).stdout.strip().split(";")[0]  # fmt: skip
    run = run_ref(job_id, team="team-a")
    try:
        a_ref = backend.submit(
            spec(job_id, 'echo "a output"; exec sleep 300', {node: (0,)}, team="team-a")
        )
        assert a_ref != squatter
        owner = cluster.run("squeue", "-h", "-j", a_ref, "-o", "%U").stdout.strip()
        assert owner == str(team_uids["gp-ci-team-a"])
        wait_for(lambda: "a output" in backend.read_log(run).text, 30, "A's output")
        (status,) = backend.poll_jobs([run])
        assert (status.state, status.backend_ref) == (BackendJobState.RUNNING, a_ref)
        backend.cancel(run)
        wait_for(
            lambda: backend.poll_jobs([run])[0].state is BackendJobState.CANCELLED,
            30,
            "A cancelled",
        )
        held = cluster.run("squeue", "-h", "-j", squatter, "-o", "%T", check=False).stdout.strip()
        assert held == "PENDING"  # B's own job, left as it was
    finally:
        cluster.run("scancel", squatter, check=False)
