"""Policy registry and the one-call `simulate()` used by the CLI, benchmarks and tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .baselines import BASELINES
from .cluster import ClusterSpec
from .metrics import compute_metrics
from .simulator import Policy, SimConfig, Simulator
from .traces import TraceJob

POLICIES = ("fifo", "fifo-backfill", "sjf", "tiresias", "gpuplatform")
# Extra, clearly-labelled variants (not in the default comparison): the engine with its
# least-attained-service queues switched off (the default before they existed), the engine
# with one EASY reservation per GPU model (the default before it was four), and the
# tail-latency setting: the three Tiresias thresholds, and jobs that have run two days in the
# last of them wait for the others (``las.long_run_s``; with three queues the last one alone is
# served in submission order, as the flat ``las_fifo_from_gpu_s`` of 360,000 GPU-s meant).
VARIANTS = ("gpuplatform-nolas", "gpuplatform-res1", "gpuplatform-tail")
# The engine configuration each labelled variant changes (as JSON: ``config_from_dict``).
VARIANT_FIELDS: dict[str, dict[str, Any]] = {
    "gpuplatform-nolas": {"las": None},
    "gpuplatform-res1": {"reservations_per_model": 1},
    "gpuplatform-tail": {
        "las": {
            "thresholds_gpu_s": [3600.0, 36000.0, 360000.0],
            "long_run_s": 172800.0,
            "bottom_fifo_queues": 1,
        },
    },
}


def make_policy(name: str) -> Policy:
    """A fresh policy object by name (see `POLICIES`). Raises ValueError for an unknown name."""
    if name in BASELINES:
        return BASELINES[name]()
    if name == "gpuplatform":
        # imported lazily: the baselines must work without the engine package
        from .gpuplatform_policy import GpuPlatformPolicy

        return GpuPlatformPolicy()
    if name in VARIANTS:
        return engine_variant(name, VARIANT_FIELDS[name])
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICIES + VARIANTS)}")


def engine_variant(
    name: str, fields: dict[str, Any], *, teams: Mapping[str, Mapping[str, Any]] | None = None
) -> Policy:
    """The engine with ``fields`` changed (JSON as ``SCHEDULER_POLICY`` takes them), reporting
    itself as ``name``; ``teams`` as ``GpuPlatformPolicy`` takes them (quotas). Raises
    SnapshotError naming a bad field."""
    from scheduler.policy import config_from_dict

    from .gpuplatform_policy import GpuPlatformPolicy

    return GpuPlatformPolicy(config_from_dict(fields), name=name, teams=teams)


def simulate(
    trace: Iterable[TraceJob],
    cluster: ClusterSpec,
    policy: str | Policy,
    config: SimConfig | None = None,
    *,
    timer: Callable[[], float] | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[dict[str, Any], Simulator]:
    """Run one replay to the end; returns (metrics dict, the finished simulator)."""
    pol = make_policy(policy) if isinstance(policy, str) else policy
    sim = Simulator(trace, cluster, pol, config, timer=timer, progress=progress).run()
    return compute_metrics(sim), sim
