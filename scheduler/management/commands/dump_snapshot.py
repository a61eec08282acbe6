"""Write the last scheduling cycle's snapshot as contract JSON, replayable offline with
``python -m scheduler.policy decide FILE``. Without a remembered cycle (e.g. the cache is
process-local), the snapshot the next cycle would see is built now."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from scheduler.loop.decide import last_cycle
from scheduler.policy import snapshot_to_dict
from scheduler.snapshot import build_snapshot


class Command(BaseCommand):
    help = "Dump the last cycle's policy snapshot as JSON (to stdout or --out FILE)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", default="-", help="file to write, - for stdout")
        parser.add_argument("--fresh", action="store_true", help="build a snapshot now")

    def handle(self, *args: Any, out: str, fresh: bool, **options: Any) -> None:
        remembered = None if fresh else last_cycle()
        if remembered is not None:
            data = remembered["snapshot"]
        else:
            snapshot, _ = build_snapshot(now=timezone.now())
            data = snapshot_to_dict(snapshot)
        text = json.dumps(data, indent=2, sort_keys=True)
        if out == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(out, "w") as handle:
                handle.write(text + "\n")
            self.stderr.write(f"wrote {out}")
