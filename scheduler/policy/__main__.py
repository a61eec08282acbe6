"""Command line: ``python -m scheduler.policy decide FILE|-``.

Reads a snapshot (JSON, the contract in docs/policy.md) from FILE or stdin, prints the decisions
as JSON on stdout and exits 0. A malformed snapshot exits 2 with ``field: reason`` on stderr
(e.g. ``pending[3].workers: must be >= 1``); an unreadable file or invalid JSON also exits 2
with a one-line message. Never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import warnings
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from scheduler.policy.codec import (
    SnapshotError,
    config_deprecations,
    decisions_to_dict,
    snapshot_from_dict,
)
from scheduler.policy.engine import decide


class _Unusual(Exception):
    pass


def _indented(value: Any, newline: str, step: str) -> str:
    # json.dumps(value, indent=...) text: with an indent the json module encodes in Python,
    # generator by generator, which cost as much as deciding on a 10,000-job queue. Plain
    # JSON types only; anything else raises _Unusual and goes to json.dumps.
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is dict:
        if not value:
            return "{}"
        inner = newline + step
        items = []
        for k, v in value.items():
            if type(k) is not str:
                raise _Unusual
            items.append(_quote(k) + ": " + _indented(v, inner, step))
        return "{" + inner + ("," + inner).join(items) + newline + "}"
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        inner = newline + step
        items = [_indented(v, inner, step) for v in value]
        return "[" + inner + ("," + inner).join(items) + newline + "]"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    raise _Unusual


def dumps(value: Any, indent: int | None) -> str:
    """``json.dumps(value, indent=indent)``, the same text, faster for an indent."""
    if not indent or indent < 0:
        return json.dumps(value, indent=indent)
    try:
        return _indented(value, "\n", " " * indent)
    except (_Unusual, RecursionError):
        return json.dumps(value, indent=indent)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.policy", description="Scheduling policy engine."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_decide = sub.add_parser("decide", help="decide one cycle for a snapshot (JSON)")
    p_decide.add_argument("snapshot", help="snapshot JSON file, or - for stdin")
    p_decide.add_argument("--indent", type=int, default=2, help="JSON indent (0: compact)")
    args = parser.parse_args(argv)

    source = "stdin" if args.snapshot == "-" else args.snapshot
    try:
        if args.snapshot == "-":
            text = sys.stdin.read()
        else:
            with open(args.snapshot, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"{source}: cannot read: {e}", file=sys.stderr)
        return 2
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        print(f"{source}: invalid JSON: {e}", file=sys.stderr)
        return 2
    except RecursionError:
        print(f"{source}: invalid JSON: nested too deeply", file=sys.stderr)
        return 2
    except ValueError:
        # json reads an integer of any length, but int() refuses one of more digits than the
        # interpreter's limit (a guard against quadratic conversion)
        limit = sys.get_int_max_str_digits()
        print(f"{source}: invalid JSON: an integer has more than {limit} digits", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings():
            # each deprecated key is reported once, as the warning: line below; the codec's
            # DeprecationWarning would print it a second time, as a raw Python warning
            warnings.simplefilter("ignore", DeprecationWarning)
            snapshot = snapshot_from_dict(data)
    except SnapshotError as e:
        print(str(e), file=sys.stderr)
        return 2
    if isinstance(data, dict):
        # today's flat las_* keys still work for one release; the user is told on stderr
        for message in config_deprecations(data.get("config"), "config"):
            print(f"warning: {message}", file=sys.stderr)
    decisions = decide(snapshot)
    try:
        sys.stdout.write(dumps(decisions_to_dict(decisions), args.indent or None))
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (``decide ... | head``): it has all it wanted, so no
        # traceback. Closing stdout drops what is still buffered (the close reports the broken
        # pipe once more), so the interpreter's flush at exit has nothing left to fail on. Exit
        # 1, as Python's own recipe does: not all the output was delivered.
        try:
            sys.stdout.close()
        except BrokenPipeError:
            pass
        return 1
    return 0


if __name__ == "__main__":
    # One short pass over an acyclic document: the cyclic collector would only walk the
    # snapshot's tens of thousands of objects again and again while they are built (5 % of
    # the command's instructions on a 15,000-job snapshot).
    gc.disable()
    sys.exit(main())
