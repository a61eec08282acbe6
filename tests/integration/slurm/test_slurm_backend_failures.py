"""SlurmBackend's failure handling, with stand-in Slurm commands that fail on purpose.

A real slurmctld cannot be made to time out mid-sbatch on demand, so these tests put small
executables named ``sbatch``/``squeue``/... in ``bin_dir``: they print what Slurm 22.05 prints in
each situation (the captured fixtures), count their calls and keep a tiny job table. What is under
test is the backend's own logic: retries with capped backoff, outage vs refusal vs already-done,
no double submission, dry-run. The behaviour against the real Slurm is in test_slurm_backend.py.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from scheduler.backends.base import (
    BackendJobSpec,
    BackendJobState,
    BackendRejected,
    BackendUnavailable,
    RunRef,
)
from scheduler.backends.slurm import SlurmBackend
from tests.integration.slurm.conftest import ensure_system_user


def run_ref(job_id: str = "j1", attempt: int = 1) -> RunRef:
    """A run of team ``t``, the team of the specs here."""
    return RunRef(job_id, attempt, "t")


FIXTURES = Path(__file__).parents[2] / "unit" / "backends" / "fixtures" / "slurm" / "22.05"

# One stand-in program for every command; its behaviour comes from files in its directory.
FAKE = r"""
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
cmd = os.path.basename(sys.argv[0])
with open(os.path.join(here, "calls.log"), "a") as fh:
    fh.write(json.dumps([cmd, *sys.argv[1:]]) + "\n")
jobs_file = os.path.join(here, "jobs.json")
jobs = json.load(open(jobs_file)) if os.path.exists(jobs_file) else []
mode_file = os.path.join(here, cmd + ".mode")
mode = open(mode_file).read().strip() if os.path.exists(mode_file) else "ok"
if mode.startswith("fixture-stdout:"):
    sys.stdout.write(open(mode.split(":", 1)[1]).read()); sys.exit(0)
if mode.startswith("fixture-stderr:"):
    sys.stderr.write(open(mode.split(":", 1)[1]).read()); sys.exit(1)
if cmd == "squeue":
    print(json.dumps({"errors": [], "jobs": jobs}))
elif cmd == "sinfo":
    print(json.dumps({"errors": [], "nodes": [{"name": "n1", "state": "idle", "state_flags": [],
          "gres": "gpu:a100:4", "features": "rack=r9", "partitions": ["gpu"]}]}))
elif cmd == "scontrol" and sys.argv[1:3] == ["show", "reservation"]:
    print("No reservations in the system")
elif cmd == "scontrol" and sys.argv[1:3] == ["show", "node"]:
    print(f"NodeName={sys.argv[3]} Arch=x86_64 State=IDLE+DRAIN Reason=quarantine")
elif cmd == "sbatch":
    name = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--job-name="))
    job_id = str(100 + len(jobs))
    jobs.append({"job_id": int(job_id), "name": name, "job_state": "PENDING"})
    json.dump(jobs, open(jobs_file, "w"))
    if mode == "slow":  # reached slurmctld, but the answer comes too late
        time.sleep(5)
    print(job_id)
