"""Real local Slurm clusters for the Slurm backend tests, one per supported generation.

Up to three clusters, each started by ``scripts/slurm-local start`` (idempotent: reuses a
running one, starts a missing one, installs or builds what is missing):

- ``24.11``: Slurm 24.11 inside the Debian 13 root of ``scripts/slurm-root``
  (``$GPUPLATFORM_SLURM_ROOT``, default /var/cache/gpuplatform/debian13-slurm), in the in-root
  directory ``$GPUPLATFORM_SLURM_MODERN_DIR`` (default /srv/gpuplatform-slurm) on
  ``$SLURM_MODERN_CTLD_PORT`` / ``$SLURM_MODERN_SLURMD_BASE_PORT`` + K (default 19817 / 19800).
  The backend drives it through ``command_prefix: ["chroot", ROOT]``, exactly as it would drive
  a cluster through ``ssh login-node``: commands and job files go through the prefix.
- ``22.05``: the host's own Slurm in ``$GPUPLATFORM_SLURM_DIR`` (default /tmp/gpuplatform-slurm)
  on ``$SLURM_LOCAL_CTLD_PORT`` / ``$SLURM_LOCAL_SLURMD_BASE_PORT`` + K, without a prefix.
- ``26.05``: Slurm 26.05 inside the Debian 14 ("forky") root of ``scripts/slurm-root --suite
  forky`` (``$GPUPLATFORM_SLURM_2605_ROOT``, default /var/cache/gpuplatform/debian14-slurm), in
  ``$GPUPLATFORM_SLURM_2605_DIR`` (default /srv/gpuplatform-slurm-2605) on
  ``$SLURM_2605_CTLD_PORT`` / ``$SLURM_2605_SLURMD_BASE_PORT`` + K (default 21817 / 21800), driven
  like 24.11. It runs only when ``$GPUPLATFORM_SLURM_VERSIONS`` names it.

Every Slurm test runs on 24.11 (and 26.05); tests marked ``slurm_smoke`` run on 22.05 too (the
whole suite on both would not fit the test budget; the parsers are tested on every version's
captured output); ``slurm_versions("22.05")`` names the versions outright (the PyTorch job needs
the host's Python). ``$GPUPLATFORM_SLURM_VERSIONS`` (comma-separated, default ``22.05,24.11``)
is the versions a run uses at all: ``GPUPLATFORM_SLURM_VERSIONS=26.05`` runs every Slurm test
on 26.05 alone.
Outside CI a machine that cannot run Slurm skips them with the reason; under ``CI=true`` that is
a failure, never a skip.

The clusters are fixed directories and ports shared by the whole session, so in a parallel run
every test of this directory runs in one pytest-xdist worker (tests/conftest.py schedules it as
one unit); a test elsewhere that asks for these fixtures is refused at collection.
"""

from __future__ import annotations

import dataclasses
import grp
import os
import pwd
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from scheduler.backends.base import BackendJobSpec, RunRef
from scheduler.backends.slurm import SlurmBackend

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "slurm-local"
MODERN = "24.11"
LEGACY = "22.05"
NEWEST = "26.05"  # Debian 14 (forky): run when $GPUPLATFORM_SLURM_VERSIONS names it
DEFAULT_VERSIONS = (LEGACY, MODERN)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def enabled_versions() -> tuple[str, ...]:
    """The Slurm versions this run uses (``$GPUPLATFORM_SLURM_VERSIONS``, comma-separated)."""
    raw = os.environ.get("GPUPLATFORM_SLURM_VERSIONS", "")
    versions = tuple(v.strip() for v in raw.split(",") if v.strip()) or DEFAULT_VERSIONS
    unknown = sorted(set(versions) - {LEGACY, MODERN, NEWEST})
    if unknown:
        raise pytest.UsageError(
            f"GPUPLATFORM_SLURM_VERSIONS: unknown Slurm version(s) {unknown}; "
            f"known: {LEGACY}, {MODERN}, {NEWEST}"
        )
    return versions


