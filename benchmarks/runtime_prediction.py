"""Benchmark: how well the run-time model predicts, and what a prediction costs.

Usage:

    .venv/bin/python benchmarks/runtime_prediction.py [--history-days 60] [--traces DIR]
        [--clusters cluster01,...] [--export FILE ...]

Every job is predicted the way the loop would have predicted it: when it was submitted, by a model
that had learned only the jobs finished before then (jobs taken in submission order; each one
first teaches the model every job that finished before its submission). Compared against:
- the user's runtime limit (what the engine plans with today when there is one);
- a per-user median: the median run time of the user's last 64 finished jobs (of the team's
  where the user has fewer than 3, of all jobs before that);
- the simulator's hand-written per-(team, GPU count) median of recent jobs
  (``scheduler.simulation.gpuplatform_policy.RuntimePredictor``);
- the model as first landed (``RuntimeModel(history=False)``: one-hots only, no group median).

Data: the demo's history (``demo.history.seed_history`` into a scratch SQLite database, read back
with ``scheduler.runtime_prediction.finished_history``: the live code path); any
``manage.py export_trace`` file given with ``--export`` (users, names, images and limits as
exported); and the public traces (Microsoft ITP, Alibaba openb), which record neither names,
users, images nor limits: there the model sees only the GPU count (and openb's allowed GPU models)
and the simulator's hash-assigned tenant.
"""

from __future__ import annotations

import argparse
import heapq
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.prediction import JobDescription, RuntimeModel, accuracy  # noqa: E402
from scheduler.simulation.gpuplatform_policy import RuntimePredictor  # noqa: E402
from scheduler.simulation.history import load_history  # noqa: E402
from scheduler.simulation.traces import default_traces_dir, load_itp, load_openb  # noqa: E402


class UserMedian:
    """The median of the user's last ``window`` run times; the team's, then everyone's, while
    the user (or a trace without users) has fewer than ``min_samples``."""

    def __init__(self, window: int = 64, min_samples: int = 3) -> None:
        self.window = window
        self.min_samples = min_samples
        self.runs: dict[tuple[str, str], deque[float]] = {}

    def observe(self, d: JobDescription, run_s: float) -> None:
        for key in (("user", d.user), ("team", d.team), ("all", "")):
            if key[1] or key[0] == "all":
                self.runs.setdefault(key, deque(maxlen=self.window)).append(run_s)

    def estimate(self, d: JobDescription) -> float | None:
        for key in (("user", d.user), ("team", d.team), ("all", "")):
            runs = self.runs.get(key)
            if runs and (len(runs) >= self.min_samples or key[0] == "all"):
                return statistics.median(runs)
        return None


def prequential(jobs: list[tuple[float, float, JobDescription, float]]) -> dict[str, list]:
    """``jobs`` as (submit s, finish s, description, run s), sorted by submission. Returns each
    method's predictions for the jobs every method could predict (the models had learned
    ``min_samples`` jobs by then).

    Jobs submitted with no finish between them see the same models, so they are predicted in
    one call (as the loop predicts a snapshot's jobs): the same numbers as one call per job."""
    model, onehot = RuntimeModel(), RuntimeModel(history=False)
    team_median, user_median = RuntimePredictor(), UserMedian()
    finished: list[tuple[float, int]] = []
    out: dict[str, list] = {
        k: [] for k in ("actual", "model", "onehot", "user_median", "team_median", "idx")
    }
    waiting: list[int] = []  # submitted since the last learning, not yet predicted

    def predict() -> None:
        descs = [jobs[i][2] for i in waiting]
        preds = {
            "model": model.predict_s(descs),
            "onehot": onehot.predict_s(descs),
            "user_median": [user_median.estimate(d) for d in descs],
            "team_median": [
                team_median.estimate(d.team, d.workers * d.gpus_per_worker) for d in descs
            ],
        }
        for k, i in enumerate(waiting):
            if any(p[k] is None for p in preds.values()):
                continue
            out["actual"].append(jobs[i][3])
            for name, p in preds.items():
                out[name].append(p[k])
            out["idx"].append(i)
        waiting.clear()

    for i, (submit, finish, _desc, _run_s) in enumerate(jobs):
        batch = []
        while finished and finished[0][0] <= submit:
            batch.append(heapq.heappop(finished)[1])
        if batch:
            predict()
            descs, runs = [jobs[b][2] for b in batch], [jobs[b][3] for b in batch]
            model.learn(descs, runs)
            onehot.learn(descs, runs)
            for d, r in zip(descs, runs, strict=True):
                team_median.observe(d.team, d.workers * d.gpus_per_worker, r)
                user_median.observe(d, r)
        heapq.heappush(finished, (finish, i))
        waiting.append(i)
    predict()
    return out


