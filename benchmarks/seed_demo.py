"""How long `manage.py seed_demo` takes on a fresh embedded (SQLite) database, as `make demo`
runs it: wall and CPU time of the whole command (interpreter and Django start-up included),
medians of N runs, and one re-run on the seeded database (idempotent: "already seeded").

    .venv/bin/python benchmarks/seed_demo.py [--runs 7] [--before DIR]

``--before DIR`` times another checkout of the project too (``git archive REF | tar -x -C
DIR``), alternating with this one run by run in the same process, so both see the same machine
load: the honest way to compare on a shared VM. Each run gets a copy of one migrated database,
so migrations are not timed. The history's size is printed, to show both seeded the same past.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TABLES = ("scheduler_job", "scheduler_allocation", "billing_usagerecord", "scheduler_jobevent")


def _env(db: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=f"sqlite:///{db}", DJANGO_DEBUG="true", REDIS_URL="")
    return env


def _run(checkout: Path, db: Path) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, its stdout) of one `manage.py seed_demo`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(checkout / "manage.py"), "seed_demo"],
        cwd=checkout,
        env=_env(db),
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def _counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", type=Path, help="another checkout to time alternately")
    args = parser.parse_args()
    checkouts = {"this": HERE}
    if args.before:
        checkouts = {"before": args.before.resolve(), **checkouts}
    work = Path(tempfile.mkdtemp(prefix="seed-demo-bench-"))
    try:
        templates = {}
        for label, checkout in checkouts.items():
            # Each checkout migrates its own template: their migrations may differ.
            templates[label] = work / f"{label}-template.sqlite3"
            subprocess.run(
                [sys.executable, str(checkout / "manage.py"), "migrate", "-v0"],
                cwd=checkout,
                env=_env(templates[label]),
                check=True,
            )
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in checkouts}
        for i in range(args.runs):
            for label, checkout in checkouts.items():
                db = work / f"{label}-{i}.sqlite3"
                shutil.copy(templates[label], db)
                wall, cpu, _ = _run(checkout, db)
                times[label].append((wall, cpu))
                if i == 0:
                    again_wall, again_cpu, out = _run(checkout, db)
                    assert "already seeded" in out, out
                    print(
                        f"{label}: seeded {_counts(db)}; re-run (already seeded) "
                        f"{again_wall:.2f} s wall, {again_cpu:.2f} s CPU"
                    )
                db.unlink()
        print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
        for label, runs in times.items():
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(
                f"{label:>6}: wall median {statistics.median(walls):.2f} s "
                f"(min {min(walls):.2f}, max {max(walls):.2f}); CPU median "
                f"{statistics.median(cpus):.2f} s (min {min(cpus):.2f}, max {max(cpus):.2f}); "
                f"{len(runs)} runs"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
