"""What gpuctl's command modules share: the usage error (exit 2), the job states and how
``--state`` may spell them, the API client the flags and the saved login name, the terminal
writers, the error report, and the job listing of ``ls`` and ``cancel``. ``main`` and the command
modules (``policy``, ``whatif``, ``session``, ``cancelling``) import it; it imports none of
them."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any, TextIO, cast

from . import config, output
from .client import ApiError, Client

# Ours, as the API names them.
STATES = ("pending", "running", "preempted", "succeeded", "failed", "cancelled")
LIVE_STATES = ("pending", "running", "preempted")
# Slurm's names and short codes (squeue -t, scancel -t, sacct -s) for the states that mean the same
# thing here. Not PREEMPTED (PR): Slurm's ends the job, ours is a job on its way back to pending;
# nor TIMEOUT, NODE_FAIL or OUT_OF_MEMORY, which our "failed" holds with other failures.
SLURM_STATES = {
    "PD": "pending",
    "PENDING": "pending",
    "R": "running",
    "RUNNING": "running",
    "CD": "succeeded",
    "COMPLETED": "succeeded",
    "F": "failed",
    "FAILED": "failed",
    "CA": "cancelled",
    "CANCELLED": "cancelled",
}


# Answers that say "not now" rather than "no": the server restarting (a deploy during a night's
# wait), a proxy in front of it with no upstream, throttling. A command that has already read what
# it follows (``wait``, ``logs -f``) notes them and asks again.
PASSING_STATUSES = (0, 429, 502, 503, 504)


def counts_text(counts: dict[str, int]) -> str:
    """``2 pending, 1 running`` (states with no job left out; ``-`` when none)."""
    parts = [f"{counts[state]} {state}" for state in STATES if counts.get(state)]
    return ", ".join(parts) if parts else "-"


class UsageError(Exception):
    """Bad usage detected after parsing (exit 2). ``fields`` names the inputs at fault."""

    def __init__(self, message: str, fields: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}


def job_states(text: str, flag: str = "--state") -> list[str]:
    """The states a comma-separated ``--state`` names, each once and in order: ours in any case
    (``PENDING``, ``pending``), or Slurm's codes that map exactly (``PD``, ``R``, ``CD``, ``F``,
    ``CA``). Anything else is ``UsageError`` naming ``flag`` and what is accepted, before a
    request (the server knew only lower-case names: ``ls --state PENDING`` was its 400)."""
    found: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        state = word.lower() if word.lower() in STATES else SLURM_STATES.get(word.upper())
        if state is None:
            accepted = f"{', '.join(STATES)} (any case), or Slurm's " + ", ".join(
                f"{code} ({ours})" for code, ours in SLURM_STATES.items() if len(code) < 3
            )
            reason = f"unknown state {word!r} (accepted: {accepted})"
            raise UsageError(f"{flag}: {reason}", {flag: [reason]})
        if state not in found:
            found.append(state)
    return found


def whole_number(text: str) -> int | None:
    """``text`` as a number >= 1 when it is one written in ASCII digits, else None. str.isdigit
    alone also takes "²" and other digits int() refuses (a ValueError traceback), and int()
    refuses more than 4,300 digits."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    value = int(text)
    return value if value >= 1 else None


# Job ids are 64-bit database keys (the platform's core.ids.MAX_ID, which gpuctl may not import).
MAX_JOB_ID = 2**63 - 1


def job_id_arg(text: str) -> int:
    """``text`` as a job id (a number a job can have), else ``UsageError`` naming JOB_ID."""
    try:
        value = int(text)
    except ValueError:
        raise UsageError(
            f"job id must be a number, not {text!r}",
            {"JOB_ID": [f"must be a number, not {text!r}"]},
        ) from None
    if not 1 <= value <= MAX_JOB_ID:
        message = f"must be between 1 and {MAX_JOB_ID}"
        raise UsageError(f"job id {message}", {"JOB_ID": [message]})
    return value


def positive_number(
    text: str | None,
    flag: str,
    *,
    number: Callable[[str], float] = int,
    minimum: float = 1,
    maximum: float | None = None,
) -> Any:
    """``text`` as a number between ``minimum`` and ``maximum`` (None when absent), else
    ``UsageError`` naming ``flag``."""
    if text is None:
        return None
    try:
        value = number(text)
    except ValueError:
        raise UsageError(
            f"{flag} must be a number, not {text!r}", {flag: [f"must be a number, not {text!r}"]}
        ) from None
    # float() accepts "nan" and "inf", and NaN compares false with every bound; an int of
    # hundreds of digits is no float at all.
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise UsageError(
            f"{flag} must be a finite number, not {text!r}",
            {flag: [f"must be a finite number, not {text!r}"]},
        )
    if value < minimum:
        raise UsageError(f"{flag} must be >= {minimum}", {flag: [f"must be >= {minimum}"]})
    if maximum is not None and value > maximum:
        raise UsageError(f"{flag} must be <= {maximum}", {flag: [f"must be <= {maximum}"]})
    return value


def client(args: argparse.Namespace) -> Client:
    """A client for the server ``--url`` names, else ``GPUCTL_URL``, else the saved login."""
    settings = config.resolve(url_flag=args.url)
    return Client(settings.url, settings.token)


# The job list's query parameters and the flags of ``ls`` and ``cancel`` that fill them.
JOB_FILTER_FLAGS = {"submitter": "--user", "team": "--team", "state": "--state"}


def jobs_listed(
    api: Client, *, state: str | None, team: str | None, submitter: str | None, limit: int
) -> tuple[list[Any], int]:
    """The newest ``limit`` jobs ``ls``'s and ``cancel``'s filters select, and how many match
    (GET /api/v1/jobs/). The server's 400 names the flag, not its query parameter: ``--user:
    no member of your teams is called 'nosuch'`` (the main handler exits 2 on it)."""
    try:
        return api.get_up_to(
            "/api/v1/jobs/", {"state": state, "team": team, "submitter": submitter}, limit=limit
        )
    except ApiError as exc:
        if exc.status == 400 and exc.fields:
            exc.fields = {JOB_FILTER_FLAGS.get(k, k): v for k, v in exc.fields.items()}
            first, reasons = next(iter(exc.fields.items()))
            exc.message = f"{first}: {reasons[0]}"
        raise


def out() -> TextIO:
    return cast(TextIO, output.TerminalWriter(sys.stdout))


def err() -> TextIO:
    return cast(TextIO, output.TerminalWriter(sys.stderr))


def report(
    json_mode: bool, kind: str, message: str, fields: dict[str, list[str]], status: int = 0
) -> None:
    """An error on stderr: one JSON object with ``--json``, else an ``error:`` line per reason."""
    if json_mode:
        body: dict[str, Any] = {"error": message, "kind": kind, "fields": fields}
        if status:
            body["status"] = status
        output.print_json(body, err())
        return
    if fields:
        for path, reasons in fields.items():
            for reason in reasons:
                prefix = "" if path in ("non_field_errors", "detail") else f"{path}: "
                err().write(f"error: {prefix}{reason}\n")
    else:
        err().write(f"error: {message}\n")
