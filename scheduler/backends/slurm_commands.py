"""How the Slurm backend runs one command: ``bin_dir``, ``command_prefix`` (or
``node_command_prefix``) and a team's ``team_command_prefix`` applied, the backend's environment
and deadline, and failures mapped to typed errors (retried with capped exponential backoff and
full jitter while Slurm is unreachable). ``dry_run`` logs the commands that would change the
cluster instead of running them.

:class:`SlurmCommands` is a base of :class:`scheduler.backends.slurm.SlurmBackend`, whose
``__init__`` reads the settings declared here (its docstring says what each does).
"""

from __future__ import annotations

import logging
import os
import random
import shlex
import subprocess
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

from scheduler.backends.base import BackendRejected, BackendUnavailable
from scheduler.backends.slurm_accounts import ACCOUNT_PLACEHOLDER
from scheduler.backends.slurm_parsers import ErrorKind, SlurmQueryError, classify_error

# The backend's logger, not this module's: a site's logging settings and the tests that read
# the backend's log name scheduler.backends.slurm, whichever module of it logs.
logger = logging.getLogger("scheduler.backends.slurm")

T = TypeVar("T")

_MUTATING = {"sbatch", "scancel", "scontrol"}
_SLURM_COMMANDS = {"sbatch", "squeue", "sinfo", "scancel", "scontrol", "sacct"}


def _is_ssh(program: str) -> bool:
    return os.path.basename(program) == "ssh"


class SlurmCommands:
    """Runs Slurm's commands (and ``id``, ``getent``, the job-file readers) for the backend."""

    # Set by SlurmBackend.__init__ from its configuration.
    slurm_conf: str
    bin_dir: str
    command_prefix: tuple[str, ...]
    node_command_prefix: tuple[str, ...]
    team_command_prefix: tuple[str, ...]
    command_timeout_s: float
    tries: int
    backoff_s: float
    backoff_max_s: float
    dry_run: bool
    _sleep: Callable[[float], None]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LC_ALL"] = "C"
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def _command(
        self, argv: list[str], *, node_change: bool = False, account: str | None = None
    ) -> list[str]:
        """The argument list to execute: ``bin_dir`` (for Slurm's own commands) and
        ``command_prefix`` (``node_command_prefix`` for a node change) applied, then, for a
        team ``account``, ``team_command_prefix``."""
        program = argv[0]
        if self.bin_dir and program in _SLURM_COMMANDS:
            program = os.path.join(self.bin_dir, program)
        command = [program, *argv[1:]]
        outer = self.node_command_prefix if node_change else self.command_prefix
        inner = (
            tuple(a.replace(ACCOUNT_PLACEHOLDER, account) for a in self.team_command_prefix)
            if account
            else ()
        )
        if not outer and not inner:
            return command
        # sudo and ssh do not pass this process's environment on: the settings travel as env.
        settings = ["LC_ALL=C"] + ([f"SLURM_CONF={self.slurm_conf}"] if self.slurm_conf else [])
        tail = ["env", *settings, *command]
        # ssh joins its arguments into one line for the remote shell: quote each one after it.
        if outer and _is_ssh(outer[0]):
            return [*outer, *(shlex.quote(arg) for arg in [*inner, *tail])]
        if inner and _is_ssh(inner[0]):
            return [*outer, *inner, *(shlex.quote(arg) for arg in tail)]
        return [*outer, *inner, *tail]

    def _backoff(self, try_no: int) -> None:
        # Full jitter: spreads retries of many callers after a shared outage.
        cap = min(self.backoff_max_s, self.backoff_s * (2 ** (try_no - 1)))
        self._sleep(random.uniform(0, cap))

    @overload
    def _exec(
        self, command: list[str], *, stdin: str | None = None, binary: Literal[False] = False
    ) -> subprocess.CompletedProcess[str]: ...

    # Output as bytes or text, as ``binary`` says (JobFiles reads a log either way).
    @overload
    def _exec(
        self, command: list[str], *, stdin: str | None = None, binary: bool
    ) -> subprocess.CompletedProcess[Any]: ...

    def _exec(
        self, command: list[str], *, stdin: str | None = None, binary: bool = False
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``command`` (already through :meth:`_command`) with the backend's environment and
        deadline; its exit status is the caller's to read."""
        return subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=not binary,
            timeout=self.command_timeout_s,
            env=self._env(),
            check=False,
        )

    def _run(
        self,
        argv: list[str],
        *,
        stdin: str | None = None,
        parse: Callable[[str], T] | None = None,
        already_done_ok: bool = False,
        retry: bool = True,
        node_change: bool = False,
        account: str | None = None,
    ) -> T | str:
        """Run one Slurm command; return its stdout (or ``parse(stdout)``).

        Maps failures: unreachable / timeout / garbled answer -> retried, then
        BackendUnavailable; "already done" -> "" when ``already_done_ok``; anything else ->
        BackendRejected. ``retry=False`` makes a single attempt (for non-idempotent sbatch).
        """
        if self.dry_run and argv[0] in _MUTATING and argv[1:2] != ["show"]:
            logger.info("slurm dry-run: %s", argv)
            if stdin:
                logger.info("slurm dry-run stdin:\n%s", stdin)
            return ""
        command = self._command(argv, node_change=node_change, account=account)
        tries = self.tries if retry else 1
        problem = ""
        for try_no in range(1, tries + 1):
            try:
                proc = self._exec(command, stdin=stdin)
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
