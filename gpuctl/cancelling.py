"""``gpuctl cancel``: jobs by id, or every live job that ``ls``'s filters select (as ``scancel -u
$USER -t PENDING``). Ids and filters together, or neither, are bad usage (exit 2): a bare
``cancel`` never means "everything I may cancel". A job that ended between the listing and its
cancel is said, not an error (scancel says nothing either)."""

from __future__ import annotations

import argparse
from fnmatch import fnmatchcase
from typing import Any

from . import output
from .client import ApiError, Client
from .common import LIVE_STATES, UsageError, job_id_arg, job_states, jobs_listed
from .common import client as _client
from .common import err as _err
from .common import out as _out
from .common import report as _report

EXIT_OK, EXIT_API = 0, 1
# The listing is read page by page (the server's page is 1,000 jobs); a filter matching more than
# this is said on stderr rather than read without end.
MAX_MATCHED_JOBS = 100_000
FILTERS = "--mine, --user, --team, --state, --name"


def cancel_arguments(cancel: argparse.ArgumentParser) -> None:
    cancel.add_argument(
        "job_ids", nargs="*", metavar="JOB_ID", help="the jobs to cancel (or give filters)"
    )
    chosen = cancel.add_argument_group(
        "or cancel every live job these select (as `gpuctl ls` selects; all must match)"
    )
    chosen.add_argument("--mine", action="store_true", help="my jobs (the token's user)")
    chosen.add_argument("--user", help="jobs submitted by this user")
    chosen.add_argument("--team", help="this team's jobs")
    chosen.add_argument(
        "--state",
        "-s",
        help="comma-separated live states in any case (pending, running, preempted; Slurm's PD, "
        "R); default: all three",
    )
    chosen.add_argument(
        "--name",
        help="the job name: exact, or a shell glob (* ? [...]) matched on the whole name, "
        "case-sensitively; quote it",
    )
    chosen.add_argument(
        "--dry-run", action="store_true", help="list what the filters select, cancel nothing"
    )


def cmd_cancel(args: argparse.Namespace) -> int:
    """POST cancel for each job named or matched; keeps going after a failure, exits 1 if any
    failed. With ``--json`` the failures are one error object at the end (``fields``: job id →
    reason), as every command's error is, and ``status`` is there when they share one."""
    states = job_states(args.state) if args.state else []
    filtered = bool(states or args.mine or args.user or args.team or args.name)
    if args.job_ids and filtered:
        reason = f"give job ids or filters ({FILTERS}), not both"
        raise UsageError(reason, {"JOB_ID": [reason]})
    if args.job_ids:
        if args.dry_run:
            reason = "only with filters: job ids are cancelled as given"
            raise UsageError(f"--dry-run {reason}", {"--dry-run": [reason]})
        return _cancel_ids(args, [job_id_arg(text) for text in args.job_ids])
    if not filtered:
        reason = f"name the jobs to cancel: job ids, or filters ({FILTERS})"
        raise UsageError(reason, {"JOB_ID": [reason]})
    ended = [state for state in states if state not in LIVE_STATES]
    if ended:
        reason = (
            f"{', '.join(ended)} jobs have ended and cannot be cancelled "
            f"(live states: {', '.join(LIVE_STATES)})"
        )
        raise UsageError(f"--state: {reason}", {"--state": [reason]})
    return _cancel_matching(args, states or list(LIVE_STATES))


