"""Benchmark: how well the run-time model predicts, and what a prediction costs.

Usage:

    .venv/bin/python benchmarks/runtime_prediction.py [--history-days 60] [--traces DIR]

Every job is predicted the way the loop would have predicted it: when it was submitted, by a model
that had learned only the jobs finished before then (jobs taken in submission order; each one
first teaches the model every job that finished before its submission). Compared against:
- the user's runtime limit (what the engine plans with today when there is one);
- the simulator's hand-written per-(team, GPU count) median of recent jobs
  (``scheduler.simulation.gpuplatform_policy.RuntimePredictor``).

Data: the demo's history (``demo.history.seed_history`` into a scratch SQLite database, read back
with ``scheduler.runtime_prediction.finished_history``: the live code path), and the public traces
(Microsoft ITP, Alibaba openb), which have neither names, users, images nor limits: there the
model sees only the GPU count and the simulator's hash-assigned tenant.
"""

from __future__ import annotations

import argparse
import heapq
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.prediction import JobDescription, RuntimeModel, accuracy  # noqa: E402
from scheduler.simulation.gpuplatform_policy import RuntimePredictor  # noqa: E402
from scheduler.simulation.traces import default_traces_dir, load_itp, load_openb  # noqa: E402


def prequential(jobs: list[tuple[float, float, JobDescription, float]]) -> dict[str, list]:
    """``jobs`` as (submit s, finish s, description, run s). Returns predictions per method for
    the jobs the model could predict (it had learned ``min_samples`` jobs by then)."""
    model = RuntimeModel()
    median = RuntimePredictor()
    finished: list[tuple[float, int]] = []
    out: dict[str, list] = {"actual": [], "model": [], "median": [], "idx": []}
    for i, (submit, finish, desc, _run) in enumerate(sorted(jobs, key=lambda j: j[0])):
        batch = []
        while finished and finished[0][0] <= submit:
            batch.append(heapq.heappop(finished)[1])
        if batch:
            model.learn([jobs_sorted[b][2] for b in batch], [jobs_sorted[b][3] for b in batch])
            for b in batch:
                d = jobs_sorted[b][2]
                median.observe(d.team, d.workers * d.gpus_per_worker, jobs_sorted[b][3])
        heapq.heappush(finished, (finish, i))
        (pred,) = model.predict_s([desc])
        med = median.estimate(desc.team, desc.workers * desc.gpus_per_worker)
        if pred is None or med is None:
            continue
        out["actual"].append(jobs_sorted[i][3])
        out["model"].append(pred)
        out["median"].append(med)
        out["idx"].append(i)
    return out


jobs_sorted: list = []


def evaluate(name: str, jobs: list, limits: dict[int, float] | None = None) -> None:
    global jobs_sorted
    jobs_sorted = sorted(jobs, key=lambda j: j[0])
    r = prequential(jobs_sorted)
    rows = [("model (scikit-learn SGD)", r["model"]), ("per-team/GPU median", r["median"])]
    if limits is not None:
        rows.append(("user's runtime limit", [limits[i] for i in r["idx"]]))
    print(f"\n{name}: {len(jobs)} jobs, {len(r['actual'])} predicted")
    print("| method | median abs error (h) | median ratio | within 2x |")
    print("|---|---|---|---|")
    for label, pred in rows:
        a = accuracy(pred, r["actual"])
        print(
            f"| {label} | {a['median_abs_error_s'] / 3600:.2f} | {a['median_ratio']:.2f} "
            f"| {a['within_2x']:.0%} |"
        )


def demo_history(days: int) -> tuple[list, dict[int, float]]:
    scratch = tempfile.mkdtemp(prefix="gpuplatform-bench-predict-")
    os.environ.update(
        DJANGO_SETTINGS_MODULE="gpuplatform.settings",
        DATABASE_URL=f"sqlite:///{scratch}/db.sqlite3",
        LOG_LEVEL="WARNING",
    )
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from demo.seed import seed
    from scheduler.models import Job
    from scheduler.runtime_prediction import finished_history

    seed(jobs=0, history_days=days)
    rows = finished_history(limit=10**7)
    meta = {
        pk: (sub.timestamp(), lim)
        for pk, sub, lim in Job.objects.values_list("id", "submitted_at", "runtime_limit_s")
    }
    jobs, limits = [], {}
    for (finished_at, pk), desc, run_s in sorted(rows, key=lambda r: meta[r[0][1]][0]):
        limits[len(jobs)] = float(meta[pk][1])
        jobs.append((meta[pk][0], finished_at.timestamp(), desc, run_s))
    return jobs, limits


def trace_jobs(trace) -> list:
    return [
        (
            j.submit,
            j.submit + j.duration,
            JobDescription(team=j.tenant, workers=1, gpus_per_worker=j.gpus),
            j.duration,
        )
        for j in trace
    ]


def cost() -> None:
    model = RuntimeModel()
    descs = [
        JobDescription(
            team=f"t{i % 7}",
            user=f"u{i % 13}",
            name=f"exp{i % 5}-run{i}",
            image="pytorch:24.05",
            workers=1 + i % 2,
            gpus_per_worker=8,
        )
        for i in range(5000)
    ]
    t0 = time.perf_counter()
    for k in range(0, 5000, 50):
        model.learn(descs[k : k + 50], [600.0 * (1 + k % 9)] * 50)
    learn_s = time.perf_counter() - t0
    single = []
    for d in descs[:500]:
        t = time.perf_counter()
        model.predict_s([d])
        single.append(time.perf_counter() - t)
    t = time.perf_counter()
    model.predict_s(descs[:1000])
    batch_s = time.perf_counter() - t
    print("\ncost (one process, this machine):")
    print(f"- learn: {learn_s / 5000 * 1e6:.0f} µs per finished job (batches of 50)")
    print(
        f"- predict one job: median {statistics.median(single) * 1e3:.2f} ms, "
        f"p95 {sorted(single)[474] * 1e3:.2f} ms"
    )
    print(f"- predict 1,000 jobs in one call: {batch_s * 1e3:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history-days", type=int, default=60)
    parser.add_argument("--traces", type=Path, default=default_traces_dir())
    args = parser.parse_args()
    cost()
    if args.history_days > 0:
        jobs, limits = demo_history(args.history_days)
        evaluate(f"demo history ({args.history_days} days)", jobs, limits)
    itp = args.traces / "microsoft-itp-elasticflow"
    for cluster in ("cluster04", "cluster07", "cluster09"):
        evaluate(f"ITP {cluster}", trace_jobs(load_itp(itp / f"{cluster}.csv")))
    openb = args.traces / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv"
    evaluate("openb default", trace_jobs(load_openb(openb)))


if __name__ == "__main__":
    main()
