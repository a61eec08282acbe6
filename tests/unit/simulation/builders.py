"""Tiny hand-made traces for the simulator's unit tests."""

from __future__ import annotations

from scheduler.simulation import SimConfig, Simulator, uniform_cluster
from scheduler.simulation.runner import make_policy
from scheduler.simulation.traces import TraceJob

EXACT = SimConfig(checkpoint_interval_s=None, restart_overhead_s=0.0)


def job(id: str, submit: float, duration: float, gpus: int = 1, tenant: str = "a") -> TraceJob:
    """A trace job with terse defaults."""
    return TraceJob(id, float(submit), float(duration), gpus, tenant)


def run(jobs, policy, nodes=1, gpus_per_node=4, config=EXACT) -> Simulator:
    """Replay `jobs` to the end on a uniform cluster and return the finished simulator."""
    pol = make_policy(policy) if isinstance(policy, str) else policy
    return Simulator(jobs, uniform_cluster(nodes, gpus_per_node), pol, config).run()


def starts(sim: Simulator) -> dict[str, float]:
    """First start time of each job by id."""
    return {j.id: j.first_start for j in sim.jobs}