class _Outcome:
    """What one ``cancel`` did: the jobs cancelled, those that had ended meanwhile, and the
    failures (with ``--json`` reported once at the end, as one error object)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cancelled: list[Any] = []
        self.ended: list[dict[str, Any]] = []
        self.failures: dict[str, list[str]] = {}
        self.statuses: set[int] = set()

    def say(self, line: str) -> None:
        if not self.args.json:
            _out().write(line + "\n")

    def failed(self, job_id: int, label: str, exc: ApiError) -> bool:
        """Records the failure; True when the server is unreachable (the rest would fail the same
        way, so the caller stops)."""
        self.failures[str(job_id)] = [exc.message]
        self.statuses.add(exc.status)
        if not self.args.json:
            _report(False, "api", f"job {label}: {exc.message}", {})
        return exc.status == 0

    def finish(self, tried: int) -> int:
        if self.args.json and self.failures:
            first_id, first_reasons = next(iter(self.failures.items()))
            message = (
                f"job {first_id}: {first_reasons[0]}"
                if len(self.failures) == 1
                else f"{len(self.failures)} of {tried} jobs not cancelled"
            )
            status = next(iter(self.statuses)) if len(self.statuses) == 1 else 0
            _report(True, "api", message, self.failures, status=status)
        return EXIT_API if self.failures else EXIT_OK


def _cancel_ids(args: argparse.Namespace, ids: list[int]) -> int:
    outcome = _Outcome(args)
    with _client(args) as api:
        for job_id in ids:
            try:
                outcome.cancelled.append(api.post(f"/api/v1/jobs/{job_id}/cancel/"))
            except ApiError as exc:
                if outcome.failed(job_id, str(job_id), exc):
                    break
                continue
            outcome.say(f"job {job_id} cancelled")
    if args.json:
        output.print_json(outcome.cancelled, _out())
    return outcome.finish(len(ids))


def _cancel_matching(args: argparse.Namespace, states: list[str]) -> int:
    with _client(args) as api:
        # The token's user, as `ls --mine` (GPUCTL_TOKEN overrides the saved login).
        submitter = api.get("/api/v1/auth/me")["username"] if args.mine else args.user
        jobs, count = jobs_listed(
            api,
            state=",".join(states),
            team=args.team,
            submitter=submitter,
            limit=MAX_MATCHED_JOBS,
        )
        if count > len(jobs):
            _err().write(f"note: only the newest {len(jobs)} of {count} jobs were read\n")
        # The API has no name filter: the glob is matched here, on what the other filters chose.
        if args.name:
            jobs = [job for job in jobs if fnmatchcase(job["name"], args.name)]
        if args.dry_run:
            return _print_dry_run(args, jobs)
        outcome = _Outcome(args)
        for job in jobs:
            label = f"{job['id']} ({job['name']})"
            try:
                outcome.cancelled.append(api.post(f"/api/v1/jobs/{job['id']}/cancel/"))
            except ApiError as exc:
                final = _ended_state(api, job["id"]) if exc.status == 409 else None
                if final is not None:
                    outcome.ended.append({"id": job["id"], "name": job["name"], "state": final})
                    outcome.say(f"job {label} had already ended ({final})")
                    continue
                if outcome.failed(job["id"], label, exc):
                    break
                continue
            outcome.say(f"job {label} cancelled")
    if args.json:
        document = {
            "dry_run": False,
            "cancelled": outcome.cancelled,
            "finished_meanwhile": outcome.ended,
        }
        output.print_json(document, _out())
    elif not jobs:
        _out().write("no live job matches; nothing cancelled\n")
    else:
        tail = f", {len(outcome.ended)} had already ended" if outcome.ended else ""
        _out().write(f"{_jobs(len(outcome.cancelled))} cancelled{tail}\n")
    return outcome.finish(len(jobs))


def _ended_state(api: Client, job_id: int) -> str | None:
    """The job's state if it has ended (the 409 was "already finished"), else None: a 409 for a
    job still live (it changed state under the cancel) stays a failure to report."""
    try:
        state = api.get(f"/api/v1/jobs/{job_id}/")["state"]
    except ApiError:
        return None
    return None if state in LIVE_STATES else str(state)


def _print_dry_run(args: argparse.Namespace, jobs: list[dict[str, Any]]) -> int:
    if args.json:
        output.print_json({"dry_run": True, "would_cancel": jobs}, _out())
        return EXIT_OK
    for job in jobs:
        _out().write(
            f"would cancel job {job['id']} ({job['name']}), {job['state']}, team {job['team']}, "
            f"user {job.get('submitter')}\n"
        )
    _out().write(f"{_jobs(len(jobs))} would be cancelled (dry run: nothing was)\n")
    return EXIT_OK


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"