"""


class FakeSlurm:
    def __init__(self, root: Path):
        self.bin = root / "bin"
        self.bin.mkdir()
        program = self.bin / "fake.py"
        program.write_text(FAKE)
        for cmd in ("sbatch", "squeue", "sinfo", "scancel", "scontrol", "sacct"):
            (self.bin / cmd).write_text(
                f"#!{sys.executable}\nexec(open({str(program)!r}).read())\n"
            )
            (self.bin / cmd).chmod(0o755)
        self.sleeps: list[float] = []

    def mode(self, cmd: str, mode: str) -> None:
        (self.bin / f"{cmd}.mode").write_text(mode)

    def stdout_fixture(self, cmd: str, name: str) -> None:
        self.mode(cmd, f"fixture-stdout:{FIXTURES / name}")

    def stderr_fixture(self, cmd: str, name: str) -> None:
        self.mode(cmd, f"fixture-stderr:{FIXTURES / name}")

    def calls(self, cmd: str | None = None) -> list[list[str]]:
        log = self.bin / "calls.log"
        if not log.exists():
            return []
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        return [c for c in calls if cmd is None or c[0] == cmd]

    def backend(self, **config) -> SlurmBackend:
        base = {"bin_dir": str(self.bin), "accounting": "none", "tries": 3, "backoff_s": 0.5}
        return SlurmBackend({**base, **config}, sleep=self.sleeps.append)


@pytest.fixture()
def fake(tmp_path) -> FakeSlurm:
    return FakeSlurm(tmp_path)


def spec(job_id: str = "j1") -> BackendJobSpec:
    return BackendJobSpec(
        job_id=job_id,
        attempt=1,
        name="n",
        team="t",
        image="",
        command="true",
        workers=1,
        gpus_per_worker=1,
        placement={"n1": (0,)},
    )


def test_outage_is_retried_with_capped_backoff_then_unavailable(fake):
    fake.stdout_fixture("squeue", "squeue_controller_down.json")  # exit 0, errors in the JSON
    backend = fake.backend(tries=4, backoff_s=0.5, backoff_max_s=1.0)
    with pytest.raises(BackendUnavailable, match="slurm_load_jobs"):
        backend.poll_jobs([run_ref("j1")])
    assert len(fake.calls("squeue")) == 4
    assert len(fake.sleeps) == 3
    # Full jitter under a cap that doubles and stops at backoff_max_s.
    for sleep, cap in zip(fake.sleeps, [0.5, 1.0, 1.0], strict=True):
        assert 0 <= sleep <= cap


def test_recovers_when_slurm_returns(fake):
    fake.stdout_fixture("sinfo", "sinfo_controller_down.json")
    backend = fake.backend(tries=1)
    with pytest.raises(BackendUnavailable):
        backend.list_nodes()
    fake.mode("sinfo", "ok")
    (node,) = backend.list_nodes()
    assert (node.name, node.gpus, node.gpu_model, node.rack) == ("n1", 4, "a100", "r9")


def test_submit_during_outage_is_unavailable_and_submits_nothing(fake):
    fake.stderr_fixture("sbatch", "sbatch_controller_down.stderr")
    with pytest.raises(BackendUnavailable, match="Unable to contact slurm controller"):
        fake.backend(tries=2).submit(spec())
    # Every sbatch attempt was preceded by a lookup of the run's name.
    assert [c[0] for c in fake.calls()] == ["squeue", "sbatch", "squeue", "sbatch"]


def test_sbatch_that_times_out_after_reaching_slurm_is_not_sent_twice(fake):
    fake.mode("sbatch", "slow")
    backend = fake.backend(tries=2, command_timeout_s=1)
    assert backend.submit(spec()) == "100"
    assert len(fake.calls("sbatch")) == 1
    assert backend.submit(spec()) == "100"  # and later calls find it too
    assert len(fake.calls("sbatch")) == 1


def test_refusal_is_rejected_at_once(fake):
    fake.stderr_fixture("sbatch", "sbatch_node_config_unavailable.stderr")
    with pytest.raises(BackendRejected, match="Requested node configuration is not available"):
        fake.backend().submit(spec())
    assert len(fake.calls("sbatch")) == 1
    assert fake.sleeps == []


def test_already_done_is_success_only_where_idempotent(fake):
    fake.stdout_fixture("scontrol", "scontrol_node_idle.txt")
    fake.backend().undrain_node("n1")  # a node in service: nothing to lift, nothing asked
    assert [c[1] for c in fake.calls("scontrol")] == ["show"]
    fake.stderr_fixture("scontrol", "scontrol_invalid_node.stderr")
    with pytest.raises(BackendRejected, match="Invalid node name"):
        fake.backend().drain_node("n9", "quarantine")


def test_missing_slurm_tools_mean_unavailable(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    backend = SlurmBackend({"bin_dir": str(empty)})
    with pytest.raises(BackendUnavailable, match="not found"):
        backend.list_nodes()


def test_dry_run_changes_nothing_but_still_reads(fake):
    backend = fake.backend(dry_run=True)
    assert backend.submit(spec()) == "dry-run:gp-j1-a1"
    backend.cancel(run_ref("j1"))
    backend.checkpoint(run_ref("j1"))
    backend.drain_node("n1", "x")
    backend.undrain_node("n1")
    changes = [c for c in fake.calls() if c[0] in ("sbatch", "scancel", "scontrol")]
    assert [c[:2] for c in changes] == [["scontrol", "show"]]  # undrain's read of the node
    assert [n.name for n in backend.list_nodes()] == ["n1"]
    assert backend.poll_jobs([run_ref("j1")])[0].state is BackendJobState.UNKNOWN


def test_invalid_spec_is_rejected_before_any_command(fake):
    bad = BackendJobSpec(
        job_id="j1",
        attempt=1,
        name="n",
        team="t",
        image="",
        command="true",
        workers=1,
        gpus_per_worker=1,
        placement={"n1": (0,)},
        env={"NOT A NAME": "x"},
    )
    with pytest.raises(BackendRejected, match="environment variable name"):
        fake.backend().submit(bad)
    assert fake.calls() == []


def test_requeue_in_extra_sbatch_args_is_a_configuration_error(fake):
    # It would come after (and override) the backend's --no-requeue.
    with pytest.raises(ValueError, match="must not contain --requeue"):
        fake.backend(extra_sbatch_args=["--qos=high", "--requeue"])
    fake.backend(extra_sbatch_args=["--qos=high"]).submit(
        BackendJobSpec(
            job_id="q",
            attempt=1,
            name="n",
            team="t",
            image="",
            command="true",
            workers=1,
            gpus_per_worker=1,
            placement={"n1": (0,)},
        )
    )
    (sbatch,) = fake.calls("sbatch")
    assert "--no-requeue" in sbatch and sbatch[-1] == "--qos=high"


# ssh as it behaves: it joins its arguments with spaces into one command line for the remote
# user's shell (here: bash -c on this host), so unquoted arguments would be split and expanded.
SSH = r"""#!/bin/bash
host=$1; shift
printf '%s\n' "$host" >> "$(dirname "$0")/ssh-hosts.log"
exec bash -c "$*"
"""


def test_commands_through_an_ssh_prefix_arrive_as_the_same_arguments(fake, tmp_path):
    ssh = fake.bin / "ssh"
    ssh.write_text(SSH)
    ssh.chmod(0o755)
    backend = fake.backend(
        command_prefix=[str(ssh), "login1"],
        slurm_conf="/etc/slurm/site conf.conf",
        extra_sbatch_args=["--comment=two words; touch PWNED"],
    )
    backend.submit(spec())
    (sbatch,) = fake.calls("sbatch")
    # Every argument survived the remote shell as one argument, metacharacters as data.
    assert "--comment=two words; touch PWNED" in sbatch
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()
    # squeue, the remote account's uid (its runs are those it owns), sbatch
    assert (fake.bin / "ssh-hosts.log").read_text().split() == ["login1"] * 3
    backend.drain_node("n1", "gpuplatform quarantine: xid 79; $(reboot)")
    (scontrol,) = fake.calls("scontrol")
    assert scontrol[-1] == "reason=gpuplatform quarantine: xid 79; $(reboot)"


def test_a_missing_prefix_program_means_unavailable(tmp_path):
    backend = SlurmBackend({"command_prefix": [str(tmp_path / "no-ssh"), "login1"], "tries": 1})
    with pytest.raises(BackendUnavailable, match="not found"):
        backend.list_nodes()
    with pytest.raises(ValueError, match="command_prefix must be a list"):
        SlurmBackend({"command_prefix": "ssh login1"})
    with pytest.raises(ValueError, match="node_command_prefix must be a list"):
        SlurmBackend({"node_command_prefix": "sudo -n"})


def test_a_misspelt_setting_is_refused_not_ignored():
    # "partiton" was ignored: every job went to the cluster's default partition.
    with pytest.raises(ValueError, match=r"unknown slurm backend settings: \['partiton'\]"):
        SlurmBackend({"partiton": "gpu"})
    SlurmBackend({"partition": "gpu", "run_namespace": "prod-"})


def test_unknown_output_shape_is_rejected_naming_the_field(fake):
    # A future Slurm printing job_state as an object: a named refusal, not "no jobs".
    (fake.bin / "jobs.json").write_text(
        json.dumps([{"job_id": 100, "name": "gp-j1-a1", "job_state": {"current": ["RUNNING"]}}])
    )
    with pytest.raises(BackendRejected, match=r"jobs\[0\]\.job_state: expected a string or a list"):
        fake.backend().poll_jobs([run_ref("j1")])
    assert len(fake.calls("squeue")) == 1  # not retried: waiting will not change the shape


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"team_accounts": ["gp-vision"]}, "team_accounts must be a mapping of team slug"),
        ({"team_accounts": {"vision": 1001}}, r"team_accounts\['vision'\]: 1001 is not a Unix"),
        ({"team_accounts": {"vision": "gp-a; scancel -u gp-b"}}, "is not a Unix account name"),
        ({"team_accounts": {"vision": "$(id)"}}, "is not a Unix account name"),
        ({"team_accounts": {"vision": "-n"}}, "is not a Unix account name"),
        ({"team_accounts": {"": "gp-vision"}}, "'' is not a team slug"),
        (
            {"team_accounts": {"vision": "gp-vision"}, "team_command_prefix": "sudo -u {account}"},
            "team_command_prefix must be a list of arguments",
        ),
        (
            {"team_accounts": {"vision": "gp-vision"}, "team_command_prefix": ["sudo", 7]},
            "team_command_prefix must be a list of arguments",
        ),
        (
            {"team_accounts": {"vision": "gp-vision"}, "team_command_prefix": ["sudo", "-u", "x"]},
            r"team_command_prefix must name the account as \{account\}",
        ),
        ({"team_command_prefix": ["sudo", "-u", "{account}"]}, "team_accounts is not: set both"),
    ],
)
def test_bad_team_account_settings_are_refused_with_the_reason(config, message):
    with pytest.raises(ValueError, match=message):
        SlurmBackend(config)


def test_team_accounts_default_to_sudo_and_leave_the_service_account_unchanged_when_unset():
    backend = SlurmBackend({"team_accounts": {"vision": "gp-vision"}})
    assert backend.team_command_prefix == ("sudo", "-n", "-u", "{account}")
    assert SlurmBackend({}).team_command_prefix == ()


# sudo as the backend calls it (sudo -n -u ACCOUNT COMMAND...), recording whom it ran as. The
# directory commands run as the account for real (what they check is who owns what); the Slurm
# stand-ins run as the test, since they keep their state in its private directory.
SUDO = r"""#!/bin/bash
printf '%s\n' "$*" >> "$(dirname "$0")/sudo.log"
account=$3
shift 3
for arg in "$@"; do
  case "$arg" in env|*=*) ;; *) program=$(basename "$arg"); break ;; esac
