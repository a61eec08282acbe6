"""Command line: ``python -m scheduler.policy decide FILE|-``.

Reads a snapshot (JSON, the contract in docs/policy.md) from FILE or stdin, prints the decisions
as JSON on stdout and exits 0. A malformed snapshot exits 2 with ``field: reason`` on stderr
(e.g. ``pending[3].workers: must be >= 1``); an unreadable file or invalid JSON also exits 2
with a one-line message. Never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

from scheduler.policy.codec import SnapshotError, decisions_to_dict, snapshot_from_dict
from scheduler.policy.engine import decide


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
    try:
        snapshot = snapshot_from_dict(data)
    except SnapshotError as e:
        print(str(e), file=sys.stderr)
        return 2
    decisions = decide(snapshot)
    json.dump(decisions_to_dict(decisions), sys.stdout, indent=args.indent or None)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