@dataclass(frozen=True)
class JobFile:
    """A file jobs write: ``host`` is where this test reads it, ``path`` what a job writes."""

    host: Path
    path: str

    def exists(self) -> bool:
        return self.host.exists()

    def read_text(self) -> str:
        return self.host.read_text()

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True)
class LocalSlurm:
    version: str
    dir: str  # as the cluster sees it
    root: str  # "" for the host's Slurm; the chroot root otherwise
    ctld_port: int
    slurmd_base_port: int
    accounting: str = "jobcomp"  # or "slurmdbd" (scripts/slurm-local --accounting)
    suite: str = ""  # the Debian suite a missing root is built from (scripts/slurm-root --suite)
    min_job_age_s: int = 600  # how long a finished job stays in squeue

    @property
    def conf(self) -> str:
        return f"{self.dir}/slurm.conf"

    @property
    def host_dir(self) -> Path:
        return Path(self.root + self.dir)

    @property
    def prefix(self) -> list[str]:
        return ["chroot", self.root] if self.root else []

    def file(self, name: str) -> JobFile:
        """A file in the jobs' shared scratch directory."""
        return JobFile(host=self.host_dir / "jobs" / name, path=f"{self.dir}/jobs/{name}")

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (for assertions)."""
        command = [*self.prefix, "env", f"SLURM_CONF={self.conf}", "LC_ALL=C", *argv]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=60)

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(SCRIPT), *args, "--dir", self.dir, "--ctld-port", str(self.ctld_port)]
        argv += ["--slurmd-base-port", str(self.slurmd_base_port)]
        if args[0] == "start":
            argv += ["--accounting", self.accounting, "--min-job-age", str(self.min_job_age_s)]
        if self.root:
            argv += ["--root", self.root]
            if args[0] == "start" and self.suite:
                argv += ["--suite", self.suite]
        return subprocess.run(argv, capture_output=True, text=True, timeout=600)

    def pid(self, daemon: str) -> int:
        return int((self.host_dir / "run" / f"{daemon}.pid").read_text().strip())

    def kill_node(self, node: str, *slurm_job_ids: str) -> None:
        """Emulate ``node`` losing power while it runs the given Slurm jobs (each on this node
        alone): its slurmd, every step daemon of those jobs (the batch step's too) and all they
        started stop in one instant. A node that kept the batch step alive is not dead: its
        script's srun could end on its own and report the job FAILED before Slurm noticed the
        node was gone."""
        table = _process_table()
        root = os.path.realpath(self.root or "/")
        names = {f"slurmstepd: [{ref}." for ref in slurm_job_ids}
        steps = [
            pid
            for pid, (_, cmdline, proc_root) in table.items()
            if proc_root == root and any(cmdline.startswith(name) for name in names)
        ]
        assert len(steps) >= len(slurm_job_ids), (slurm_job_ids, steps)
        doomed = _with_descendants(table, [self.pid(f"slurmd-{node}"), *steps])
        # Stopped first, so nothing among them reacts to another's death before it dies too.
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in doomed:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def backend_config(self, **overrides) -> dict:
        config = {
            "slurm_conf": self.conf,
            "partition": "gpu",
            "job_workdir": f"{self.dir}/jobs",
            "tries": 2,
            "backoff_s": 0.2,
            **overrides,
        }
        if self.root:
            config.setdefault("command_prefix", self.prefix)
        return config

    def backend(self, **overrides) -> SlurmBackend:
        return SlurmBackend(self.backend_config(**overrides))


def _process_table() -> dict[int, tuple[int, str, str]]:
    """Every process of this machine: pid -> (parent pid, command line, root directory)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            proc_root = os.path.realpath(entry / "root")
        except OSError:  # it ended while we looked
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])  # the name may hold ") "
        table[int(entry.name)] = (parent, cmdline.strip(), proc_root)
    return table


