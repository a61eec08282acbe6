"""How the Slurm backend finds the platform's runs among a cluster's jobs: whose a job is (the
service account's, a team account's of ``team_accounts``, or another user's, which is never
taken for a run), and the one Slurm job that stands for each run, from ``squeue`` and, for runs
that left the queue, accounting (``sacct``, or the jobcomp file through ``sacct -c``).

:class:`SlurmRunFinder` is a base of :class:`scheduler.backends.slurm.SlurmBackend`, whose
``__init__`` reads the settings declared here (its docstring says what each does).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterable, Mapping

from scheduler.backends.base import BackendRejected, BackendUnavailable, RunRef
from scheduler.backends.slurm_accounts import UNKNOWN_OWNER, local_uids, uids_from_getent
from scheduler.backends.slurm_commands import SlurmCommands
from scheduler.backends.slurm_parsers import (
    SlurmJob,
    is_live,
    parse_sacct_parsable,
    parse_squeue_json,
    pick_run,
)

# The backend's logger, not this module's: a site's logging settings and the tests that read
# the backend's log name scheduler.backends.slurm, whichever module of it logs.
logger = logging.getLogger("scheduler.backends.slurm")

_SACCT_FORMAT = "jobid,jobname,state,exitcode,nodelist,uid"


class SlurmRunFinder(SlurmCommands):
    """Tells the platform's jobs from other users' and finds the Slurm job of each run."""

    # Set by SlurmBackend.__init__ from its configuration and what it has learnt.
    partition: str
    sacct_since: str
    team_accounts: dict[str, str]
    _accounting_mode: str | None
    _uid: int | None
    _known_uids: dict[str, int]

    def _own_uid(self) -> int:
        """The uid the Slurm commands run as (through ``command_prefix``: the remote account),
        which owns every run the platform submitted; asked once."""
        if self._uid is None:
            if not self.command_prefix:
                self._uid = os.getuid()
            else:
                try:
                    proc = self._exec(self._command(["id", "-u"]))
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise BackendUnavailable(f"id -u: {exc}") from exc
                if proc.returncode != 0 or not proc.stdout.strip().isdigit():
                    raise BackendUnavailable(f"id -u: {proc.stderr.strip() or proc.stdout!r}")
                self._uid = int(proc.stdout.strip())
        return self._uid

    def _account_uids(self, accounts: Iterable[str]) -> dict[str, int]:
        """The uid of each of ``accounts`` where the commands run (through ``command_prefix``),
        those not known yet in one ``getent``. An account that does not exist there is left out
        (logged; none of its jobs can exist) and asked about again next time."""
        names = sorted(set(accounts))
        unknown = [name for name in names if name not in self._known_uids]
        if unknown:
            if not self.command_prefix:
                found = local_uids(unknown)
            else:
                try:
                    proc = self._exec(self._command(["getent", "passwd", *unknown]))
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise BackendUnavailable(f"getent passwd: {exc}") from exc
                if proc.returncode not in (0, 2):  # 2: some name not found
                    problem = proc.stderr.strip() or proc.returncode
                    raise BackendUnavailable(f"getent passwd: {problem}")
                found = uids_from_getent(proc.stdout, unknown)
            self._known_uids.update(found)
            missing = sorted(set(unknown) - set(found))
            if missing:
                logger.warning("slurm: team accounts %s do not exist where commands run", missing)
        return {name: self._known_uids[name] for name in names if name in self._known_uids}

    def _team_account_uids(self) -> dict[str, int]:
        """The uid of each ``team_accounts`` account (see :meth:`_account_uids`)."""
        return self._account_uids(self.team_accounts.values())

    def _our_uids(self) -> set[int]:
        """The owners whose jobs are the platform's: the service account, and every team
        account of ``team_accounts``."""
        return {self._own_uid(), *self._team_account_uids().values()}

    def _run_owner(self, run: RunRef) -> str | None:
        """With ``team_accounts``, the account ``run`` was submitted as: the one recorded with
        it (``RunRef.account``), so a team mapped to another account since keeps its runs;
        else, for a run recorded without one, its team's account now. None without the setting
        (every run is the service account's) or when neither names one."""
        if not self.team_accounts:
            return None
        return run.account or self.team_accounts.get(run.team)

    def _account_of(self, job: SlurmJob, owner: str | None) -> str | None:
        """Whose ``job``, a job of a run submitted as ``owner``, is: ``owner``; None for the
        service account's (runs submitted before ``team_accounts`` was set), which are acted on
        as before; ``UNKNOWN_OWNER`` for a record without its owner's uid."""
        if job.user_id is None:
            return UNKNOWN_OWNER if self.team_accounts else None
        if not owner or job.user_id == self._own_uid():
            return None
        return owner if self._account_uids([owner]).get(owner) == job.user_id else None

    def _owner_filter(self, accounts: Iterable[str] = ()) -> list[str]:
        """squeue's / sacct's filter for the owners of our runs (and of ``accounts``: those
        recorded with the runs asked about, which the team's mapping may no longer name)."""
        if not self.team_accounts:
            return ["--me"]
        uids = self._our_uids() | set(self._account_uids(accounts).values())
        return ["--user=" + ",".join(str(uid) for uid in sorted(uids))]

    def _ours(self, jobs: Iterable[SlurmJob], accounts: Iterable[str] = ()) -> list[SlurmJob]:
        """The jobs of ``jobs`` the platform's accounts (or ``accounts``) own. On a shared
        cluster anyone may name a job ``gp-<id>-a<n>``; taken for our run it would be adopted
        by ``submit``, reported as our job's state, and cancelled by the stale-run sweep."""
        mine = self._our_uids() | set(self._account_uids(accounts).values())
        return [job for job in jobs if job.user_id is None or job.user_id in mine]

    def _owner_uids(self, owner: str | None) -> set[int]:
        """The owners a job of a run submitted as ``owner`` may have: that account and the
        service account (runs submitted before ``team_accounts``). Another team's account can
        name a job like any run; such a job is never the run."""
        return {self._own_uid(), *self._account_uids([owner] if owner else []).values()}

    def _of_owner(self, jobs: list[SlurmJob], owner: str | None) -> list[SlurmJob]:
        """With ``team_accounts``, the jobs of ``jobs`` that may be the run submitted as
        ``owner`` (see :meth:`_owner_uids`). A record without its owner's uid is kept, as
        before: it says how the run ended, and its files are never read."""
        if not self.team_accounts:
            return jobs
        uids = self._owner_uids(owner)
        return [job for job in jobs if job.user_id is None or job.user_id in uids]

    def _squeue(self, accounts: Iterable[str] = ()) -> list[SlurmJob]:
        # One call answers for every run we track. --states=all: 23.02 and later honour squeue's
        # default filter in JSON too and would hide finished jobs; 22.05 ignores every filter
        # (--me / --user too, so the owner is checked on each job as well).
        argv = ["squeue", "--json", "--states=all", *self._owner_filter(accounts)]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        jobs: list[SlurmJob] = self._run(argv, parse=parse_squeue_json)  # type: ignore[assignment]
        return self._ours(jobs, accounts)

    def _accounting_jobs(self, names: list[str], accounts: Iterable[str] = ()) -> list[SlurmJob]:
        """Finished jobs from accounting (sacct, or the jobcomp file via ``sacct -c``)."""
        base = ["sacct", "-X", "-P", "-n", "-o", _SACCT_FORMAT, "-S", self.sacct_since]
        if self.team_accounts:
            # sacct shows its caller's jobs alone unless told whose.
            base += self._owner_filter(accounts)
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
            # sacct -c reads the jobcomp file, every user's jobs, whatever --user says.
            return self._ours(jobs, accounts)  # type: ignore[arg-type]
        self._accounting_mode = "none"
        return []

    def _first_owners_jobs(self, jobs: list[SlurmJob]) -> list[SlurmJob]:
        """Of the jobs that share a run's name, those that may stand for the run: with
        ``team_accounts``, the jobs of whoever owns the earliest. Every team account may name
        its jobs freely, and ``submit`` refuses a name another account already holds, so a
        later job of another owner is a copy made after the run was submitted: taken for the
        run (the newest live job wins), it would report its own state and show its own output
        as the run's, and a held one would make the run look stuck until it was cancelled."""
        if not self.team_accounts or len(jobs) < 2:
            return jobs
        first = min(jobs, key=lambda job: job.numeric_id)
        return [job for job in jobs if job.user_id == first.user_id]

    def _find_runs(self, wanted: Mapping[str, str | None]) -> dict[str, SlurmJob]:
        """The Slurm job that stands for each run of ``wanted`` (run name -> the account it was
        submitted as, see :meth:`_of_owner`), from squeue, else accounting; runs with none are
        left out."""
        accounts = {account for account in wanted.values() if account}
        by_name: dict[str, list[SlurmJob]] = {}
        for job in self._squeue(accounts):
            by_name.setdefault(job.name, []).append(job)
        found: dict[str, SlurmJob] = {}
        for name, owner in wanted.items():
            picked = pick_run(self._first_owners_jobs(self._of_owner(by_name.get(name, []), owner)))
            if picked is not None:
                found[name] = picked
        # Runs that left squeue, and COMPLETING ones: squeue 22.05 hides the final state of a
        # completing job (after a slurmctld restart that can last a minute); accounting has it.
        ask = [n for n in wanted if n not in found or found[n].state == "COMPLETING"]
        if ask:
            finished: dict[str, list[SlurmJob]] = {}
            for job in self._accounting_jobs(ask, accounts):
                finished.setdefault(job.name, []).append(job)
            for name in ask:
                record = pick_run(
                    self._first_owners_jobs(self._of_owner(finished.get(name, []), wanted[name]))
                )
                if record is None:
                    continue
                current = found.get(name)
                if current is None or (record.job_id == current.job_id and not is_live(record)):
                    found[name] = record
        return found
