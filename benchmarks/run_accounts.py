"""Benchmark: what learning runs' accounts (``scheduler.loop.run_accounts.learn_run_accounts``)
and the stale-run sweep's read of recorded accounts (``scheduler.loop.stale_runs``) cost each
sync, with many live runs on a simulated cluster.

Usage (PostgreSQL on 127.0.0.1:5432 with trust auth; a scratch database is created and dropped):

    .venv/bin/python benchmarks/run_accounts.py [--runs 5000] [--repeat 21]

Two shapes of the same ``--runs`` running jobs, each timed over the list the sync reads (its
holders, with team and cluster):

- ``unrecorded``: no account recorded (runs submitted as the platform's own identity before
  submission recorded "", and runs from before accounts were recorded at all): every sync
  asks the backend about every run. ``learn(first)`` is the sync that records them (once "" is
  learnt, as the simulated backend now answers), ``learn(again, unrecorded)`` the cost each
  sync paid when the backend answered nothing and nothing was recorded.
- ``recorded``: "" recorded at submission, as now: each sync only checks the records.

And the sweep's ``recorded_accounts`` query over the same jobs (the sweep no longer runs it for
a backend that ignores accounts). Prints medians in milliseconds (CPU of this process where the
work is Python; wall for the query).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCRATCH_DB = "gpuplatform_bench_run_accounts"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()

    from benchmarks.scratch_db import django_on_scratch_database

    with django_on_scratch_database(SCRATCH_DB):
        run(args)


def _median_ms(fn, repeat: int, clock=time.process_time) -> float:
    times = []
    for _ in range(repeat):
        started = clock()
        fn()
        times.append((clock() - started) * 1000)
    return round(statistics.median(times), 2)


def run(args) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    call_command("migrate", verbosity=0)
    from scheduler.backends import get_backend
    from scheduler.loop.run_accounts import learn_run_accounts
    from scheduler.loop.stale_runs import recorded_accounts
    from scheduler.models import Cluster, Job
    from scheduler.states import JobState
    from tenants.models import PriorityClass, Team

    now = timezone.now()
    user = get_user_model().objects.create_user("bench")
    research = PriorityClass.objects.create(name="research", value=500)
    teams = [Team.objects.create(slug=f"t{i}", name=f"t{i}") for i in range(20)]
    cluster = Cluster.objects.create(name="bench", backend_kind="simulated")
    backend = get_backend(cluster)
    Job.objects.bulk_create(
        Job(
            team=teams[i % len(teams)],
            submitter=user,
            name=f"j{i}",
            workers=1,
            gpus_per_worker=1,
            priority_class=research,
            state=JobState.RUNNING,
            attempts=1,
            cluster=cluster,
            submitted_at=now,
            backend_ref=f"gp-{i}-a1",
        )
        for i in range(args.runs)
    )

    def holders() -> list[Job]:
        # What sync_cluster reads and hands to learn_run_accounts.
        return list(
            Job.objects.filter(cluster=cluster, state__in=[JobState.RUNNING, JobState.PREEMPTED])
            .exclude(backend_ref="")
            .select_related("team", "cluster")
        )

    result: dict[str, object] = {"runs": args.runs}
    jobs = holders()
    # Each sync's cost before: the backend answered nothing for its own runs, so none was
    # recorded and every run was asked about again (run_owners answering {}, as it did).
    real_owners = backend.run_owners
    backend.run_owners = lambda runs: {}  # type: ignore[method-assign]
    result["learn_ms_unrecorded_each_sync"] = _median_ms(
        lambda: learn_run_accounts(backend=backend, jobs=jobs), args.repeat
    )
    backend.run_owners = real_owners  # type: ignore[method-assign]
    result["recorded_accounts_query_ms_unrecorded"] = _median_ms(
        lambda: recorded_accounts(cluster=cluster, now=now), args.repeat, time.perf_counter
    )
    # The one sync that records "" for runs from before (now that the backend answers it).
    started = time.perf_counter()
    learnt = learn_run_accounts(backend=backend, jobs=jobs)
    result["learn_ms_first_sync_records_all"] = round((time.perf_counter() - started) * 1000, 1)
    assert len(learnt) == args.runs, len(learnt)
    jobs = holders()
    assert all(job.backend_accounts == {"1": ""} for job in jobs)
    result["learn_ms_recorded_each_sync"] = _median_ms(
        lambda: learn_run_accounts(backend=backend, jobs=jobs), args.repeat
    )
    result["recorded_accounts_query_ms_recorded"] = _median_ms(
        lambda: recorded_accounts(cluster=cluster, now=now), args.repeat, time.perf_counter
    )
    result["holders_read_ms"] = _median_ms(holders, 5, time.perf_counter)
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
