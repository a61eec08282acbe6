"""``manage.py billing_meter``: run the meter once (cron, the demo, after an outage), or rebuild
a month's rollups from its usage rows with ``--rebuild-rollups 2026-12``. Idempotent either way."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing import calc, services


class Command(BaseCommand):
    help = "Meter GPU allocations up to now (idempotent), or rebuild a month's usage rollups."

    def add_arguments(self, parser):
        parser.add_argument("--rebuild-rollups", metavar="YYYY-MM", help="rebuild this month")

    def handle(self, *args, **options):
        if month := options.get("rebuild_rollups"):
            try:
                first = calc.parse_month(month)
            except ValueError as exc:
                # A usage error, like argparse's own: exit 2 naming the option.
                raise CommandError(f"--rebuild-rollups: {exc}", returncode=2) from None
            daily, jobs = services.usage_rollup_rebuild(month=first)
            self.stdout.write(f"{month}: {daily} daily rows, {jobs} job rows")
            return
        result = services.meter_run()
        self.stdout.write(
            f"usage rows {result.usage_rows}, finalized allocations "
            f"{result.finalized_allocations}, lost-work rows {result.lost_rows}, "
            f"alerts {len(result.alerts)}, allocations older than the lookback "
            f"{result.backlog_allocations}"
        )
