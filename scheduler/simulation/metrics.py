"""Metrics of a finished simulation, as a JSON-ready dict.

Definitions (all times in seconds):
- JCT = finish - submit; queue = total time spent pending (every pending interval, so a
  preempted job's waits count too; for non-preemptive runs it is first start - submit).
- Percentiles use the nearest-rank method on the sorted values.
- `makespan_s` = last finish - first submit.
- `gpu_utilization` = busy GPU-seconds / (cluster GPUs x makespan); busy includes work later lost.
  (Extra: `gpu_utilization_window`, the same over first to last submission, the reference
  simulator's definition.)
- `idle_while_pending_frac` = time integral of the GPUs idle (on ready nodes) while some pending
  job would fit in that many GPUs of its allowed models, divided by cluster GPUs x makespan:
  capacity left unused because of fragmentation or holding back.
- `lost_gpu_hours`: work thrown away by preemptions and failures (run time since the last
  checkpoint) plus restart overheads.
- `jain_fairness`: Jain's index over tenants of each tenant's mean (service time / JCT), 1.0 =
  every tenant's jobs are slowed down alike.
- `wall_s`, `decide_calls`, `decide_p50_ms`: cost of the replay and of the policy calls
  (wall-clock values are 0 when no timer was injected).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from .simulator import Simulator

METRIC_KEYS = (
    "jobs",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "p95_queue_s",
    "max_queue_s",
    "makespan_s",
    "gpu_utilization",
    "idle_while_pending_frac",
    "preemptions",
    "lost_gpu_hours",
    "jain_fairness",
    "wall_s",
    "decide_calls",
    "decide_p50_ms",
)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile `p` (0..100) of already sorted values; 0.0 for no values."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def jain(values: list[float]) -> float:
    """Jain's fairness index of non-negative values (1.0 for an empty or all-zero list)."""
    total = sum(values)
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return 1.0
    return total * total / (len(values) * squares)


def compute_metrics(sim: Simulator) -> dict[str, Any]:
    """The metric dict (keys `METRIC_KEYS` first, then a few extra diagnostics) of a finished
    simulation."""
    jobs = sim.jobs
    jct = sorted(j.finish_s() - j.submit for j in jobs)
    queue = sorted(j.queue_s for j in jobs)
    n = len(jobs)
    makespan = (max(j.finish_s() for j in jobs) - jobs[0].submit) if jobs else 0.0
    capacity = sim.total_gpus * makespan
    per_tenant: dict[str, list[float]] = defaultdict(list)
    for j in jobs:
        span = j.finish_s() - j.submit
        per_tenant[j.tenant].append(j.duration / span if span > 0 else 1.0)
    tenant_means = [sum(v) / len(v) for _, v in sorted(per_tenant.items())]
    times = sorted(sim.decide_times)
    due = [(j, j.deadline) for j in jobs if j.deadline is not None]
    # A job not finished by its deadline missed it, whether it was running or still waiting then
    # (every job finishes in a replay; one that did not would count as a miss too).
    hits = sum(1 for j, deadline in due if j.finish is not None and j.finish <= deadline)
    missed_waiting = sum(
        1 for j, deadline in due if j.first_start is None or j.first_start > deadline
    )
    window = sim.window_end - jobs[0].submit if jobs else 0.0
    return {
        "jobs": n,
        "avg_jct_s": round(sum(jct) / n, 3) if n else 0.0,
        "p50_jct_s": percentile(jct, 50),
        "p95_jct_s": percentile(jct, 95),
        "p99_jct_s": percentile(jct, 99),
        "avg_queue_s": round(sum(queue) / n, 3) if n else 0.0,
        "p95_queue_s": round(percentile(queue, 95), 3),
        "max_queue_s": round(queue[-1], 3) if queue else 0.0,
        "makespan_s": makespan,
        "gpu_utilization": round(sim.busy_gpu_s / capacity, 6) if capacity else 0.0,
        "idle_while_pending_frac": round(sim.idle_pending_gpu_s / capacity, 6) if capacity else 0.0,
        "preemptions": sim.preemptions,
        "lost_gpu_hours": round(sim.lost_gpu_s / 3600.0, 3),
        "jain_fairness": round(jain(tenant_means), 6),
        "wall_s": round(sim.wall_s, 3),
        "decide_calls": sim.decide_calls,
        "decide_p50_ms": round(percentile(times, 50) * 1000.0, 4),
        # diagnostics beyond the required keys
        "policy": sim.policy.name,
        "cluster": sim.cluster.name,
        "cluster_gpus": sim.total_gpus,
        "gpu_utilization_window": (
            round(sim.busy_window_gpu_s / (sim.total_gpus * window), 6) if window > 0 else 0.0
        ),
        "decide_p99_ms": round(percentile(times, 99) * 1000.0, 4),
        "interruptions": sim.interruptions,
        "node_failures": sim.node_failures,
        "spot_interruptions": sim.spot_interruptions,
        "quarantines": sim.quarantines,
        "start_conflicts": sim.start_conflicts,
        "work_gpu_hours": round(sum(j.gpus * j.duration for j in jobs) / 3600.0, 3),
        "busy_gpu_hours": round(sim.busy_gpu_s / 3600.0, 3),
        # jobs of the trace with a deadline, and the share of them finished by it
        "deadline_jobs": len(due),
        "deadline_hit_rate": round(hits / len(due), 6) if due else None,
        # of the misses, the deadlines that passed before the job had started at all
        "deadline_missed_waiting": missed_waiting,
    }
