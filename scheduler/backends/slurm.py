"""The Slurm backend: runs the platform's placement decisions through Slurm's own commands.

Every call is an argument list handed to ``subprocess.run`` (never a shell string): ``sbatch``
(script on stdin), ``scancel``, ``scontrol``, ``squeue --json``, ``sinfo --json`` and, where
accounting exists, ``sacct``. Parsing lives in :mod:`scheduler.backends.slurm_parsers`; it reads
the JSON of Slurm 22.05 and of 23.02 and later (24.11 tested) by the shape each answer has.
Running one command (prefixes, retries, typed errors) is :mod:`scheduler.backends.slurm_commands`;
telling our runs' jobs from other users' and finding each run's job is
:mod:`scheduler.backends.slurm_runs`; the class here is the backend protocol on top of them.

The commands can run through a ``command_prefix`` (``["ssh", "login-node"]``, ``["chroot",
"/srv/slurm-root"]``), so the platform host need not be a Slurm node; job files (output,
checkpoint progress) are then read through the same prefix (``dd``, ``grep``), else from this
host's filesystem.

Guarantees (on top of :mod:`scheduler.backends.base`):
- Idempotent by our identity: a run is the Slurm job named ``backend_job_name(job_id, attempt)``
  that the account running the commands owns, or, with ``team_accounts``, the account the run
  was submitted as (``RunRef.account``, recorded by the platform from ``team_account``, or for
  older runs learnt from Slurm with ``run_owners``; the service account's for runs submitted
  before the setting). A team mapped to another account keeps its live runs; its new runs are
  the new account's. Another user's job of that name, another team's account's included, is
  not the run: it is never adopted, reported, read, signalled or cancelled as it.
  ``submit`` first looks that name up (squeue, then accounting) and returns the existing Slurm job
  id; ``cancel`` / ``checkpoint`` act by name, so a missing or finished run is a quiet no-op;
  draining a drained node or resuming a node in service succeeds.
- With ``team_accounts`` a team's run is submitted, signalled and cancelled as the team's own
  account and its files are private to that account; a team without one is refused, never run
  as the service account.
- A Slurm outage (slurmctld unreachable, command timeout, missing client tools) raises
  :class:`BackendUnavailable` after a few quick retries with capped exponential backoff and full
  jitter. Nothing is changed on our side, so the caller simply retries later. ``sbatch`` itself
  is never blindly re-sent: each retry looks the name up first, so an sbatch that reached
  slurmctld before a timeout is not submitted twice.
- A refusal (unknown node, impossible request, invalid spec) raises :class:`BackendRejected`.
- ``poll_jobs`` leaves out a run in a state word no supported Slurm prints (logged): the loop
  changes nothing about it, rather than take it for a run Slurm has no record of.
- ``poll_jobs`` reports ``checkpointed_progress_s`` from ``<job_workdir>/<run>.progress`` when
  the job wrote one there (after a checkpoint).
- Output Slurm prints in a shape of neither JSON generation is a :class:`BackendRejected` naming
  the field (``squeue --json: unsupported output (Slurm 25.11.0, data_parser/v0.0.44):
  jobs[0].job_state: ...``): the loop marks the cluster unavailable and changes no job or node.
- Slurm never restarts a run by itself: jobs are submitted with ``--no-requeue`` (the platform
  requeues as a new attempt). ``live_runs`` lists our unfinished Slurm jobs, each with the team
  account that owns it, so the sync can cancel any of a team's that the platform has given up
  on (and leave another team's job of the name alone).
- ``dry_run`` logs the commands that would change the cluster (sbatch, scancel, scontrol) and
  does not run them; read-only queries still run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.backends.base import (
    BackendError,
    BackendJobSpec,
    BackendJobState,
    BackendJobStatus,
    BackendNode,
    BackendRejected,
    BackendUnavailable,
    LiveRun,
    LogChunk,
    RunRef,
    byte_chunk,
    byte_window,
    parse_backend_job_name,
)
from scheduler.backends.slurm_accounts import (
    UNKNOWN_OWNER,
    directory_problems,
    path_and_parents,
    prefix_setting,
    team_accounts_setting,
    team_command_prefix_setting,
)
from scheduler.backends.slurm_files import JobFiles
from scheduler.backends.slurm_nodes import (
    parse_active_reservations,
    parse_scontrol_node_flags,
    parse_sinfo_json,
    parse_topology_conf,
)
from scheduler.backends.slurm_parsers import (
    SQUEUE_OWNED_FORMAT,
    SQUEUE_OWNER_NAME_FORMAT,
    SlurmJob,
    SlurmQueryError,
    build_job_script,
    build_sbatch_argv,
    is_known_state,
    is_live,
    job_status,
    parse_sbatch_parsable,
    parse_squeue_live,
    parse_squeue_owners,
)
from scheduler.backends.slurm_runs import SlurmRunFinder

logger = logging.getLogger(__name__)

# The configuration keys SlurmBackend reads (the class docstring says what each does), and the
# run namespace every backend's configuration may carry (scheduler.backends.run_namespace).
_CONFIG_KEYS = frozenset(
    {
        "slurm_conf",
        "partition",
        "account",
        "job_workdir",
        "log_dir",
        "accounting",
        "sacct_since",
        "topology_conf",
        "container_option",
        "extra_sbatch_args",
        "bin_dir",
        "command_prefix",
        "node_command_prefix",
        "command_timeout_s",
        "tries",
        "backoff_s",
        "backoff_max_s",
        "checkpoint_min_interval_s",
        "dry_run",
        "run_namespace",
        "team_accounts",
        "team_command_prefix",
    }
)


class SlurmBackend(SlurmRunFinder):
    """A Slurm cluster driven through its command-line tools.

    ``config`` keys (all optional):

    - ``slurm_conf``: path exported as ``SLURM_CONF`` to every command.
    - ``partition``: submit into and list nodes of this partition only.
    - ``account``: ``sbatch --account``.
    - ``job_workdir``: the jobs' working directory (must exist on the compute nodes; default
      ``/tmp``); checkpoint-request files go there. ``log_dir``: where ``<run>.out`` is written
      (default: ``job_workdir``); ``read_log`` reads it here or through ``command_prefix``.
    - ``accounting``: ``auto`` (default: sacct, else the jobcomp file via ``sacct -c``, else
      none), ``sacct``, ``jobcomp`` or ``none``; used to find runs that left squeue.
    - ``sacct_since``: how far back accounting is searched (default ``now-14days``).
    - ``topology_conf``: a Slurm ``topology.conf`` whose leaf switches name racks for nodes
      without a ``rack=`` feature.
    - ``container_option``: e.g. ``--container-image`` (pyxis) to run ``spec.image``.
    - ``extra_sbatch_args``: a list of further sbatch arguments (site policy); ``--requeue`` is
      refused.
    - ``bin_dir``: directory of the Slurm commands (default: ``PATH``).
    - ``command_prefix``: an argument list put before every command, e.g. ``["ssh",
      "login-node"]`` or ``["chroot", "/srv/root"]``; ``SLURM_CONF`` then travels as ``env
      SLURM_CONF=...`` after it. When it runs ``ssh``, which hands the remote side one command
      line, every argument after it is shell-quoted. Job files are read through it.
    - ``node_command_prefix``: the same, for the node changes alone (``scontrol update`` of a
      drain or undrain), e.g. ``["sudo", "-n", "-u", "slurm"]``; default ``command_prefix``.
      With it the account jobs run as needs no Slurm Admin level, which would let any job's
      command drain the cluster's nodes.
    - ``command_timeout_s`` (30), ``tries`` (3), ``backoff_s`` (0.5), ``backoff_max_s`` (4).
    - ``checkpoint_min_interval_s`` (60): a run asked to checkpoint less than this long ago is
      not asked again.
    - ``dry_run``: log cluster-changing commands instead of running them.
    - ``team_accounts``: team slug -> Unix account. When set, a team's runs are submitted,
      signalled, cancelled and their files read as its account, through
      ``team_command_prefix`` (default ``["sudo", "-n", "-u", "{account}"]``, put after
      ``command_prefix``); their files live in ``<job_workdir>/<account>`` and
      ``<log_dir>/<account>``, mode 0700. A team without an account is refused
      (``BackendRejected``), never run as the service account. The runs the platform counts as
      its own are those of these accounts and of the service account; the job of one run is
      one of the account it was submitted as (``RunRef.account``, else its team's) or of the
      service account. Remapping a team changes the account of its new runs alone.
    """

    kind = "slurm"

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        cfg = dict(config or {})
        unknown = set(cfg) - _CONFIG_KEYS
        if unknown:
            # A misspelt key ("partiton") was ignored: jobs went to the default partition.
            raise ValueError(f"unknown slurm backend settings: {sorted(unknown)}")
        self.slurm_conf = str(cfg.get("slurm_conf") or "")
        self.partition = str(cfg.get("partition") or "")
        self.account = str(cfg.get("account") or "")
        self.job_workdir = str(cfg.get("job_workdir") or "/tmp")
        self.log_dir = str(cfg.get("log_dir") or self.job_workdir)
        self.accounting = str(cfg.get("accounting") or "auto")
        if self.accounting not in {"auto", "sacct", "jobcomp", "none"}:
            raise ValueError(f"accounting must be auto, sacct, jobcomp or none: {self.accounting}")
        self.sacct_since = str(cfg.get("sacct_since") or "now-14days")
        self.topology_conf = str(cfg.get("topology_conf") or "")
        self.container_option = str(cfg.get("container_option") or "")
        self.extra_sbatch_args = tuple(str(a) for a in cfg.get("extra_sbatch_args") or ())
        if any(a.split("=", 1)[0] == "--requeue" for a in self.extra_sbatch_args):
            # It would override our --no-requeue: Slurm would restart attempts by itself.
            raise ValueError("extra_sbatch_args must not contain --requeue: the platform requeues")
        self.bin_dir = str(cfg.get("bin_dir") or "")
        self.command_prefix = prefix_setting(cfg, "command_prefix", ())
        self.node_command_prefix = prefix_setting(cfg, "node_command_prefix", self.command_prefix)
        self.command_timeout_s = float(cfg.get("command_timeout_s", 30))
        self.tries = max(1, int(cfg.get("tries", 3)))
        self.backoff_s = float(cfg.get("backoff_s", 0.5))
        self.backoff_max_s = float(cfg.get("backoff_max_s", 4))
        self.dry_run = bool(cfg.get("dry_run", False))
        self.checkpoint_min_interval_s = float(cfg.get("checkpoint_min_interval_s", 60))
        self.team_accounts = team_accounts_setting(cfg)
        self.team_command_prefix = team_command_prefix_setting(cfg, bool(self.team_accounts))
        self._sleep = sleep
        self._accounting_mode: str | None = None if self.accounting == "auto" else self.accounting
        self._version: str | None = None
        self._uid: int | None = None
        # Account name -> uid where the commands run; an account is never renumbered under a
        # running platform, and asking getent on every call would double the commands.
        self._known_uids: dict[str, int] = {}
        self.files = JobFiles(
            job_workdir=self.job_workdir,
            log_dir=self.log_dir,
            prefixed=bool(self.command_prefix),
            command=lambda argv, account: self._command(argv, account=account),
            execute=lambda command, binary: self._exec(command, binary=binary),
        )
        # Run name -> the team account that owns it (None: the service account). A Slurm job's
        # owner never changes; remembered so reading a log does not query Slurm each time.
        self._run_accounts: dict[str, str | None] = {}

    # -----------------------------------------------------------------------------------------
    # The Backend protocol

    def submit(self, spec: BackendJobSpec) -> str:
        """Start ``spec`` on exactly its nodes; return the Slurm job id (existing one if known).
        With ``team_accounts`` the run is submitted as its team's account, into that account's
        private directories; a team without an account is refused before anything runs."""
        name = spec.backend_name
        account = self._submit_account(spec.team)
        try:
            argv = build_sbatch_argv(
                spec,
                log_path=self.files.log_path(name, account),
                workdir=self.files.job_dir(account),
                partition=self.partition,
                account=self.account,
                extra_args=self.extra_sbatch_args,
            )
            script = build_job_script(
                spec,
                checkpoint_request_path=self.files.checkpoint_request_path(name, account),
                progress_path=self.files.progress_path(name, account),
                container_option=self.container_option,
            )
        except ValueError as exc:
            raise BackendRejected(str(exc)) from exc
        prepared = False
        for try_no in range(1, self.tries + 1):
            # Only the team's own jobs of the name (its account's, the service account's): run
            # names are predictable (job ids count up) and every team account may name its jobs
            # freely. Another team's job of the name is neither adopted (its output would be
            # shown as this run's, its GPU time billed to this team) nor in the way: the run is
            # submitted beside it, and every later call is told the run's team.
            existing = self._find_runs({name: account}).get(name)
            if existing is not None:
                logger.info("slurm: %s already submitted as job %s", name, existing.job_id)
                return existing.job_id
            try:
                if account and not prepared:
                    self._prepare_account_dirs(account)
                    prepared = True
                out = self._run(argv, stdin=script, retry=False, account=account)
            except BackendUnavailable:
                if try_no == self.tries:
                    raise
                self._backoff(try_no)
                continue
            if self.dry_run:
                return f"dry-run:{name}"
            try:
                job_id = parse_sbatch_parsable(str(out))
            except SlurmQueryError as exc:
                # sbatch said nothing we understand; the job may exist. The caller's retry
                # looks the name up before submitting again.
                raise BackendUnavailable(str(exc)) from exc
            logger.info("slurm: submitted %s as job %s on %s", name, job_id, list(spec.placement))
            self._remember_account(name, account)
            return job_id
        raise BackendUnavailable("Slurm unavailable")  # not reached: the loop raises or returns

    def _submit_account(self, team: str) -> str | None:
        """The account ``team``'s runs are submitted as: None (the service account) without
        ``team_accounts``; with it, the team's own, or a refusal. Refused rather than held: the
        job cannot run here until an admin maps the team, and failing it says so at once,
        where a held job would sit on its place in the queue with no end."""
        if not self.team_accounts:
            return None
        account = self.team_accounts.get(team)
        if account is None:
            raise BackendRejected(
                f"team {team!r} has no Unix account on this cluster (the Slurm backend's "
                "team_accounts); its jobs are not run as the platform's service account"
            )
        uid = self._team_account_uids().get(account)
        if uid is not None and uid in (0, self._own_uid()):
            # The service account may act as every team's account (its sudo rule): a job
            # running as it, or as root, could read, signal and cancel every team's runs.
            who = "root" if uid == 0 else "the platform's service account"
            raise BackendRejected(
                f"team {team!r} is mapped to {account!r}, which is {who} (uid {uid}); a team's "
                "jobs must run as an account of their own (team_accounts)"
            )
        return account

    def _prepare_account_dirs(self, account: str) -> None:
        """Create ``account``'s job and log directories as ``account``, mode 0700, so no other
        team's account can read or write its runs' files. ``install -d`` also sets the mode of a
        directory that exists, and fails on one the account does not own (another account made
        it first, to read what lands there): a refusal, and nothing is submitted."""
        dirs = list(dict.fromkeys([self.files.job_dir(account), self.files.log_dir_of(account)]))
        argv = ["install", "-d", "-m", "0700", *dirs]
        if self.dry_run:
            logger.info("slurm dry-run: as %s: %s", account, argv)
            return
        self._as_account(argv, account, f"cannot prepare the directories {dirs}")
        self._check_account_dirs(account, dirs)

    def _as_account(self, argv: list[str], account: str, failure: str) -> str:
        """Run a file command as ``account``; its stdout. A refusal is ``failure`` with the
        command's own message."""
        try:
            proc = self._exec(self._command(argv, account=account))
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendUnavailable(f"{argv[0]} as {account}: {exc}") from exc
        if proc.returncode != 0:
            raise BackendRejected(
                f"{failure} as {account}: {proc.stderr.strip() or proc.returncode}"
            )
        return proc.stdout

    def _check_account_dirs(self, account: str, dirs: list[str]) -> None:
        """Refuse the run unless ``account`` alone holds its directories, now and until the
        job ends (the rule and why: ``slurm_accounts.directory_problems``)."""
        resolved = self._as_account(
            ["realpath", "-e", "--", *dirs], account, f"cannot resolve {dirs}"
        ).splitlines()
        paths = list(dict.fromkeys(p for d in [*dirs, *resolved] for p in path_and_parents(d)))
        answer = self._as_account(
            ["stat", "-c", "%u %f %n", "--", *paths], account, f"cannot inspect {dirs}"
        )
        account_uid = self._team_account_uids().get(account)
        problems = directory_problems(
            answer,
            own_dirs={os.path.normpath(d) for d in dirs},
            account=account,
            account_uid=account_uid,
            trusted={0, self._own_uid(), account_uid},
        )
        if problems:
            raise BackendRejected(
                f"the directories of {account}'s runs are not private to it, so nothing was "
                "submitted: " + "; ".join(problems)
            )

    def run_provenance(self, spec: BackendJobSpec) -> dict[str, Any]:
        """What this cluster can say about what ``spec``'s run executes (its reproducibility
        record). Slurm resolves no image digest: without a container plugin
        (``container_option``) the command runs on the nodes' own software, and with one the
        plugin pulls the image by its reference when the job starts. Recorded instead: the
        sha256 of the exact batch script submitted (command, exported environment, srun line)
        and the Slurm version."""
        name = spec.backend_name
        account = self.team_accounts.get(spec.team)
        script = build_job_script(
            spec,
            checkpoint_request_path=self.files.checkpoint_request_path(name, account),
            progress_path=self.files.progress_path(name, account),
            container_option=self.container_option,
        )
        if self._version is None:
            try:
                self._version = str(self._run(["sinfo", "--version"])).strip()
            except BackendError as exc:
                logger.info("slurm: version unknown: %s", exc)
        if self.container_option and spec.image:
            note = (
                f"Slurm runs the image through its container plugin ({self.container_option}) "
                "by reference; the digest it pulls is not reported back"
            )
        else:
            note = (
                "Slurm without a container plugin runs the command on the nodes' own software "
                "(no image); recorded instead: the batch script's sha256 and the Slurm version"
            )
        return {
            "image_digest": None,
            "image_note": note,
            "runtime": {
                "batch_script_sha256": hashlib.sha256(script.encode()).hexdigest(),
                "slurm_version": self._version or "",
                "container_option": self.container_option,
                "partition": self.partition,
            },
        }

    def cancel(self, run: RunRef) -> None:
        """Cancel the run (pending, running or requeued); no run, or a finished one, is fine."""
        if self.team_accounts:
            # As the account that owns it: a team account may cancel its own jobs alone, and
            # the service account needs no Slurm privilege over the teams'.
            owner = self._run_owner(run)
            for job in self._unfinished_runs(run, owner):
                if job.state != "COMPLETING":
                    account = self._account_of(job, owner)
                    self._run(["scancel", job.job_id], already_done_ok=True, account=account)
            return
        # --me: with Slurm's Admin level (for drains) scancel --name would also stop another
        # user's job that happens to carry the run's name.
        argv = ["scancel", "--me", f"--name={run.backend_name}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        self._run(argv, already_done_ok=True)

    def _unfinished_runs(self, run: RunRef, owner: str | None) -> list[SlurmJob]:
        """The unfinished Slurm jobs of ``run``'s name that ``owner``, the account it was
        submitted as (or the service account) owns, each with its owner's uid (one light
        squeue)."""
        name = run.backend_name
        accounts = [owner] if owner else []
        argv = ["squeue", "--noheader", *self._owner_filter(accounts), f"--name={name}"]
        argv.append(f"--format={SQUEUE_OWNED_FORMAT}")
        if self.partition:
            argv.append(f"--partition={self.partition}")
        jobs: list[SlurmJob] = self._run(  # type: ignore[assignment]
            argv, parse=lambda text: parse_squeue_live(text, with_user_id=True)
        )
        owners = self._owner_uids(owner)
        return [job for job in jobs if job.name == name and job.user_id in owners]

    def checkpoint(self, run: RunRef) -> None:
        """Send USR1 to the run's batch script, which records the request (touches
        ``<job_workdir>/<run>.checkpoint-request``) and forwards it to the workers. A run that
        is not running is left alone; a run asked less than ``checkpoint_min_interval_s`` ago
        (by that file's time) is not asked again, so a caller repeating the request every cycle
        of a preemption grace does not make the job checkpoint over and over."""
        name = run.backend_name
        if self.team_accounts:
            owner = self._run_owner(run)
            for job in self._unfinished_runs(run, owner):
                if job.state != "RUNNING":
                    continue
                account = self._account_of(job, owner)
                asked = self.files.mtime(self.files.checkpoint_request_path(name, account), account)
                if asked is not None and time.time() - asked < self.checkpoint_min_interval_s:
                    continue
                argv = ["scancel", "--batch", "--signal=USR1", job.job_id]
                self._run(argv, already_done_ok=True, account=account)
            return
        asked = self.files.mtime(self.files.checkpoint_request_path(name))
        if asked is not None and time.time() - asked < self.checkpoint_min_interval_s:
            return
        argv = [
            "scancel",
            "--batch",
            "--signal=USR1",
            "--state=RUNNING",
            "--me",
            f"--name={name}",
        ]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        self._run(argv, already_done_ok=True)

    def drain_node(self, name: str, reason: str) -> None:
        """Drain ``name`` (running jobs finish, nothing new starts). Draining again is fine."""
        reason = " ".join((reason or "gpuplatform quarantine").split())
        self._update_node(name, "state=drain", f"reason={reason}")

    def undrain_node(self, name: str) -> None:
        """Lift the drain of ``name``; a node already in service is fine. A down node stays down
        and returns to service when its slurmd does."""
        flags = self._run(["scontrol", "show", "node", name, "-o"], parse=parse_scontrol_node_flags)
        if "DRAIN" not in flags:
            # Nothing to lift. Asking anyway would need Slurm's Admin level, which a site may
            # not give the platform's account; then a node quarantined only on the platform's
            # side (its drain refused) could never be released.
            return
        # Not state=resume: on a DOWN node it forces IDLE+NOT_RESPONDING until SlurmdTimeout,
        # which list_nodes reads as ready, so a dead node would take work. UNDRAIN (Slurm 20.11+)
        # clears DRAIN only, and is what resume does on a node that is up.
        self._update_node(name, "state=undrain", already_done_ok=True)

    def _update_node(self, name: str, *settings: str, already_done_ok: bool = False) -> None:
        try:
            self._run(
                ["scontrol", "update", f"nodename={name}", *settings],
                already_done_ok=already_done_ok,
                node_change=True,
            )
        except BackendRejected as exc:
            if "invalid user id" not in str(exc).lower():
                raise
            # Slurm's whole answer to a user below its Admin level; say what to change.
            raise BackendRejected(
                f"{exc}: the account running the platform's node changes may not change "
                "nodes; run them as one that may (node_command_prefix, e.g. a sudo rule for "
                "scontrol update) or give it Slurm's Admin level (sacctmgr modify user "
                "<account> set adminlevel=Admin; docs/backends/slurm.md)"
            ) from exc

    def list_nodes(self) -> list[BackendNode]:
        """Nodes (of ``partition`` when set) with GPU count/model, state, drain reason, topology."""
        topology: dict[str, str] = {}
        if self.topology_conf:
            try:
                with open(self.topology_conf, encoding="utf-8") as fh:
                    topology = parse_topology_conf(fh.read())
            except OSError as exc:
                logger.warning("slurm: cannot read %s: %s", self.topology_conf, exc)
        # -N: one entry per node. Without it 23.02+ groups nodes that share a state into one
        # entry carrying one node's features (racks would be wrong); 22.05 ignores it.
        nodes: list[BackendNode] = self._run(  # type: ignore[assignment]
            ["sinfo", "-N", "--json"],
            parse=lambda text: parse_sinfo_json(text, partition=self.partition, topology=topology),
        )
        # sinfo's JSON does not say a node is in a reservation (22.05's nowhere, 24.11's only in
        # its text states), and a run pinned there would wait in Slurm while the platform
        # counts it as running.
        reserved: dict[str, str] = self._run(  # type: ignore[assignment]
            ["scontrol", "show", "reservation", "-o"], parse=parse_active_reservations
        )
        return [replace(n, reserved=reserved[n.name]) if n.name in reserved else n for n in nodes]

    def poll_jobs(self, runs: Iterable[RunRef]) -> list[BackendJobStatus]:
        """One squeue call (plus accounting for runs that left the queue) for all ``runs``."""
        runs = list(runs)
        if not runs:
            return []
        owners = {run.backend_name: self._run_owner(run) for run in runs}
        found = self._find_runs(owners)
        by_account: dict[str | None, list[str]] = {}
        for name in sorted(found):
            account = self._account_of(found[name], owners[name]) if self.team_accounts else None
            if account == UNKNOWN_OWNER:
                continue
            self._remember_account(name, account)
            by_account.setdefault(account, []).append(name)
        saved: dict[str, float] = {}
        for account, names in by_account.items():
            saved.update(self.files.read_progress(names, account))
        out = []
        for run in runs:
            job_id, attempt = run.job_id, run.attempt
            job = found.get(run.backend_name)
            if job is None:
                out.append(BackendJobStatus(job_id, attempt, BackendJobState.UNKNOWN))
            elif not is_known_state(job.state):
                # A newer Slurm's word: the run exists, so UNKNOWN ("no record") would make the
                # loop requeue the job and cancel this run as superseded. No news instead.
                logger.warning(
                    "slurm: %s: Slurm state %s is not one this backend knows; "
                    "the platform leaves the run as it is",
                    run.backend_name,
                    job.state,
                )
            else:
                status = job_status(job, job_id, attempt)
                progress = saved.get(run.backend_name)
                if progress is not None:
                    status = replace(status, checkpointed_progress_s=progress)
                out.append(status)
        return out

    def team_account(self, team: str) -> str:
        """``team``'s account in ``team_accounts`` ("" without the setting, or for a team
        without one, whose runs ``submit`` refuses)."""
        return self.team_accounts.get(team, "")

    def run_owners(self, runs: Mapping[str, RunRef]) -> dict[str, str]:
        """With ``team_accounts``, whose the Slurm job of each of ``runs`` (Slurm job id -> the
        run) is: the account Slurm names as its owner ("" : the service account), from a
        ``squeue`` of every user's jobs of the runs' names, finished ones included. The job id
        is Slurm's answer to our sbatch, so another account's job of the name is never taken
        for the run. Left out: jobs Slurm has forgotten, owners without a name where the
        commands run, and root (the platform never submits as root). Without the setting every
        run is the service account's: "" for each, without asking Slurm."""
        if not self.team_accounts:
            return dict.fromkeys(runs, "")
        names = sorted({run.backend_name for run in runs.values()})
        owners: dict[str, str] = {}
        for start in range(0, len(names), 100):  # a command line of bounded length
            argv = ["squeue", "--noheader", "--states=all", f"--format={SQUEUE_OWNER_NAME_FORMAT}"]
            argv.append("--name=" + ",".join(names[start : start + 100]))
            listed: list[tuple[SlurmJob, str]] = self._run(argv, parse=parse_squeue_owners)  # type: ignore[assignment]
            for job, user in listed:
                run = runs.get(job.job_id)
                if run is None or job.name != run.backend_name:
                    continue
                if job.user_id == self._own_uid():
                    owners[job.job_id] = ""
                elif job.user_id != 0 and self._account_uids([user]).get(user) == job.user_id:
                    owners[job.job_id] = user
        return owners

    def live_runs(self, job_id_prefix: str, accounts: Iterable[str] = ()) -> list[LiveRun]:
        """Our runs (and, with ``team_accounts``, those of ``accounts``) Slurm has not finished
        (of ``partition`` when set), from one light ``squeue``, each with the team account that
        owns it ("" : the service account's). COMPLETING runs are left out: they are already
        ending."""
        accounts = list(accounts) if self.team_accounts else []
        owner_filter = self._owner_filter(accounts)
        argv = ["squeue", "--noheader", *owner_filter, f"--format={SQUEUE_OWNED_FORMAT}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        jobs: list[SlurmJob] = self._run(  # type: ignore[assignment]
            argv, parse=lambda text: parse_squeue_live(text, with_user_id=True)
        )
        own_uid = self._own_uid() if self.team_accounts else None
        names = [*self.team_accounts.values(), *accounts]
        owners = {uid: account for account, uid in self._account_uids(names).items()}
        runs = set()
        for job in jobs:
            run = parse_backend_job_name(job.name)
            if run is None or not run[0].startswith(job_id_prefix):
                continue
            if is_live(job) and job.state != "COMPLETING":
                if job.user_id == own_uid or job.user_id is None:
                    account = ""
                else:
                    account = owners.get(job.user_id, "")
                runs.add(LiveRun(*run, account))
        return sorted(runs)

    # -----------------------------------------------------------------------------------------
    # Whose a run is, and its log (the files themselves: slurm_files.JobFiles)

    def _remember_account(self, name: str, account: str | None) -> None:
        if len(self._run_accounts) >= 10000:  # a long-lived worker: keep it bounded
            self._run_accounts.clear()
        self._run_accounts[name] = account

    def _run_account(self, run: RunRef) -> str | None:
        """The team account that owns ``run`` (None: the service account; ``UNKNOWN_OWNER``
        with ``team_accounts`` when Slurm no longer knows whose it is)."""
        if not self.team_accounts:
            return None
        name = run.backend_name
        owner = self._run_owner(run)
        # An owner is remembered only as found for its run; one that is not the account the run
        # was submitted as (nor the service account) is looked up again, never read as.
        if self._run_accounts.get(name, UNKNOWN_OWNER) not in (None, owner):
            job = self._find_runs({name: owner}).get(name)
            account = UNKNOWN_OWNER if job is None else self._account_of(job, owner)
            if account == UNKNOWN_OWNER:
                return account
            self._remember_account(name, account)
        return self._run_accounts[name]

    def read_log(
        self, run: RunRef, *, cursor: str | None = None, limit_bytes: int = 65536
    ) -> LogChunk:
        """The run's output file ``<log_dir>/<run>.out`` (with ``team_accounts``
        ``<log_dir>/<account>/<run>.out``, read as that account; all workers' output, as Slurm
        writes it), by byte offset. A file not written yet is an empty chunk, and so, with
        ``team_accounts``, is the log of a run whose owner Slurm no longer records."""
        name = run.backend_name
        account = self._run_account(run)
        if account == UNKNOWN_OWNER:
            logger.info("slurm: %s: no owner on record, its log is not read", name)
            return LogChunk(text="", cursor=cursor or "0")
        path = self.files.log_path(name, account)
        limit = max(1, int(limit_bytes))
        try:
            size = None if cursor is not None else self.files.size(path, account)
            start, truncated = byte_window(size, cursor, limit)
            data = self.files.read_bytes(path, start, limit, account)
        except FileNotFoundError:
            return LogChunk(text="", cursor=cursor or "0")
        except ValueError as exc:
            raise BackendRejected(str(exc)) from exc
        return byte_chunk(data, start, limit=limit, tail=cursor is None, truncated=truncated)
