"""Benchmark: what the pending-job caps cost a submission (``services.pending_caps_check``), on
PostgreSQL, with a team holding many pending jobs and a long history of finished ones.

Usage (PostgreSQL on 127.0.0.1:5432 with trust auth; a scratch database is created and dropped):

    .venv/bin/python benchmarks/pending_caps.py [--pending 9000] [--finished 30000]

Prints the median and p95 of 21 checks far from the cap (one query) and close to it (the team's
row locked and the count taken again).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.scratch_db import django_on_scratch_database  # noqa: E402

SCRATCH_DB = "gpuplatform_bench_caps"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=9000)
    parser.add_argument("--finished", type=int, default=30000)
    args = parser.parse_args()
    with django_on_scratch_database(SCRATCH_DB):
        run(args)


def run(args) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from scheduler.models import Job
    from scheduler.services import pending_caps_check
    from tenants.models import PriorityClass, Team

    call_command("migrate", verbosity=0)
    team = Team.objects.create(slug="bench", name="bench")
    me, other = (get_user_model().objects.create(username=n) for n in ("me", "other"))
    priority = PriorityClass.objects.create(name="default", value=1)
    now = timezone.now()

    def jobs(count, state, submitter):
        Job.objects.bulk_create(
            (
                Job(
                    team=team,
                    submitter=submitter,
                    name=f"j{i}",
                    workers=1,
                    gpus_per_worker=1,
                    priority_class=priority,
                    submitted_at=now,
                    state=state,
                )
                for i in range(count)
            ),
            batch_size=5000,
        )

    jobs(args.pending // 2, "pending", me)
    jobs(args.pending - args.pending // 2, "pending", other)
    jobs(args.finished, "succeeded", me)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    def measure(label: str) -> None:
        times = []
        for _ in range(21):
            started = time.perf_counter()
            with transaction.atomic():
                pending_caps_check(user=me, team=team, adding=1)
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        print(f"{label}: median {statistics.median(times):.1f} ms, p95 {times[19]:.1f} ms")

    settings.JOB_PENDING_MAX_TEAM = args.pending * 10
    settings.JOB_PENDING_MAX_USER = args.pending * 10
    measure(f"{args.pending:,} pending, far from the cap (one query)")
    settings.JOB_PENDING_MAX_TEAM = args.pending + 100
    measure(f"{args.pending:,} pending, close to the cap (row lock, counted again)")


if __name__ == "__main__":
    main()