LABELS = (
    ("model", "model (group-median base + one-hots)"),
    ("onehot", "model before (one-hots only)"),
    ("user_median", "per-user median"),
    ("team_median", "per-team/GPU median"),
)


def evaluate(name: str, jobs: list, limits: dict[int, float] | None = None) -> list[dict]:
    """Print and return one row per method. ``limits`` maps a job's index in ``jobs`` sorted by
    submission to its runtime limit."""
    jobs = sorted(jobs, key=lambda j: j[0])
    r = prequential(jobs)
    rows = [(label, r[key]) for key, label in LABELS]
    if limits is not None:
        rows.append(("user's runtime limit", [limits[i] for i in r["idx"]]))
    print(f"\n{name}: {len(jobs)} jobs, {len(r['actual'])} predicted")
    print("| method | median abs error (h) | median ratio | within 2x |")
    print("|---|---|---|---|")
    out = []
    for label, pred in rows:
        a = accuracy(pred, r["actual"])
        print(
            f"| {label} | {a['median_abs_error_s'] / 3600:.2f} | {a['median_ratio']:.2f} "
            f"| {a['within_2x']:.0%} |"
        )
        out.append({"data": name, "method": label, **a})
    sys.stdout.flush()
    return out


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
    ordered = sorted(rows, key=lambda r: meta[r[0][1]][0])
    jobs = [(meta[pk][0], at.timestamp(), desc, run_s) for (at, pk), desc, run_s in ordered]
    limits = {i: float(meta[pk][1]) for i, ((_, pk), _, _) in enumerate(ordered)}
    return jobs, limits


def trace_jobs(trace) -> tuple[list, dict[int, float] | None]:
    """A loaded trace's jobs (sorted by submission, as every loader returns them) with what the
    trace knows of each, and the limits when every job has one."""
    jobs = [
        (
            j.submit,
            j.submit + j.duration,
            JobDescription(
                team=j.tenant,
                user=j.user,
                name=j.name,
                image=j.image,
                workers=j.gpus // (j.gpus_per_worker or j.gpus),
                gpus_per_worker=j.gpus_per_worker or j.gpus,
                gpu_model=j.models[0] if j.models else None,
                priority_class=j.priority_class,
            ),
            j.duration,
        )
        for j in trace
    ]
    limits = None
    if trace and all(j.runtime_limit_s for j in trace):
        limits = {i: float(j.runtime_limit_s) for i, j in enumerate(trace)}
    return jobs, limits


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
    parser.add_argument(
        "--clusters",
        default=",".join(f"cluster{k:02d}" for k in range(1, 11)),
        help="ITP clusters to evaluate (comma-separated; empty for none)",
    )
    parser.add_argument("--openb", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--export", type=Path, nargs="*", default=[], help="export_trace files")
    args = parser.parse_args()
    cost()
    if args.history_days > 0:
        jobs, limits = demo_history(args.history_days)
        evaluate(f"demo history ({args.history_days} days)", jobs, limits)
    for path in args.export:
        evaluate(f"export {path.name}", *trace_jobs(load_history(path).jobs))
    itp = args.traces / "microsoft-itp-elasticflow"
    for cluster in filter(None, args.clusters.split(",")):
        evaluate(f"ITP {cluster}", *trace_jobs(load_itp(itp / f"{cluster}.csv")))
    if args.openb:
        openb = args.traces / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv"
        evaluate("openb default", *trace_jobs(load_openb(openb)))


if __name__ == "__main__":
    main()