def _with_descendants(table: dict[int, tuple[int, str, str]], pids: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, queue = [], list(pids)
    while queue:
        pid = queue.pop()
        if pid not in found:
            found.append(pid)
            queue += children.get(pid, [])
    return found


def local_slurm(version: str) -> LocalSlurm:
    env = os.environ.get
    if version == MODERN:
        root = env("GPUPLATFORM_SLURM_ROOT") or "/var/cache/gpuplatform/debian13-slurm"
        return LocalSlurm(
            version=version,
            dir=env("GPUPLATFORM_SLURM_MODERN_DIR") or "/srv/gpuplatform-slurm",
            root=root,
            ctld_port=int(env("SLURM_MODERN_CTLD_PORT") or 19817),
            slurmd_base_port=int(env("SLURM_MODERN_SLURMD_BASE_PORT") or 19800),
        )
    if version == NEWEST:
        return LocalSlurm(
            version=version,
            dir=env("GPUPLATFORM_SLURM_2605_DIR") or "/srv/gpuplatform-slurm-2605",
            root=env("GPUPLATFORM_SLURM_2605_ROOT") or "/var/cache/gpuplatform/debian14-slurm",
            ctld_port=int(env("SLURM_2605_CTLD_PORT") or 21817),
            slurmd_base_port=int(env("SLURM_2605_SLURMD_BASE_PORT") or 21800),
            suite="forky",
        )
    return LocalSlurm(
        version=version,
        dir=env("GPUPLATFORM_SLURM_DIR") or "/tmp/gpuplatform-slurm",
        root="",
        ctld_port=int(env("SLURM_LOCAL_CTLD_PORT") or 16817),
        slurmd_base_port=int(env("SLURM_LOCAL_SLURMD_BASE_PORT") or 17000),
    )


def pytest_generate_tests(metafunc):
    # Every test that needs a Slurm runs on 24.11 and 26.05; the smoke subset on 22.05 as well;
    # of those, the versions this run uses.
    if "slurm_version" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("slurm_versions")
        versions = [MODERN, NEWEST]
        if only is not None:
            versions = list(only.args)
        elif metafunc.definition.get_closest_marker("slurm_smoke") is not None:
            versions.append(LEGACY)
        enabled = enabled_versions()
        versions = [v for v in versions if v in enabled]
        metafunc.parametrize("slurm_version", versions, indirect=True, scope="session")


@pytest.fixture(scope="session")
def slurm_version(request) -> str:
    return request.param


_started: dict[str, LocalSlurm] = {}


def _start(cluster: LocalSlurm, nodes: int) -> None:
    """Start ``cluster`` (or find it running); a failure fails under CI and skips elsewhere."""
    proc = cluster.script("start", "--nodes", str(nodes))
    if proc.returncode != 0:
        message = (
            f"could not start a local Slurm {cluster.version} in {cluster.dir} with "
            f"scripts/slurm-local (rc={proc.returncode}): {proc.stderr.strip()[-800:]}"
        )
        if in_ci():
            pytest.fail("CI=true requires a real Slurm: " + message, pytrace=False)
        pytest.skip("SLURM TESTS SKIPPED (not CI): " + message)


def _cancel_leftovers(cluster: LocalSlurm) -> None:
    """Jobs still queued or running on a test Slurm belong to an earlier run that was stopped
    half-way (its fixtures never cancelled them); they would hold nodes this run's tests need."""
    leftovers = cluster.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
    if leftovers:
        cluster.run("scancel", *leftovers, check=False)
        wait_for(
            lambda: not cluster.run("squeue", "-h", "-o", "%i", check=False).stdout.split(),
            60,
            f"an earlier run's Slurm jobs {leftovers} to leave",
        )


@pytest.fixture(scope="session")
def slurm_cluster(slurm_version: str) -> LocalSlurm:
    if slurm_version in _started:
        return _started[slurm_version]
    cluster = local_slurm(slurm_version)
    _start(cluster, nodes=4)
    # A node Slurm drained by itself ("Kill task failed": an emulated node death that left a
    # step behind) is a leftover of an earlier run, not something these tests asked for.
    listing = cluster.run("sinfo", "-h", "-N", "-o", "%N|%E", check=False).stdout
    for line in listing.splitlines():
        node, _, reason = line.partition("|")
        if reason.strip() == "Kill task failed":
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    _cancel_leftovers(cluster)
    _started[slurm_version] = cluster
    return cluster


@pytest.fixture(scope="session")
def accounting_slurm(slurm_version: str) -> LocalSlurm:
    """A small Slurm (two nodes) that keeps its accounting in a slurmdbd on the machine's
    MariaDB, as sites run it, and forgets a finished job from squeue after 2 s (Slurm's
    minimum; it purges about once a minute), so the backend finds finished runs through
    ``sacct``. Beside the version's main test cluster: its directory + ``-acct``, slurmctld on
    the main one's port + 20, slurmd K on that + 3 + K, slurmdbd on that + 100."""
    main = local_slurm(slurm_version)
    cluster = dataclasses.replace(
        main,
        dir=main.dir + "-acct",
        ctld_port=main.ctld_port + 20,
        slurmd_base_port=main.ctld_port + 23,
        accounting="slurmdbd",
        min_job_age_s=2,
    )
    _start(cluster, nodes=2)
    _cancel_leftovers(cluster)
    return cluster


def host_python_versions() -> tuple[str, ...]:
    """The Slurms whose jobs can run this test run's Python: those in a Debian root (24.11,
    26.05) when the interpreter lives where a root has nothing of its own (pyenv, /opt, a
    checkout), so it can be bound in (``host_python``); else the host's 22.05. A virtualenv of
    the system Python has /usr as its base, and the root's /usr is its own."""
    base = sys.base_prefix
    system = base in ("/", "/usr") or (
        base.startswith("/usr/") and not base.startswith("/usr/local")
    )
    return (LEGACY,) if system else (MODERN, NEWEST)


@pytest.fixture(scope="session")
def host_python(slurm_cluster: LocalSlurm) -> Path:
    """The directory of this test run's Python and its scripts (torchrun), as the cluster's
    jobs see it. The cluster in a root gets the checkout and the interpreter bound read-only at
    the same paths (``scripts/slurm-root bind``), so its jobs run this virtualenv as the host's
    do. The binds stay until ``scripts/slurm-root umount`` (or ``remove``): a concurrent run on
    the same root may be using them."""
    if slurm_cluster.root:
        wanted = sorted({str(REPO), sys.base_prefix, sys.prefix})
        # a directory inside another one listed is already visible through it
        dirs = [d for d in wanted if not any(d.startswith(o + "/") for o in wanted if o != d)]
        argv = [str(REPO / "scripts" / "slurm-root"), "bind", *dirs, "--root", slurm_cluster.root]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            message = f"could not bind {dirs} into {slurm_cluster.root}: {proc.stderr[-800:]}"
            if in_ci():
                pytest.fail("CI=true requires a real Slurm: " + message, pytrace=False)
            pytest.skip("SLURM TESTS SKIPPED (not CI): " + message)
    return Path(sys.executable).parent


@pytest.fixture
def slurm_platform(slurm_cluster, priorities, alice, teams):
    """A platform Cluster on the local Slurm (its nodes imported), cleaned up afterwards."""
    from scheduler.backends import reset_backends
    from scheduler.models import Cluster
    from scheduler.services import cluster_import_nodes

    reset_backends()
    cluster = Cluster.objects.create(
        name="local-slurm",
        backend_kind="slurm",
        # Each test database numbers jobs from 1 again; the namespace keeps this run's Slurm
        # job names apart from earlier runs' still in Slurm's records.
        backend_config=slurm_cluster.backend_config(run_namespace=f"t{uuid.uuid4().hex[:8]}-"),
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


@pytest.fixture()
def backend(slurm_cluster: LocalSlurm) -> SlurmBackend:
    return slurm_cluster.backend()


@pytest.fixture()
def job_id(request) -> str:
    """A fresh platform job id per test, so reruns on a kept cluster never meet old jobs."""
    base = re.sub(r"[^a-z0-9-]", "-", request.node.originalname[5:25].lower())
    return f"{base}-{uuid.uuid4().hex[:6]}"


TEAM = "alice-team"  # the team of a spec() that names none


def run_ref(job_id: str, attempt: int = 1, team: str = TEAM) -> RunRef:
    """The run a spec() of ``job_id`` and ``attempt`` (for ``team``) submits."""
    return RunRef(job_id, attempt, team)


def spec(job_id: str, command: str, placement: dict[str, tuple[int, ...]], **kw) -> BackendJobSpec:
    """A run of ``command`` on ``placement`` (node -> GPU indices, the same count on each)."""
    gpus = len(next(iter(placement.values())))
    return BackendJobSpec(
        job_id=job_id,
        attempt=kw.pop("attempt", 1),
        name=kw.pop("name", "test job"),
        team=kw.pop("team", TEAM),
        image="",
        command=command,
        workers=len(placement),
        gpus_per_worker=gpus,
        placement=placement,
        **kw,
    )


def ensure_system_user(
    prefix: list[str], account: str, uid: int | None = None, gid: int | None = None
) -> None:
    """A system user ``account`` (no home, a login shell that runs, a group of its name) where
    ``prefix`` runs: the host, or inside a root, there with the host's ``uid`` / ``gid`` so a
    job's files and processes have one owner on both sides. Jobs get ``--export=NONE``, so
    slurmd loads the account's login environment (``su -``), and Slurm 26.05 cancels a job
    whose environment cannot be loaded; an account made by an earlier run with another shell
    gets this one."""
    entry = subprocess.run([*prefix, "getent", "passwd", account], capture_output=True, text=True)
    if entry.returncode == 0:
        if entry.stdout.strip().split(":")[-1] != LOGIN_SHELL:
            subprocess.run([*prefix, "usermod", "--shell", LOGIN_SHELL, account], check=True)
        return
    group = ["groupadd", "--system"] + (["--gid", str(gid)] if gid is not None else [])
    user = ["useradd", "--system", "--no-create-home", "--shell", LOGIN_SHELL]
    user += ["--uid", str(uid)] if uid is not None else []
    subprocess.run([*prefix, *group, account], check=True, capture_output=True)
    subprocess.run([*prefix, *user, "--gid", account, account], check=True, capture_output=True)


LOGIN_SHELL = "/bin/bash"

# Two team accounts (test_team_accounts_on_slurm.py, test_team_account_runs_on_slurm.py).
TEAM_ACCOUNTS = {"team-a": "gp-ci-team-a", "team-b": "gp-ci-team-b"}


@pytest.fixture(scope="session")
def team_uids(slurm_cluster: LocalSlurm) -> dict[str, int]:
    """The team accounts' uids, each made where missing (on the host and in the root)."""
    uids = {}
    for account in TEAM_ACCOUNTS.values():
        ensure_system_user([], account)
        uid, gid = pwd.getpwnam(account).pw_uid, grp.getgrnam(account).gr_gid
        if slurm_cluster.root:
            ensure_system_user(slurm_cluster.prefix, account, uid, gid)
        uids[account] = uid
    return uids


def idle_nodes(cluster: LocalSlurm, count: int) -> list[str]:
    """``count`` nodes Slurm would start a job on now. An earlier test of the session may leave
    one COMPLETING for minutes (the controller outage test, on 24.11), and a job pinned there
    would wait that long."""

    def idle() -> list[str]:
        # "%T" exactly "idle": `sinfo -t idle` also lists a node that is "completing"
        listing = cluster.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        nodes = sorted(
            {n for n, _, t in (line.partition(" ") for line in listing.splitlines()) if t == "idle"}
        )
        return nodes[:count] if len(nodes) >= count else []

    return wait_for(idle, 120, f"{count} idle nodes")


def wait_for(condition: Callable[[], object], timeout: float, what: str, every: float = 0.5):
    """Poll ``condition`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
