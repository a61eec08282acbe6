"""``gpuctl whatif``: replay the cluster's own history under candidate policies (platform
admins). ``run`` queues a replay (``/api/v1/policy/whatif``), waits for it while showing its
progress on stderr, and prints the policies side by side; ``show``, ``list`` and ``cancel``
act on kept runs. Bad input, found here or by the API (400), is exit 2 naming the field; a replay
that failed or was cancelled is exit 1; everyone but platform admins gets the API's 404."""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from . import output, yamltext
from .client import Client
from .common import UsageError, whole_number
from .common import client as _client
from .common import err as _err
from .common import out as _out

LIVE = ("queued", "running")
# A candidate file holding any of these is a whole policy (``gpuctl policy apply``'s format);
# otherwise it is engine configuration fields alone.
POLICY_PARTS = ("engine_config", "team_weights", "priority_classes")
POLL_S = 1.0
WINDOW_UNITS_DAYS = {"d": 1.0, "w": 7.0, "h": 1 / 24}
# The side-by-side rows: (metric key, label, format).
ROWS = (
    ("avg_queue_s", "avg wait s", "{:.0f}"),
    ("p95_queue_s", "p95 wait s", "{:.0f}"),
    ("p99_jct_s", "p99 JCT s", "{:.0f}"),
    ("avg_jct_s", "avg JCT s", "{:.0f}"),
    ("preemptions", "preemptions", "{}"),
    ("lost_gpu_hours", "lost GPU-h", "{:.1f}"),
    ("gpu_utilization", "utilization", "{:.3f}"),
    ("jain_fairness", "fairness (Jain)", "{:.4f}"),
    ("jobs", "jobs", "{}"),
)


def register(
    add_subcommand: Callable[
        [str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser
    ],
) -> None:
    """Add ``whatif`` and its actions; ``add_subcommand(name, handler, help)`` makes one."""
    run = add_subcommand(
        "run",
        cmd_run,
        "replay the last --window of finished history under the policy in force and candidates, "
        "wait, and print them side by side",
    )
    run.add_argument("--window", default="30d", help="how far back: 30d, 2w, 36h (default 30d)")
    run.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="a JSON/YAML candidate policy: any of engine_config (replaces the one in force), "
        "team_weights and priority_classes (the named ones change), as `gpuctl policy apply` "
        "takes; a file of engine configuration fields alone also works. The name defaults to "
        "the file's stem; repeatable",
    )
    run.add_argument(
        "--version",
        action="append",
        default=[],
        metavar="N",
        help="an earlier policy version as a candidate (named vN); repeatable",
    )
    run.add_argument("--cluster", help="the cluster (default: the only enabled one)")
    run.add_argument("--no-wait", action="store_true", help="queue it and print its id")
    show = add_subcommand("show", cmd_show, "a what-if run: its status and results")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--wait", action="store_true", help="wait for a live run to end")
    add_subcommand("list", cmd_list, "what-if runs, newest first")
    cancel = add_subcommand("cancel", cmd_cancel, "stop a queued or running replay")
    cancel.add_argument("run_id", metavar="ID")


def cmd_help(args: argparse.Namespace) -> int:
    """``gpuctl whatif`` without an action: bad usage (exit 2), naming the actions."""
    raise UsageError(
        "whatif: give an action: run, show, list or cancel",
        {"ACTION": ["one of run, show, list, cancel"]},
    )


