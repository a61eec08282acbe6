"""``gpuctl wait``: block until jobs end, and say in the exit status whether they succeeded.

What ``sbatch --wait`` gives a Slurm script: ``gpuctl submit ... && gpuctl wait $ID`` under
``set -e`` stops at a job that failed. Exit codes (beyond the common 0, 1, 2):

  3    every job ended, and at least one of them failed or was cancelled
  124  ``--timeout`` passed with a job still live (as timeout(1) says it); the jobs are untouched

A job id the caller cannot see is "no such job" (exit 1) before any waiting. Waiting reads each
live job once per ``--interval``; a job that has ended is not read again. Once every job has been
read, a server that does not answer for a while (a restart, a proxy without upstream, 429) is
noted on stderr and asked again at the next interval, not taken for the jobs' end (``logs -f``
waits out an outage the same way, through ``PatientReads``)."""

from __future__ import annotations

import argparse
import time
from typing import Any, TextIO

from . import output
from .client import ApiError, Client
from .common import LIVE_STATES, PASSING_STATUSES, counts_text, job_id_arg, positive_number
from .common import client as _client
from .common import err as _err
from .common import out as _out

EXIT_NOT_SUCCEEDED = 3
EXIT_TIMED_OUT = 124
FINAL_STATES = ("succeeded", "failed", "cancelled")
# A read at least once an hour: a longer pause is a typo (time.sleep overflows on 1e300).
_MAX_INTERVAL_S = 3600
# Thirty years: beyond it, leave --timeout out (and monotonic() + a huge float loses precision).
_MAX_TIMEOUT_S = 10**9


def register(wait: argparse.ArgumentParser) -> None:
    """The ``wait`` command's arguments."""
    wait.add_argument("job_ids", nargs="+", metavar="JOB_ID")
    wait.add_argument(
        "--interval", default="5", help="seconds between reads of a live job (default 5)"
    )
    wait.add_argument(
        "--timeout",
        help="give up after this many seconds, exit 124, jobs untouched (default: wait forever)",
    )


def cmd_wait(args: argparse.Namespace) -> int:
    """Poll GET /api/v1/jobs/ID/ until every job is succeeded, failed or cancelled; print each
    one's end as it happens (``--json``: the ended jobs, in the order given, at the end)."""
    ids = list(dict.fromkeys(job_id_arg(text) for text in args.job_ids))
    interval_s = wait_interval(args.interval, "--interval")
    timeout_s = positive_number(
        args.timeout, "--timeout", number=float, minimum=0, maximum=_MAX_TIMEOUT_S
    )
    return wait_for_jobs(args, ids, interval_s, timeout_s)


def wait_interval(text: str, flag: str) -> float:
    """The seconds between reads, from ``text`` (exit 2 naming ``flag`` when it is no such)."""
    return float(positive_number(text, flag, number=float, minimum=0.1, maximum=_MAX_INTERVAL_S))


def wait_for_jobs(
    args: argparse.Namespace, ids: list[int], interval_s: float, timeout_s: float | None
) -> int:
    """``wait``'s loop: each live job read once per ``interval_s`` until all have ended."""
    give_up_at = None if timeout_s is None else time.monotonic() + timeout_s
    ended: dict[int, dict[str, Any]] = {}
    out = _out()
    with _client(args) as api:
        live: dict[int, dict[str, Any]] = {}
        unanswered: set[int] = set()  # jobs whose last read the server did not answer
        while True:
            for job_id in ids:
                if job_id in ended:
                    continue
                job = _read(api, job_id, first=job_id not in live, unanswered=unanswered)
                if job is None:  # the server did not answer this time: ask again next round
                    continue
                if job.get("state") in FINAL_STATES:
                    ended[job_id] = job
                    live.pop(job_id, None)
                    if not args.json:
                        out.write(_ending(job) + "\n")
                        out.flush()
                else:
                    live[job_id] = job
            if not live:
                break
            if give_up_at is not None and time.monotonic() >= give_up_at:
                return _timed_out(args, ids, ended, live)
            pause_s = interval_s
            if give_up_at is not None:
                pause_s = max(0.0, min(pause_s, give_up_at - time.monotonic()))
            time.sleep(pause_s)
    if args.json:
        output.print_json([ended[job_id] for job_id in ids], out)
    if all(job.get("state") == "succeeded" for job in ended.values()):
        return 0
    return EXIT_NOT_SUCCEEDED


