"""``gpuctl policy``: the scheduling policy history (platform admins): show, history, diff,
apply a candidate from a file, roll back. Talks to ``/api/v1/policy/``; everyone else gets the
API's 404 (exit 1)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from . import output, yamltext
from .common import UsageError, whole_number
from .common import client as _client
from .common import out as _out

CANDIDATE_KEYS = ("engine_config", "team_weights", "priority_classes")


def register(
    add_subcommand: Callable[
        [str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser
    ],
) -> None:
    """Add ``policy`` and its actions; ``add_subcommand(name, handler, help)`` makes one."""
    show = add_subcommand("show", cmd_show, "the policy in force (or --version N)")
    show.add_argument("--version", help="this version instead of the one in force")
    add_subcommand("history", cmd_history, "every policy version, newest first")
    diff = add_subcommand("diff", cmd_diff, "what changed from version A to version B")
    diff.add_argument("a", metavar="A")
    diff.add_argument("b", metavar="B")
    apply = add_subcommand(
        "apply",
        cmd_apply,
        "put a candidate in force as the next version: a JSON/YAML file with any of "
        "engine_config (replaces), team_weights and priority_classes (merged)",
    )
    apply.add_argument("file", metavar="FILE", help="the candidate; - for standard input")
    apply.add_argument("--reason", "-m", required=True, help="why (kept in the history)")
    rollback = add_subcommand(
        "rollback", cmd_rollback, "put an earlier version's content in force again"
    )
    rollback.add_argument("version", metavar="VERSION")
    rollback.add_argument("--reason", "-m", required=True, help="why (kept in the history)")


def cmd_help(args: argparse.Namespace) -> int:
    """``gpuctl policy`` without an action: bad usage (exit 2), naming the actions."""
    raise UsageError(
        "policy: give an action: show, history, diff, apply or rollback",
        {"ACTION": ["one of show, history, diff, apply, rollback"]},
    )


def _version_number(text: str, flag: str) -> int:
    number = whole_number(text)
    if number is None:
        raise UsageError(f"{flag} must be a version number", {flag: ["must be a version number"]})
    return number


def _print_version(version: dict[str, Any], out: TextIO) -> None:
    output.key_values(
        [
            ("Version", f"v{version['number']}"),
            ("When", version["created_at"]),
            ("Who", version["created_by_name"]),
            (
                "How",
                version["source"] + (f" of v{version['restores']}" if version["restores"] else ""),
            ),
            ("Why", version["reason"]),
            ("Engine config", json.dumps(version["engine_config"], sort_keys=True)),
        ],
        out,
    )
    out.write("\n")
    output.table(["TEAM", "WEIGHT"], sorted(version["team_weights"].items()), out)
    out.write("\n")
    output.table(
        ["CLASS", "VALUE", "PREEMPTIBLE", "RESTRICTED"],
        [
            (name, spec["value"], spec["preemptible_by_default"], spec["restricted"])
            for name, spec in sorted(version["priority_classes"].items())
        ],
        out,
    )


def cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as api:
        if args.version is not None:
            number = _version_number(args.version, "--version")
            data = api.get(f"/api/v1/policy/versions/{number}")
            version = data
        else:
            data = api.get("/api/v1/policy/")
            version = data["in_force"]
    if args.json:
        output.print_json(data, _out())
    else:
        _print_version(version, _out())
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with _client(args) as api:
        versions = api.get("/api/v1/policy/versions")
    if args.json:
        output.print_json(versions, _out())
        return 0
    output.table(
        ["VERSION", "WHEN", "WHO", "HOW", "WHY"],
        [
            (
                f"v{v['number']}",
                v["created_at"],
                v["created_by_name"],
                v["source"] + (f" of v{v['restores']}" if v["restores"] else ""),
                v["reason"],
            )
            for v in versions
        ],
        _out(),
    )
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    a, b = _version_number(args.a, "A"), _version_number(args.b, "B")
    with _client(args) as api:
        rows = api.get("/api/v1/policy/diff", {"a": a, "b": b})
    if args.json:
        output.print_json(rows, _out())
    elif not rows:
        _out().write(f"v{a} and v{b} are the same policy\n")
    else:
        output.table(
            ["WHAT", "SETTING", f"V{a}", f"V{b}"],
            [(r["section"], r["key"], r["before"], r["after"]) for r in rows],
            _out(),
        )
    return 0


def _candidate(path: str) -> dict[str, Any]:
    import sys

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"FILE: cannot read {path} ({exc})", {"FILE": [str(exc)]}) from None
    try:
        data = yamltext.load_one(text)
    except yamltext.YamlTextError as exc:
        raise UsageError(f"FILE: {path}: {exc}", {"FILE": [str(exc)]}) from None
    if not isinstance(data, dict):
        raise UsageError("FILE: must be a mapping", {"FILE": ["must be a mapping"]})
    unknown = sorted(set(data) - set(CANDIDATE_KEYS))
    if unknown:
        raise UsageError(
            f"FILE: unknown key {unknown[0]!r} (expected {', '.join(CANDIDATE_KEYS)})",
            {f"FILE.{k}": ["unknown key"] for k in unknown},
        )
    return data


def cmd_apply(args: argparse.Namespace) -> int:
    candidate = _candidate(args.file)
    with _client(args) as api:
        version = api.post("/api/v1/policy/versions", {**candidate, "reason": args.reason})
    if args.json:
        output.print_json(version, _out())
    else:
        _out().write(f"policy v{version['number']} is in force\n")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    number = _version_number(args.version, "VERSION")
    with _client(args) as api:
        version = api.post(f"/api/v1/policy/versions/{number}/rollback", {"reason": args.reason})
    if args.json:
        output.print_json(version, _out())
    else:
        _out().write(f"policy v{version['number']} is in force (the content of v{number})\n")
    return 0
