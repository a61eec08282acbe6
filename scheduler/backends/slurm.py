"""The Slurm backend: runs the platform's placement decisions through Slurm's own commands.

Every call is an argument list handed to ``subprocess.run`` (never a shell string): ``sbatch``
(script on stdin), ``scancel``, ``scontrol``, ``squeue --json``, ``sinfo --json`` and, where
accounting exists, ``sacct``. Parsing lives in :mod:`scheduler.backends.slurm_parsers`.

Guarantees (on top of :mod:`scheduler.backends.base`):
- Idempotent by our identity: a run is the Slurm job named ``backend_job_name(job_id, attempt)``.
  ``submit`` first looks that name up (squeue, then accounting) and returns the existing Slurm job
  id; ``cancel`` / ``checkpoint`` act by name, so a missing or finished run is a quiet no-op;
  draining a drained node or resuming a node in service succeeds.
- A Slurm outage (slurmctld unreachable, command timeout, missing client tools) raises
  :class:`BackendUnavailable` after a few quick retries with capped exponential backoff and full
  jitter. Nothing is changed on our side, so the caller simply retries later. ``sbatch`` itself
  is never blindly re-sent: each retry looks the name up first, so an sbatch that reached
  slurmctld before a timeout is not submitted twice.
- A refusal (unknown node, impossible request, invalid spec) raises :class:`BackendRejected`.
- ``poll_jobs`` reports ``checkpointed_progress_s`` from ``<job_workdir>/<run>.progress`` when
  the job wrote one there (after a checkpoint) and that directory is readable from this host.
- Slurm never restarts a run by itself: jobs are submitted with ``--no-requeue`` (the platform
  requeues as a new attempt). ``live_runs`` lists our unfinished Slurm jobs so the sync can
  cancel any that the platform has given up on.
- ``dry_run`` logs the commands that would change the cluster (sbatch, scancel, scontrol) and
  does not run them; read-only queries still run.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from scheduler.backends.base import (
    BackendJobSpec,
    BackendJobState,
    BackendJobStatus,
    BackendNode,
    BackendRejected,
    BackendUnavailable,
    backend_job_name,
    parse_backend_job_name,
)
from scheduler.backends.slurm_parsers import (
    SQUEUE_LIVE_FORMAT,
    ErrorKind,
    SlurmJob,
    SlurmQueryError,
    build_job_script,
    build_sbatch_argv,
    classify_error,
    is_live,
    job_status,
    parse_checkpoint_progress,
    parse_sacct_parsable,
    parse_sbatch_parsable,
    parse_sinfo_json,
    parse_squeue_json,
    parse_squeue_live,
    parse_topology_conf,
    pick_run,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SACCT_FORMAT = "jobid,jobname,state,exitcode,nodelist"
_MUTATING = {"sbatch", "scancel", "scontrol"}


class SlurmBackend:
    """A Slurm cluster driven through its command-line tools.

    ``config`` keys (all optional):

    - ``slurm_conf``: path exported as ``SLURM_CONF`` to every command.
    - ``partition``: submit into and list nodes of this partition only.
    - ``account``: ``sbatch --account``.
    - ``job_workdir``: the jobs' working directory (must exist on the compute nodes; default
      ``/tmp``); checkpoint-request files go there. ``log_dir``: where ``<run>.out`` is written
      (default: ``job_workdir``); ``log_tail`` reads it, so it should be shared with this host.
    - ``accounting``: ``auto`` (default: sacct, else the jobcomp file via ``sacct -c``, else
      none), ``sacct``, ``jobcomp`` or ``none``; used to find runs that left squeue.
    - ``sacct_since``: how far back accounting is searched (default ``now-14days``).
    - ``topology_conf``: a Slurm ``topology.conf`` whose leaf switches name racks for nodes
      without a ``rack=`` feature.
    - ``container_option``: e.g. ``--container-image`` (pyxis) to run ``spec.image``.
    - ``extra_sbatch_args``: a list of further sbatch arguments (site policy); ``--requeue`` is
      refused.
    - ``bin_dir``: directory of the Slurm commands (default: ``PATH``).
    - ``command_timeout_s`` (30), ``tries`` (3), ``backoff_s`` (0.5), ``backoff_max_s`` (4).
    - ``dry_run``: log cluster-changing commands instead of running them.
    """

    kind = "slurm"

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        cfg = dict(config or {})
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
        self.command_timeout_s = float(cfg.get("command_timeout_s", 30))
        self.tries = max(1, int(cfg.get("tries", 3)))
        self.backoff_s = float(cfg.get("backoff_s", 0.5))
        self.backoff_max_s = float(cfg.get("backoff_max_s", 4))
        self.dry_run = bool(cfg.get("dry_run", False))
        self._sleep = sleep
        self._accounting_mode: str | None = None if self.accounting == "auto" else self.accounting

    # -----------------------------------------------------------------------------------------
    # Running commands

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LC_ALL"] = "C"
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def _backoff(self, try_no: int) -> None:
        # Full jitter: spreads retries of many callers after a shared outage.
        cap = min(self.backoff_max_s, self.backoff_s * (2 ** (try_no - 1)))
        self._sleep(random.uniform(0, cap))

    def _run(
        self,
        argv: list[str],
        *,
        stdin: str | None = None,
        parse: Callable[[str], T] | None = None,
        already_done_ok: bool = False,
        retry: bool = True,
    ) -> T | str:
        """Run one Slurm command; return its stdout (or ``parse(stdout)``).

        Maps failures: unreachable / timeout / garbled answer -> retried, then
        BackendUnavailable; "already done" -> "" when ``already_done_ok``; anything else ->
        BackendRejected. ``retry=False`` makes a single attempt (for non-idempotent sbatch).
        """
        if self.dry_run and argv[0] in _MUTATING:
            logger.info("slurm dry-run: %s", argv)
            if stdin:
                logger.info("slurm dry-run stdin:\n%s", stdin)
            return ""
        command = [os.path.join(self.bin_dir, argv[0]) if self.bin_dir else argv[0], *argv[1:]]
        tries = self.tries if retry else 1
        problem = ""
        for try_no in range(1, tries + 1):
            try:
                proc = subprocess.run(
                    command,
                    input=stdin,
                    capture_output=True,
                    text=True,
                    timeout=self.command_timeout_s,
                    env=self._env(),
                    check=False,
                )
            except FileNotFoundError as exc:
                raise BackendUnavailable(f"Slurm command not found: {command[0]}") from exc
            except subprocess.TimeoutExpired:
                problem = f"{argv[0]} timed out after {self.command_timeout_s:g}s"
            else:
                if proc.returncode == 0:
                    if parse is None:
                        return proc.stdout
                    try:
                        return parse(proc.stdout)
                    except SlurmQueryError as exc:
                        kind, problem = classify_error(str(exc)), str(exc)
                        if kind is not ErrorKind.UNAVAILABLE:
                            raise BackendRejected(problem) from exc
                else:
                    problem = (proc.stderr.strip() or proc.stdout.strip()) or (
                        f"{argv[0]} exited with status {proc.returncode}"
                    )
                    kind = classify_error(problem)
                    if kind is ErrorKind.ALREADY_DONE and already_done_ok:
                        logger.info("slurm: already done (%s): %s", argv[0], problem)
                        return ""
                    if kind is not ErrorKind.UNAVAILABLE:
                        raise BackendRejected(f"{argv[0]}: {problem}")
            logger.warning("slurm unavailable (try %d/%d): %s", try_no, tries, problem)
            if try_no < tries:
                self._backoff(try_no)
        raise BackendUnavailable(f"Slurm unavailable: {problem}")

    # -----------------------------------------------------------------------------------------
    # Finding our runs

    def _squeue(self) -> list[SlurmJob]:
        # squeue --json ignores filters in 22.05; one call answers for every run we track.
        return self._run(["squeue", "--json"], parse=parse_squeue_json)  # type: ignore[return-value]

    def _accounting_jobs(self, names: list[str]) -> list[SlurmJob]:
        """Finished jobs from accounting (sacct, or the jobcomp file via ``sacct -c``)."""
        base = ["sacct", "-X", "-P", "-n", "-o", _SACCT_FORMAT, "-S", self.sacct_since]
        if len(names) <= 50:
            base.append("--name=" + ",".join(names))
        modes = [self._accounting_mode] if self._accounting_mode else ["sacct", "jobcomp"]
        for mode in modes:
            if mode == "none":
                return []
            argv = base if mode == "sacct" else [base[0], "-c", *base[1:]]
            try:
                jobs = self._run(argv, parse=parse_sacct_parsable)
            except BackendRejected as exc:
                if self._accounting_mode:
                    raise
                logger.info("slurm accounting via %s not available: %s", mode, exc)
                continue
            self._accounting_mode = mode
            return jobs  # type: ignore[return-value]
        self._accounting_mode = "none"
        return []

    def _find_runs(self, names: Iterable[str]) -> dict[str, SlurmJob]:
        wanted = list(dict.fromkeys(names))
        by_name: dict[str, list[SlurmJob]] = {}
        for job in self._squeue():
            by_name.setdefault(job.name, []).append(job)
        found: dict[str, SlurmJob] = {}
        for name in wanted:
            job = pick_run(by_name.get(name, ()))
            if job is not None:
                found[name] = job
        # Runs that left squeue, and COMPLETING ones: squeue 22.05 hides the final state of a
        # completing job (after a slurmctld restart that can last a minute); accounting has it.
        ask = [n for n in wanted if n not in found or found[n].state == "COMPLETING"]
        if ask:
            finished: dict[str, list[SlurmJob]] = {}
            for job in self._accounting_jobs(ask):
                finished.setdefault(job.name, []).append(job)
            for name in ask:
                record = pick_run(finished.get(name, ()))
                if record is None:
                    continue
                current = found.get(name)
                if current is None or (record.job_id == current.job_id and not is_live(record)):
                    found[name] = record
        return found

    # -----------------------------------------------------------------------------------------
    # The Backend protocol

    def submit(self, spec: BackendJobSpec) -> str:
        """Start ``spec`` on exactly its nodes; return the Slurm job id (existing one if known)."""
        name = spec.backend_name
        try:
            argv = build_sbatch_argv(
                spec,
                log_path=self._log_path(name),
                workdir=self.job_workdir,
                partition=self.partition,
                account=self.account,
                extra_args=self.extra_sbatch_args,
            )
            script = build_job_script(
                spec,
                checkpoint_request_path=os.path.join(
                    self.job_workdir, f"{name}.checkpoint-request"
                ),
                progress_path=self._progress_path(name),
                container_option=self.container_option,
            )
        except ValueError as exc:
            raise BackendRejected(str(exc)) from exc
        for try_no in range(1, self.tries + 1):
            existing = self._find_runs([name]).get(name)
            if existing is not None:
                logger.info("slurm: %s already submitted as job %s", name, existing.job_id)
                return existing.job_id
            try:
                out = self._run(argv, stdin=script, retry=False)
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
            return job_id
        raise BackendUnavailable("Slurm unavailable")  # not reached: the loop raises or returns

    def cancel(self, job_id: str, attempt: int) -> None:
        """Cancel the run (pending, running or requeued); no run, or a finished one, is fine."""
        argv = ["scancel", f"--name={backend_job_name(job_id, attempt)}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        self._run(argv, already_done_ok=True)

    def checkpoint(self, job_id: str, attempt: int) -> None:
        """Send USR1 to the run's batch script, which records the request and forwards it to
        the workers. A run that is not running is left alone."""
        argv = [
            "scancel",
            "--batch",
            "--signal=USR1",
            "--state=RUNNING",
            f"--name={backend_job_name(job_id, attempt)}",
        ]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        self._run(argv, already_done_ok=True)

    def drain_node(self, name: str, reason: str) -> None:
        """Drain ``name`` (running jobs finish, nothing new starts). Draining again is fine."""
        reason = " ".join((reason or "gpuplatform quarantine").split())
        self._run(["scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason}"])

    def undrain_node(self, name: str) -> None:
        """Resume ``name``; a node already in service is fine."""
        self._run(["scontrol", "update", f"nodename={name}", "state=resume"], already_done_ok=True)

    def list_nodes(self) -> list[BackendNode]:
        """Nodes (of ``partition`` when set) with GPU count/model, state, drain reason, topology."""
        topology: dict[str, str] = {}
        if self.topology_conf:
            try:
                with open(self.topology_conf, encoding="utf-8") as fh:
                    topology = parse_topology_conf(fh.read())
            except OSError as exc:
                logger.warning("slurm: cannot read %s: %s", self.topology_conf, exc)
        return self._run(  # type: ignore[return-value]
            ["sinfo", "--json"],
            parse=lambda text: parse_sinfo_json(text, partition=self.partition, topology=topology),
        )

    def poll_jobs(self, runs: Iterable[tuple[str, int]]) -> list[BackendJobStatus]:
        """One squeue call (plus accounting for runs that left the queue) for all ``runs``."""
        runs = list(runs)
        if not runs:
            return []
        found = self._find_runs(backend_job_name(j, a) for j, a in runs)
        out = []
        for job_id, attempt in runs:
            job = found.get(backend_job_name(job_id, attempt))
            if job is None:
                out.append(BackendJobStatus(job_id, attempt, BackendJobState.UNKNOWN))
            else:
                status = job_status(job, job_id, attempt)
                progress = self._read_progress(backend_job_name(job_id, attempt))
                if progress is not None:
                    status = replace(status, checkpointed_progress_s=progress)
                out.append(status)
        return out

    def live_runs(self, job_id_prefix: str) -> list[tuple[str, int]]:
        """Our runs Slurm has not finished (of ``partition`` when set), from one light
        ``squeue``. COMPLETING runs are left out: they are already ending."""
        argv = ["squeue", "--noheader", f"--format={SQUEUE_LIVE_FORMAT}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        jobs: list[SlurmJob] = self._run(argv, parse=parse_squeue_live)  # type: ignore[assignment]
        runs = set()
        for job in jobs:
            run = parse_backend_job_name(job.name)
            if run is None or not run[0].startswith(job_id_prefix):
                continue
            if is_live(job) and job.state != "COMPLETING":
                runs.add(run)
        return sorted(runs)

    def _read_progress(self, name: str) -> float | None:
        # The file lives in job_workdir; readable here when that directory is shared.
        try:
            with open(self._progress_path(name), encoding="utf-8", errors="replace") as fh:
                return parse_checkpoint_progress(fh.read(4096))
        except OSError:
            return None

    def _progress_path(self, name: str) -> str:
        return os.path.join(self.job_workdir, f"{name}.progress")

    def log_tail(self, job_id: str, attempt: int, lines: int = 100) -> str:
        """The last ``lines`` lines of ``<log_dir>/<run>.out`` when this host can read it."""
        path = self._log_path(backend_job_name(job_id, attempt))
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 1_000_000))
                data = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        if lines <= 0:
            return ""
        return "\n".join(data.splitlines()[-lines:])

    def _log_path(self, name: str) -> str:
        return os.path.join(self.log_dir, f"{name}.out")