def _read(api: Client, job_id: int, *, first: bool, unanswered: set[int]) -> dict[str, Any] | None:
    """The job; None when the server is passing unavailable and the job was read before (a
    first read fails at once: a wrong URL or id must not wait in silence). The first read of an
    outage is noted on stderr, not every one."""
    try:
        job: dict[str, Any] = api.get(f"/api/v1/jobs/{job_id}/")
    except ApiError as exc:
        if first or exc.status not in PASSING_STATUSES:
            raise
        if job_id not in unanswered:
            unanswered.add(job_id)
            _err().write(f"note: job {job_id}: {exc.message}; still waiting\n")
        return None
    unanswered.discard(job_id)
    return job


def _ending(job: dict[str, Any]) -> str:
    """``job 7 (train) failed, exit code 137``, or ``..., <why>`` when no code was recorded."""
    text = f"job {job['id']} ({job.get('name')}) {job['state']}"
    if job.get("exit_code") is not None:
        return f"{text}, exit code {job['exit_code']}"
    if job["state"] == "failed" and job.get("why"):
        return f"{text}: {job['why']}"
    return text


def _timed_out(
    args: argparse.Namespace,
    ids: list[int],
    ended: dict[int, dict[str, Any]],
    live: dict[int, dict[str, Any]],
) -> int:
    err: TextIO = _err()
    if args.json:
        output.print_json([ended.get(job_id) or live[job_id] for job_id in ids], _out())
        # One error object, as every --json error is; its kind says which of wait's exits.
        reasons = {str(job["id"]): [f"still {job['state']}"] for job in live.values()}
        count = f"{len(live)} job{'s' if len(live) != 1 else ''}"
        body = {"error": f"timed out: {count} still live", "kind": "timeout", "fields": reasons}
        output.print_json(body, err)
        return EXIT_TIMED_OUT
    for job in live.values():
        err.write(f"timed out: job {job['id']} ({job.get('name')}) is still {job['state']}\n")
    return EXIT_TIMED_OUT


def wait_for_array(args: argparse.Namespace, array: dict[str, Any], interval_s: float) -> int:
    """Read the array's count per state once per ``interval_s`` until none of its jobs is live
    (one read for the whole array, however many jobs it has); print its end (``--json``: the
    array as last read). Exit 0 if every job succeeded, else 3."""
    with _client(args) as api:
        reads = PatientReads(api, f"array {array['id']}", interval_s)
        while any((array.get("counts") or {}).get(state) for state in LIVE_STATES):
            time.sleep(interval_s)
            array = reads.get(f"/api/v1/job-arrays/{array['id']}/")
    counts = array.get("counts") or {}
    if args.json:
        output.print_json(array, _out())
    else:
        _out().write(f"array {array['id']} ({array['name']}) ended: {counts_text(counts)}\n")
    return 0 if counts.get("succeeded", 0) == array["size"] else EXIT_NOT_SUCCEEDED


class PatientReads:
    """Reads of what a command already follows (``logs -f`` after its first read): an answer
    that says "not now" (unreachable, 429, 502-504) is noted on stderr once per outage and asked
    again after the pause, as ``wait`` does; a ``logs -f`` that ended at a deploy lost the rest
    of a night's training log. Reading again is safe: a log read by cursor changes nothing."""

    def __init__(self, api: Client, what: str, pause_s: float) -> None:
        self.api, self.what, self.pause_s = api, what, pause_s
        self.in_outage = False

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        while True:
            try:
                answer = self.api.get(path, params)
            except ApiError as exc:
                if exc.status not in PASSING_STATUSES:
                    raise
                if not self.in_outage:
                    self.in_outage = True
                    _err().write(f"note: {self.what}: {exc.message}; still following\n")
                time.sleep(self.pause_s)
                continue
            self.in_outage = False
            return answer