def window_days(text: str) -> float:
    """``30d`` / ``2w`` / ``36h`` / ``30`` (days) as days; UsageError (exit 2) otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dwh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise UsageError(
            f"--window: expected a length like 30d, 2w or 36h, not {text!r}",
            {"--window": ["expected a length like 30d, 2w or 36h"]},
        )
    days = float(match.group(1)) * WINDOW_UNITS_DAYS[match.group(2) or "d"]
    # float() reads a 400-digit length as infinity, which JSON cannot carry to the server.
    if not math.isfinite(days):
        raise UsageError(
            "--window: is too long a window",
            {"--window": ["is too long a window"]},
        )
    return days


def _candidate(spec: str) -> tuple[str, dict[str, Any]]:
    name, sep, path = spec.partition("=")
    if not sep:
        path = spec
        name = re.sub(r"\W", "_", Path(spec).stem) or "candidate"
        if name[0].isdigit():
            name = "c_" + name
    flag = f"--candidate {spec}"
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag}: cannot read {path} ({exc})", {flag: [str(exc)]}) from None
    try:
        data = yamltext.load_one(text)
    except yamltext.YamlTextError as exc:
        raise UsageError(f"{flag}: {path}: {exc}", {flag: [str(exc)]}) from None
    if not isinstance(data, dict):
        raise UsageError(
            f"{flag}: must be a mapping: a policy ({', '.join(POLICY_PARTS)}) or engine "
            "configuration fields",
            {flag: ["must be a mapping"]},
        )
    if set(data) & set(POLICY_PARTS):
        # A whole policy: a stray key beside its parts is a typo, not an engine field.
        unknown = sorted(set(data) - set(POLICY_PARTS))
        if unknown:
            raise UsageError(
                f"{flag}: unknown key {unknown[0]!r} (expected {', '.join(POLICY_PARTS)})",
                {f"{flag}.{k}": ["unknown key"] for k in unknown},
            )
    return name, data


def _run_id(text: str, flag: str = "ID", what: str = "a run number") -> int:
    number = whole_number(text)
    if number is None:
        raise UsageError(f"{flag} must be {what}", {flag: [f"must be {what}"]})
    return number


def _wait(api: Client, run: dict[str, Any], err: TextIO) -> dict[str, Any]:
    """Poll the run until it ends, redrawing its progress on ``err``."""
    tty = err.isatty()
    last = ""
    while run["status"] in LIVE:
        line = f"run {run['id']}: {run['status']} {run['progress_fraction']:4.0%} {run['progress_text']}"
        if line != last:
            err.write(("\r" + line.ljust(len(last))) if tty else (line + "\n"))
            err.flush()
            last = line
        time.sleep(POLL_S)
        run = api.get(f"/api/v1/policy/whatif/{run['id']}")
    if tty and last:
        err.write("\n")
    return run


def print_run(run: dict[str, Any], out: TextIO) -> None:
    """The run's facts, then (when it succeeded) the policies side by side and per team."""
    output.key_values(
        [
            ("Run", run["id"]),
            ("Cluster", run["cluster"]),
            ("Window", f"{run['since']} – {run['until']}"),
            ("In force", f"v{run['baseline_version']} (as gpuplatform)"),
            ("Status", run["status"]),
            *([("Error", run["error"])] if run.get("error") else []),
        ],
        out,
    )
    results = run.get("results") or {}
    if run["status"] != "succeeded" or not results:
        return
    policies = run["policies"]
    out.write("\n")
    output.table(
        ["METRIC", *policies],
        [
            [label] + [_fmt(results.get(p, {}).get(key), fmt) for p in policies]
            for key, label, fmt in ROWS
        ],
        out,
    )
    details = run.get("details") or {}
    teams = sorted({t for p in policies for t in details.get(p, {}).get("teams", {})})
    if not teams:
        return
    out.write("\n")
    headers = ["TEAM"]
    for p in policies:
        headers += [f"{p} AVG WAIT S", f"{p} GPU SHARE", f"{p} FAIR SHARE"]
    rows = []
    for team in teams:
        row = [team]
        for p in policies:
            d = details.get(p, {}).get("teams", {}).get(team, {})
            row += [
                _fmt(d.get("avg_wait_s"), "{:.0f}"),
                _fmt(d.get("gpu_share"), "{:.3f}"),
                _fmt(d.get("fair_share"), "{:.3f}"),
            ]
        rows.append(row)
    output.table(headers, rows, out)
    for p in policies[1:]:
        skipped = details.get(p, {}).get("not_replayed") or []
        if skipped:
            out.write(
                f"\nnote: {p} also changes {', '.join(skipped)}, which act when a job is "
                "submitted: the replay cannot show them\n"
            )


def _fmt(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _finish(run: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        output.print_json(run, _out())
    else:
        print_run(run, _out())
    if run["status"] in ("failed", "cancelled"):
        why = run.get("error") or run.get("progress_text") or run["status"]
        _err().write(f"error: the replay {run['status']}: {why}\n")
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    days = window_days(args.window)
    candidates: dict[str, Any] = {}
    for spec in args.candidate:
        name, config = _candidate(spec)
        if name in candidates:
            raise UsageError(
                f"--candidate: the name {name!r} is given twice (use NAME=FILE)",
                {"--candidate": [f"the name {name!r} is given twice"]},
            )
        candidates[name] = config
    numbers = [_run_id(v, "--version", "a version number") for v in args.version]
    versions = {f"v{n}": n for n in numbers}
    if not candidates and not versions:
        raise UsageError(
            "give at least one --candidate FILE or --version N",
            {"--candidate": ["give at least one --candidate FILE or --version N"]},
        )
    body: dict[str, Any] = {"window_days": days, "candidates": candidates}
    if versions:
        body["candidate_versions"] = versions
    if args.cluster:
        body["cluster"] = args.cluster
    with _client(args) as api:
        run = api.post("/api/v1/policy/whatif", body)
        if args.no_wait:
            if args.json:
                output.print_json(run, _out())
            else:
                _out().write(f"what-if run {run['id']} is queued\n")
            return 0
        run = _wait(api, run, _err())
        run = api.get(f"/api/v1/policy/whatif/{run['id']}")
    return _finish(run, args)


def cmd_show(args: argparse.Namespace) -> int:
    run_id = _run_id(args.run_id)
    with _client(args) as api:
        run = api.get(f"/api/v1/policy/whatif/{run_id}")
        if args.wait:
            run = _wait(api, run, _err())
            run = api.get(f"/api/v1/policy/whatif/{run_id}")
    if run["status"] in LIVE:
        if args.json:
            output.print_json(run, _out())
        else:
            print_run(run, _out())
            _out().write(f"Progress: {run['progress_fraction']:.0%} {run['progress_text']}\n")
        return 0
    return _finish(run, args)


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as api:
        runs = api.get("/api/v1/policy/whatif")
    if args.json:
        output.print_json(runs, _out())
        return 0
    output.table(
        ["ID", "ASKED", "BY", "CLUSTER", "SINCE", "UNTIL", "CANDIDATES", "STATUS"],
        [
            (
                r["id"],
                r["created_at"],
                r["created_by_name"],
                r["cluster"],
                r["since"],
                r["until"],
                ",".join(r["candidates"]),
                r["status"],
            )
            for r in runs
        ],
        _out(),
    )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    run_id = _run_id(args.run_id)
    with _client(args) as api:
        run = api.post(f"/api/v1/policy/whatif/{run_id}/cancel")
    if args.json:
        output.print_json(run, _out())
    else:
        _out().write(f"what-if run {run_id}: {run['status']} ({run['progress_text']})\n")
    return 0