done
case "$program" in install|realpath|stat) exec runuser -u "$account" -- "$@" ;; esac
exec "$@"
"""
TEAM_A, TEAM_B = "gp-ci-team-a", "gp-ci-team-b"


@pytest.fixture()
def team_accounts() -> dict[str, int]:
    """Two real team accounts (as the real-Slurm tests make them) and their uids."""
    if os.geteuid() != 0:
        pytest.skip("running commands as a team account needs root")
    for account in (TEAM_A, TEAM_B):
        ensure_system_user([], account)
    return {account: pwd.getpwnam(account).pw_uid for account in (TEAM_A, TEAM_B)}


@pytest.fixture()
def shared_dir(team_accounts):
    """A directory every account may create entries in, as ``job_workdir`` is (mode 1777, like
    /tmp); pytest's own tmp_path is private to the test's user."""
    path = Path(tempfile.mkdtemp(prefix="gp-team-dirs-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path)


def team_backend(fake, workdir: Path, **config) -> SlurmBackend:
    sudo = fake.bin / "sudo"
    sudo.write_text(SUDO)
    sudo.chmod(0o755)
    return fake.backend(
        **{
            "job_workdir": str(workdir),
            "team_accounts": {"t": TEAM_A},
            "team_command_prefix": [str(sudo), "-n", "-u", "{account}"],
            **config,
        }
    )


def test_a_teams_run_is_submitted_as_its_account_into_its_own_directories(fake, shared_dir):
    workdir = shared_dir / "jobs"
    workdir.mkdir(mode=0o1777)
    workdir.chmod(0o1777)
    backend = team_backend(fake, workdir)
    backend.submit(spec())
    (sbatch,) = fake.calls("sbatch")
    assert f"--chdir={workdir}/{TEAM_A}" in sbatch
    assert f"--output={workdir}/{TEAM_A}/gp-j1-a1.out" in sbatch
    # The directories first (made, then checked), then sbatch, each as the team's account.
    ran = (fake.bin / "sudo.log").read_text().splitlines()
    assert len(ran) == 4 and all(line.startswith(f"-n -u {TEAM_A} env ") for line in ran)
    assert f"install -d -m 0700 {workdir}/{TEAM_A}" in ran[0] and "/sbatch --parsable" in ran[3]
    made = (workdir / TEAM_A).stat()
    assert made.st_mode & 0o777 == 0o700 and made.st_uid == pwd.getpwnam(TEAM_A).pw_uid


def test_a_link_another_account_planted_for_a_teams_directory_is_refused(
    fake, shared_dir, team_accounts
):
    """Team B links ``<job_workdir>/gp-a`` to a directory A owns (its home) before A's first
    run. ``install -d`` followed the link and accepted it, A's run was submitted, and B, who owns
    the link, could swap it for a directory of its own before the run started, where A's output,
    progress and checkpoint requests would land (tried by hand: B read what A appended)."""
    a_home = shared_dir / "home-a"
    a_home.mkdir()
    os.chown(a_home, team_accounts[TEAM_A], -1)
    planted = shared_dir / TEAM_A
    os.symlink(a_home, planted)
    os.lchown(planted, team_accounts[TEAM_B], -1)
    backend = team_backend(fake, shared_dir)
    with pytest.raises(BackendRejected, match=f"{planted} is not a directory but a symbolic link"):
        backend.submit(spec())
    assert fake.calls("sbatch") == []


@pytest.mark.parametrize(
    ("mode", "owner", "reason"),
    [
        (0o777, None, "is writable by others without the sticky bit"),
        (0o1777, TEAM_B, "belongs to uid"),
    ],
)
def test_a_job_workdir_another_account_could_rearrange_is_refused(
    fake, shared_dir, team_accounts, mode, owner, reason
):
    """Without the sticky bit (or when B owns it) B may rename A's directory away and make its
    own in its place: A's runs already submitted then write into B's. Refused at submit."""
    workdir = shared_dir / "jobs"
    workdir.mkdir()
    workdir.chmod(mode)
    if owner:
        os.chown(workdir, team_accounts[owner], -1)
    backend = team_backend(fake, workdir)
    with pytest.raises(BackendRejected, match=f"{workdir} {reason}"):
        backend.submit(spec())
    assert fake.calls("sbatch") == []


def test_files_of_a_run_whose_owner_slurm_no_longer_records_are_not_read(
    fake, shared_dir, team_accounts
):
    """Team B's job (as gp-b) links its run's files in the shared log_dir / job_workdir (where
    every team account may write) to a file only the service account may read. Once the run
    left squeue with no accounting to keep it (or in a record without its uid), the platform
    took it for a service-account run and read those paths as the service account: B's log
    showed the file (e.g. /proc/self/environ: the platform's secrets)."""
    secret = shared_dir / "service-account-only"
    secret.write_text('{"checkpointed_progress_s": 4242}  DJANGO_SECRET_KEY=s3cret\n')
    secret.chmod(0o600)
    for suffix in (".out", ".progress"):
        link = shared_dir / f"gp-j1-a1{suffix}"
        os.symlink(secret, link)
        os.lchown(link, team_accounts[TEAM_B], -1)
    backend = team_backend(fake, shared_dir)
    assert backend.read_log(run_ref("j1")).text == ""
    # A record without its owner's uid (the jobcomp file may not have it).
    (fake.bin / "jobs.json").write_text(
        json.dumps([{"job_id": 7, "name": "gp-j1-a1", "job_state": "RUNNING"}])
    )
    (status,) = backend.poll_jobs([run_ref("j1")])
    assert status.state is BackendJobState.RUNNING and status.checkpointed_progress_s is None
    assert backend.read_log(run_ref("j1")).text == ""


def test_another_teams_job_named_like_a_run_is_neither_adopted_nor_in_its_way(
    fake, shared_dir, team_accounts
):
    """Job ids count up, so team B's job (as gp-b) can sbatch a job named like team A's next run
    before the platform submits it. submit took that job for A's run ("already submitted"): B's
    output became A's job's log and its GPU time A's bill; then it refused A's run instead, so B
    could make A's next job fail. A's run is now submitted beside B's job."""
    forged = {"job_id": 7, "name": "gp-j1-a1", "job_state": "PENDING"}
    (fake.bin / "jobs.json").write_text(json.dumps([{**forged, "user_id": team_accounts[TEAM_B]}]))
    backend = team_backend(fake, shared_dir, team_accounts={"t": TEAM_A, "u": TEAM_B})
    job_id = backend.submit(spec())
    assert job_id != "7" and len(fake.calls("sbatch")) == 1
    # A's own earlier submission is still found and kept (submit is idempotent).
    (fake.bin / "jobs.json").write_text(json.dumps([{**forged, "user_id": team_accounts[TEAM_A]}]))
    assert backend.submit(spec()) == "7" and len(fake.calls("sbatch")) == 1


def test_another_teams_job_named_like_a_submitted_run_does_not_stand_for_it(
    fake, shared_dir, team_accounts
):
    """Team B's job (as gp-b) sbatches a held job named like team A's running run. The newest
    live job of the name stood for the run: A's job read as pending (the platform gives such a
    run up and cancels it) and its log was B's file."""
    backend = team_backend(fake, shared_dir, team_accounts={"t": TEAM_A, "u": TEAM_B})
    backend.submit(spec())
    (fake.bin / "jobs.json").write_text(
        json.dumps(
            [
                {"job_id": 100, "name": "gp-j1-a1", "job_state": "RUNNING",
                 "user_id": team_accounts[TEAM_A]},
                {"job_id": 105, "name": "gp-j1-a1", "job_state": "PENDING",
                 "user_id": team_accounts[TEAM_B]},
            ]
        )
    )  # fmt: skip
    (shared_dir / TEAM_A / "gp-j1-a1.out").write_text("A's output\n")
    b_dir = shared_dir / TEAM_B
    b_dir.mkdir()
    (b_dir / "gp-j1-a1.out").write_text("B's forgery\n")
    fresh = team_backend(fake, shared_dir, team_accounts={"t": TEAM_A, "u": TEAM_B})
    assert fresh.read_log(run_ref("j1")).text == "A's output\n"
    (status,) = fresh.poll_jobs([run_ref("j1")])
    assert status.state is BackendJobState.RUNNING


def test_another_teams_job_named_like_a_run_that_left_squeue_does_not_stand_for_it(
    fake, shared_dir, team_accounts
):
    """Team A's run has left squeue (no accounting here to find it); team B's job (as gp-b)
    carries its name. Found by name among every platform account's jobs, B's job stood for A's
    run: its state was the run's and a fresh backend read B's file as the run's log. Told the
    run's team, the backend sees no job of A's: no news of the run, and no log."""
    (fake.bin / "jobs.json").write_text(
        json.dumps(
            [{"job_id": 105, "name": "gp-j1-a1", "job_state": "RUNNING",
              "user_id": team_accounts[TEAM_B]}]
        )
    )  # fmt: skip
    b_dir = shared_dir / TEAM_B
    b_dir.mkdir()
    (b_dir / "gp-j1-a1.out").write_text("B's forgery\n")
    backend = team_backend(fake, shared_dir, team_accounts={"t": TEAM_A, "u": TEAM_B})
    (status,) = backend.poll_jobs([run_ref()])
    assert status.state is BackendJobState.UNKNOWN and status.backend_ref == ""
    fresh = team_backend(fake, shared_dir, team_accounts={"t": TEAM_A, "u": TEAM_B})
    assert fresh.read_log(run_ref()).text == ""
    # B's own run of that name (team u) is B's job.
    (status,) = fresh.poll_jobs([RunRef("j1", 1, "u")])
    assert (status.state, status.backend_ref) == (BackendJobState.RUNNING, "105")


@pytest.mark.parametrize("mapped_to", ["root", "service account"])
def test_a_team_mapped_to_root_or_the_service_account_is_refused_before_any_command(
    fake, team_accounts, mapped_to
):
    """A careless mapping ran the team's jobs as root, or as the service account, whose sudo
    rule lets it act as every team's account: such a job could reach every team's runs."""
    config: dict = {"team_accounts": {"t": "root"}}
    if mapped_to == "service account":
        # The service account is whoever the command prefix runs as (here: team B's account).
        config = {
            "team_accounts": {"t": TEAM_B},
            "command_prefix": ["runuser", "-u", TEAM_B, "--"],
        }
    backend = fake.backend(**config, team_command_prefix=["runuser", "-u", "{account}", "--"])
    expected = "root" if mapped_to == "root" else "the platform's service account"
    with pytest.raises(BackendRejected, match=f"which is {expected}"):
        backend.submit(spec())
    assert fake.calls() == []


def test_a_team_without_an_account_is_refused_before_any_command(fake):
    backend = fake.backend(team_accounts={"other-team": "gp-other"})
    with pytest.raises(BackendRejected, match="team 't' has no Unix account on this cluster"):
        backend.submit(spec())
    assert fake.calls() == []


def test_a_teams_commands_through_an_ssh_prefix_arrive_as_the_same_arguments(
    fake, shared_dir, tmp_path
):
    # ssh joins what follows it into one line for the remote shell: the team's prefix and the
    # command after it must arrive as the same arguments.
    for name, text in (("ssh", SSH), ("sudo", SUDO)):
        (fake.bin / name).write_text(text)
        (fake.bin / name).chmod(0o755)
    workdir = shared_dir / "team jobs"
    workdir.mkdir()
    workdir.chmod(0o1777)
    backend = fake.backend(
        command_prefix=[str(fake.bin / "ssh"), "login1"],
        job_workdir=str(workdir),
        team_accounts={"t": TEAM_A},
        team_command_prefix=[str(fake.bin / "sudo"), "-n", "-u", "{account}"],
        extra_sbatch_args=["--comment=two words; touch PWNED"],
    )
    backend.submit(spec())
    (sbatch,) = fake.calls("sbatch")
    assert "--comment=two words; touch PWNED" in sbatch
    assert f"--chdir={workdir}/{TEAM_A}" in sbatch
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()
    assert (workdir / TEAM_A).is_dir()
    assert [line.split()[:3] for line in (fake.bin / "sudo.log").read_text().splitlines()] == [
        ["-n", "-u", TEAM_A]
    ] * 4
