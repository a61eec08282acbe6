"""CPU and queries of the submission paths, in-process (no HTTP server, no load generator).

What a single job submission and a 5,000-index array cost the web tier, through the real URL
routing, authentication (an API token), throttles, validation, transaction and publication, on
the configured database and Redis. CPU seconds of this process do not depend on how busy the
machine is, which makes before/after comparisons on a shared machine meaningful; the wall time
of the array includes PostgreSQL.

    createdb -h 127.0.0.1 -U postgres gp_bench
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/gp_bench \\
        REDIS_URL=redis://127.0.0.1:6379/8 DJANGO_DEBUG=true
    .venv/bin/python manage.py migrate -v0 && .venv/bin/python manage.py seed_demo --jobs 0
    DJANGO_DEBUG=false DJANGO_SECRET_KEY=bench DJANGO_ALLOWED_HOSTS=testserver \\
        JOB_PENDING_MAX_TEAM=1000000 JOB_PENDING_MAX_USER=1000000 \\
        .venv/bin/python benchmarks/submit_path.py [--singles 100] [--arrays 5] [--size 5000]

(The pending caps are lifted: the runs queue 25,500 jobs for one user.)

Prints JSON: queries per submission, CPU ms per submission (median of 5 runs of ``--singles``),
and per array: wall and CPU seconds (medians), jobs per second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--singles", type=int, default=100)
    parser.add_argument("--arrays", type=int, default=5)
    parser.add_argument("--size", type=int, default=5000)
    parser.add_argument("--user", default="alice")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--team", default="vision")
    parser.add_argument("--gpu-model", default="h100-80gb")
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    client = APIClient()
    login = {"username": args.user, "password": args.password}
    token = client.post("/api/v1/auth/token", login, format="json").json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    template = {"workers": 1, "gpus_per_worker": 1, "gpu_model": args.gpu_model}
    single = {"name": "bench", "team": args.team, **template, "image": "img", "command": "train"}

    def submit():
        response = client.post("/api/v1/jobs/", single, format="json")
        if response.status_code != 201:
            raise SystemExit(f"submission refused: {response.status_code} {response.content!r}")

    submit()  # warm caches and connections
    with CaptureQueriesContext(connection) as captured:
        submit()
    # Read now: the next request's request_started signal empties the connection's query log.
    queries = len(captured.captured_queries)
    runs = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(args.singles):
            submit()
        runs.append((time.process_time() - started) * 1000 / args.singles)

    body = {
        "name": "bench-sweep",
        "team": args.team,
        "template": template,
        "items": [{"env": {"SEED": str(i)}} for i in range(args.size)],
    }
    walls, cpus = [], []
    for _ in range(args.arrays):
        started, started_cpu = time.perf_counter(), time.process_time()
        response = client.post("/api/v1/job-arrays/", body, format="json")
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - started_cpu)
        if response.status_code != 201:
            raise SystemExit(f"array refused: {response.status_code} {response.content[:300]!r}")

    wall = statistics.median(walls)
    print(
        json.dumps(
            {
                "single": {
                    "queries": queries,
                    "cpu_ms_median": round(statistics.median(runs), 2),
                    "cpu_ms_runs": [round(r, 2) for r in runs],
                },
                "array": {
                    "size": args.size,
                    "wall_s_median": round(wall, 3),
                    "cpu_s_median": round(statistics.median(cpus), 3),
                    "jobs_per_s": round(args.size / wall),
                },
                "load_average": os.getloadavg()[0],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
