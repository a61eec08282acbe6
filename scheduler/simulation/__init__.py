"""Trace-driven, discrete-event GPU cluster simulator (pure Python).

It replays job traces (Microsoft ITP, Alibaba openb, synthetic) on a cluster spec under a policy:
the baselines in `baselines` or our engine (`scheduler.policy`) through the same
snapshot -> decide -> apply path the live loop uses (`gpuplatform_policy`). No Django, no clock
reads in the core (wall time is injected by the CLI), deterministic under a seed.
"""

from .cluster import ClusterSpec, NodeSpec, load_openb_nodes, parse_cluster, uniform_cluster
from .metrics import METRIC_KEYS, compute_metrics
from .runner import POLICIES, make_policy, simulate
from .simulator import SimConfig, SimJob, SimulationError, Simulator
from .traces import TraceJob, generate_synthetic, load_itp, load_openb, load_trace

__all__ = [
    "METRIC_KEYS",
    "POLICIES",
    "ClusterSpec",
    "NodeSpec",
    "SimConfig",
    "SimJob",
    "SimulationError",
    "Simulator",
    "TraceJob",
    "compute_metrics",
    "generate_synthetic",
    "load_itp",
    "load_openb",
    "load_openb_nodes",
    "load_trace",
    "make_policy",
    "parse_cluster",
    "simulate",
    "uniform_cluster",
]
