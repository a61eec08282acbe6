"""``manage.py seed_demo``: seed the demo (``demo.seed``). Refuses to run with DEBUG off."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from demo.seed import default_history_days, seed
from policyversions.services import policy_version_seed


class Command(BaseCommand):
    help = "Create the demo teams, quotas, priority classes, a 32-node simulated cluster and users."
    # make demo runs migrate (which runs the system checks) just before; they cost a second here.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--jobs", type=int, default=12, help="demo jobs to queue (first run)")
        parser.add_argument(
            "--history-days",
            type=int,
            default=None,
            help="days of finished history to invent (first run; default: back to the first day "
            "of the previous month, so last month's cost page is complete); 0 for none",
        )

    def handle(self, *args: Any, jobs: int, history_days: int | None, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("seed_demo refuses to run with DJANGO_DEBUG off (demo passwords)")
        if history_days is None:
            history_days = default_history_days(timezone.now())
        if not 0 <= history_days <= 120:
            raise CommandError("--history-days: between 0 and 120")
        with transaction.atomic():
            created = seed(jobs=jobs, history_days=history_days)
            # The policy history starts with the demo's teams and classes (SCHEDULER_POLICY's v1).
            policy_version_seed()
        self.stdout.write(self.style.SUCCESS("Demo ready." if created else "Demo already seeded."))
        self.stdout.write(
            "Users (password 'demo'): admin (platform admin), alice (vision), bob (nlp)\n"
            "Portal: http://127.0.0.1:8000/   API docs: http://127.0.0.1:8000/api/docs/"
        )
