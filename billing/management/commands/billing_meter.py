"""``manage.py billing_meter``: run the meter once (cron, the demo, after an outage); with
``--backlog``, meter the allocations ended before its lookback that it never finalized (what
the hourly ``billing.tasks.meter_backlog`` does); or rebuild a month's rollups from its usage rows
with ``--rebuild-rollups 2026-12``. Idempotent each way."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing import calc, meter, rollups


class Command(BaseCommand):
    help = "Meter GPU allocations up to now (idempotent), or rebuild a month's usage rollups."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rebuild-rollups", metavar="YYYY-MM", help="rebuild this month")
        parser.add_argument(
            "--backlog",
            action="store_true",
            help="meter allocations ended before BILLING_METER_LOOKBACK_DAYS, never finalized",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if month := options.get("rebuild_rollups"):
            try:
                first = calc.parse_month(month)
            except ValueError as exc:
                # A usage error, like argparse's own: exit 2 naming the option.
                raise CommandError(f"--rebuild-rollups: {exc}", returncode=2) from None
            daily, jobs = rollups.usage_rollup_rebuild(month=first)
            self.stdout.write(f"{month}: {daily} daily rows, {jobs} job rows")
            return
        if options.get("backlog"):
            result = meter.meter_backlog_run()
            self.stdout.write(
                f"allocations older than the lookback metered {result.backlog_allocations}, "
                f"usage rows {result.usage_rows}, alerts {len(result.alerts)}"
                + (" (another meter run held the lock: run it again)" if result.skipped else "")
            )
            return
        result = meter.meter_run()
        self.stdout.write(
            f"usage rows {result.usage_rows}, finalized allocations "
            f"{result.finalized_allocations}, lost-work rows {result.lost_rows}, "
            f"alerts {len(result.alerts)}"
        )
