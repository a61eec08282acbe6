"""The Slurm backend's job files: where a run's output, progress and checkpoint request live, and
how the platform reads them (on this host when no command prefix is involved, else through the
prefix and, for a team account's run, as that account).

Reads are best effort where a missing file is normal (a run that has written nothing yet): a
missing file is ``FileNotFoundError`` or "no news", any other failure ``BackendUnavailable`` (the
log is shown once the cluster answers). Which account a run's files belong to is the backend's
to decide (``SlurmBackend._run_account``); this module only reads where it is told.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable
from typing import Any

from scheduler.backends.base import BackendUnavailable
from scheduler.backends.slurm_parsers import parse_checkpoint_progress

logger = logging.getLogger(__name__)

# (argv, account) -> the argument list to execute (SlurmBackend._command).
Command = Callable[[list[str], str | None], list[str]]
# (command, binary) -> the finished process (SlurmBackend._exec).
Execute = Callable[[list[str], bool], subprocess.CompletedProcess[Any]]


class JobFiles:
    """The files of runs under ``job_workdir`` and ``log_dir``; with a team ``account``, under
    ``<dir>/<account>`` (private to it), read through that account's prefix alone."""

    def __init__(
        self,
        *,
        job_workdir: str,
        log_dir: str,
        prefixed: bool,
        command: Command,
        execute: Execute,
    ) -> None:
        self.job_workdir = job_workdir
        self.log_dir = log_dir
        self._prefixed = prefixed
        self._command = command
        self._execute = execute

    def reads_locally(self, account: str | None) -> bool:
        """Job files are read on this host only without any prefix: a team account's private
        directory is readable through its ``team_command_prefix`` alone."""
        return not self._prefixed and account is None

    def job_dir(self, account: str | None) -> str:
        return os.path.join(self.job_workdir, account) if account else self.job_workdir

    def log_dir_of(self, account: str | None) -> str:
        return os.path.join(self.log_dir, account) if account else self.log_dir

    def log_path(self, name: str, account: str | None = None) -> str:
        return os.path.join(self.log_dir_of(account), f"{name}.out")

    def progress_path(self, name: str, account: str | None = None) -> str:
        return os.path.join(self.job_dir(account), f"{name}.progress")

    def checkpoint_request_path(self, name: str, account: str | None = None) -> str:
        return os.path.join(self.job_dir(account), f"{name}.checkpoint-request")

    def mtime(self, path: str, account: str | None = None) -> float | None:
        """Modification time (epoch seconds) of a job file, None when missing or unreadable."""
        try:
            if self.reads_locally(account):
                return os.stat(path).st_mtime
            proc = self.run(["stat", "-L", "-c", "%Y", path], account=account)
            return float(proc.stdout.strip())
        except (OSError, ValueError, BackendUnavailable):
            return None

    def size(self, path: str, account: str | None) -> int:
        if self.reads_locally(account):
            return os.stat(path).st_size
        proc = self.run(["stat", "-L", "-c", "%s", path], account=account)
        return int(proc.stdout.strip() or 0)

    def read_bytes(self, path: str, start: int, limit: int, account: str | None) -> bytes:
        if self.reads_locally(account):
            with open(path, "rb") as fh:
                fh.seek(start)
                return fh.read(limit)
        argv = ["dd", f"if={path}", "iflag=skip_bytes,count_bytes", f"skip={start}"]
        argv += [f"count={limit}", "bs=65536", "status=none"]
        data: bytes = self.run(argv, binary=True, account=account).stdout
        return data

    def read_progress(self, names: list[str], account: str | None) -> dict[str, float]:
        """Checkpointed seconds each run reported in its ``.progress`` file (runs without a
        readable file are left out), read as ``account``. Best effort: a failed read means no
        news."""
        paths = {self.progress_path(name, account): name for name in names}
        texts: dict[str, str] = {}
        if self.reads_locally(account):
            for path in paths:
                try:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        texts[path] = fh.read(4096)
                except OSError:
                    continue
        elif paths:
            # One command for all of them: grep prints "path:line" for each line of each file.
            command = self._command(["grep", "-s", "-H", "-e", "", "--", *paths], account)
            try:
                proc = self._execute(command, False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                logger.warning("slurm: cannot read progress files: %s", exc)
                return {}
            if proc.returncode not in (0, 1, 2):  # 2: some file missing, which is normal
                logger.warning("slurm: cannot read progress files: %s", proc.stderr.strip())
                return {}
            for line in proc.stdout.splitlines():
                for path in paths:
                    if line.startswith(path + ":"):
                        texts[path] = texts.get(path, "") + line[len(path) + 1 :] + "\n"
                        break
        out = {}
        for path, text in texts.items():
            value = parse_checkpoint_progress(text)
            if value is not None:
                out[paths[path]] = value
        return out

    def run(
        self, argv: list[str], *, binary: bool = False, account: str | None = None
    ) -> subprocess.CompletedProcess[Any]:
        """A file-reading command through the prefix (and as ``account``); a missing file is
        FileNotFoundError, any other failure BackendUnavailable (the logs are shown when the
        cluster answers)."""
        try:
            proc = self._execute(self._command(argv, account), binary)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendUnavailable(f"{argv[0]}: {exc}") from exc
        if proc.returncode != 0:
            err = (
                proc.stderr
                if isinstance(proc.stderr, str)
                else proc.stderr.decode(errors="replace")
            )
            if "No such file" in err:
                raise FileNotFoundError(argv[-1])
            raise BackendUnavailable(f"{argv[0]}: {err.strip() or proc.returncode}")
        return proc
