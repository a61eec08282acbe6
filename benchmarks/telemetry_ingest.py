"""Benchmark: sustained telemetry ingest into PostgreSQL (samples/s) and batch latency.

    .venv/bin/python benchmarks/telemetry_ingest.py                      # defaults below
    .venv/bin/python benchmarks/telemetry_ingest.py --batches 40,400,2000 --procs 2 --seconds 6

It creates its own scratch database (``telemetry_bench_<pid>`` on 127.0.0.1:5432, user postgres,
trust auth; ``--server`` to change), migrates it, creates a 1,000-node x 8-GPU cluster with an
agent token per node, and drops the database afterwards (also on failure or Ctrl-C).

What is timed: ``--procs`` worker processes (one per core: a web deployment runs several
workers) each post pre-built batches for their own share of the nodes, back to back, for
``--seconds``; each batch goes through the whole request path in process (Django's test client:
middleware, node-token authentication, JSON parsing, validation of every sample, one transaction
with a COPY of the samples, the per-node bookkeeping row, the live-stream publication) or, with
``--mode service``, straight into ``samples_ingest`` (no HTTP layer). Sustained rate = samples
stored / wall time of the round; latency = per batch. Each configuration runs ``--rounds`` times
and the medians of the rounds are reported (the machine is shared and noisy). The raw table is
truncated between configurations so each starts from the same size.

Batch sizes: 40 is what an agent sends at 1 Hz with its default 5 s flush on an 8-GPU node
(1,000 such nodes = 200 batches/s, 8,000 samples/s); 400 and 2,000 are agents catching up after
an outage or configured to flush less often.
Connections persist across requests (``DATABASE_CONN_MAX_AGE=60``, as in docker/compose.yaml).
Goal: >= 20,000 samples/s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.scratch_db import create_database, drop_database  # noqa: E402

NODES, GPUS = 1000, 8


def setup_django(server: str, name: str, *, migrate: bool) -> None:
    os.environ["DATABASE_URL"] = f"{server.rstrip('/')}/{name}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # Persistent connections, as deployed (docker/compose.yaml): with the demo's 0, every
    # request would open a new PostgreSQL connection and that would be what is measured.
    os.environ.setdefault("DATABASE_CONN_MAX_AGE", "60")
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)


def build_cluster() -> list[tuple[int, str]]:
    """1,000 nodes of 8 GPUs, one agent token each: [(node id, token)]."""
    from catalogue.models import GpuModel
    from scheduler.models import Cluster, Node
    from telemetry.services import node_token_issue

    model = GpuModel.objects.create(name="h100-80gb", memory_gib=80)
    cluster = Cluster.objects.create(name="bench", backend_kind="simulated")
    Node.objects.bulk_create(
        Node(
            cluster=cluster,
            name=f"gpu{i:04d}",
            gpu_model=model,
            gpu_count=GPUS,
            rack=f"r{i // 32}",
        )
        for i in range(NODES)
    )
    return [(n.pk, node_token_issue(node=n)[1]) for n in Node.objects.order_by("pk")]


def make_body(rng: random.Random, size: int, now: float) -> bytes:
    samples = []
    for k in range(size):
        gpu = k % GPUS
        util = round(rng.uniform(0, 100), 1)
        samples.append(
            {
                "gpu": gpu,
                "time": round(now - (size - k) // GPUS, 3),
                "utilization": util,
                "memory_used_mib": rng.randrange(0, 81559),
                "memory_total_mib": 81559,
                "temperature_c": 35 + int(util * 0.45),
                "power_w": round(70 + util * 6.3, 1),
                "throttle_thermal": False,
            }
        )
    return json.dumps(
        {"agent": {"version": "bench", "dropped": 0}, "samples": samples}, separators=(",", ":")
    ).encode()


def worker(args) -> tuple[int, list[float], float]:
    """One process: post batches for its nodes until the round's end; (samples, latencies s,
    wall s)."""
    server, name, mode, size, seconds, nodes, seed, start_at = args
    setup_django(server, name, migrate=False)
    from django.test import Client

    from scheduler.models import Node
    from telemetry.services import samples_ingest

    rng = random.Random(seed)
    now = time.time()
    bodies = [make_body(rng, size, now) for _ in range(8)]
    parsed = [json.loads(b) for b in bodies] if mode == "service" else None
    node_rows = {n.pk: n for n in Node.objects.filter(pk__in=[pk for pk, _ in nodes])}
    client = Client()
    headers = [{"HTTP_AUTHORIZATION": f"Bearer {token}"} for _, token in nodes]
    # Warm up (imports, URL resolver, connection) outside the timed window.
    if mode == "http":
        client.post(
            "/api/v1/telemetry/samples",
            data=bodies[0],
            content_type="application/json",
            **headers[0],
        )
    else:
        samples_ingest(node=node_rows[nodes[0][0]], body=parsed[0])
    while time.time() < start_at:
        time.sleep(0.005)
    t0 = time.perf_counter()
    end = t0 + seconds
    stored, latencies, i = 0, [], 0
    while time.perf_counter() < end:
        b = i % len(bodies)
        s = time.perf_counter()
        if mode == "http":
            response = client.post(
                "/api/v1/telemetry/samples",
                data=bodies[b],
                content_type="application/json",
                **headers[i % len(headers)],
            )
            if response.status_code != 202:
                raise SystemExit(f"ingest failed: {response.status_code} {response.content[:300]}")
        else:
            samples_ingest(node=node_rows[nodes[i % len(nodes)][0]], body=parsed[b])
        latencies.append(time.perf_counter() - s)
        stored += size
        i += 1
    return stored, latencies, time.perf_counter() - t0


def truncate() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE telemetry_gpusample")
        cursor.execute("VACUUM ANALYZE telemetry_gpusample")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--batches", default="40,400,2000")
    parser.add_argument("--modes", default="http,service")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    name = f"telemetry_bench_{os.getpid()}"
    create_database(args.server, name)
    results = []
    try:
        setup_django(args.server, name, migrate=True)
        from django.db import connection, connections

        tokens = build_cluster()
        connections.close_all()  # children open their own connections
        ctx = mp.get_context("fork")
        print(
            f"telemetry ingest, PostgreSQL {connection.cursor().connection.info.server_version}, "
            f"{args.procs} process(es), {args.rounds} rounds x {args.seconds:.0f} s, "
            f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()})"
        )
        connections.close_all()
        print(f"{'mode':8} {'batch':>6} {'samples/s':>11} {'p50 ms':>8} {'p95 ms':>8}  rounds")
        for mode in args.modes.split(","):
            for size in (int(b) for b in args.batches.split(",")):
                truncate()
                connections.close_all()
                rounds = []
                for r in range(args.rounds):
                    share = [tokens[p :: args.procs] for p in range(args.procs)]
                    start_at = time.time() + 8.0
                    jobs = [
                        (
                            args.server,
                            name,
                            mode,
                            size,
                            args.seconds,
                            share[p],
                            100 * r + p,
                            start_at,
                        )
                        for p in range(args.procs)
                    ]
                    with ctx.Pool(args.procs) as pool:
                        out = pool.map(worker, jobs)
                    stored = sum(o[0] for o in out)
                    wall = max(o[2] for o in out)
                    lat = [x for o in out for x in o[1]]
                    rounds.append((stored / wall, pct(lat, 0.5) * 1000, pct(lat, 0.95) * 1000))
                rate = statistics.median(r[0] for r in rounds)
                p50 = statistics.median(r[1] for r in rounds)
                p95 = statistics.median(r[2] for r in rounds)
                print(
                    f"{mode:8} {size:>6} {rate:>11,.0f} {p50:>8.1f} {p95:>8.1f}  "
                    + " ".join(f"{r[0]:,.0f}" for r in rounds)
                )
                results.append(
                    {
                        "mode": mode,
                        "batch": size,
                        "samples_per_s_median": round(rate),
                        "p50_ms_median": round(p50, 2),
                        "p95_ms_median": round(p95, 2),
                        "rounds_samples_per_s": [round(r[0]) for r in rounds],
                    }
                )
        from telemetry.models import GpuSample

        print(f"rows in the raw table after the last configuration: {GpuSample.objects.count():,}")
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:
            pass
        drop_database(args.server, name)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
