"""Replays over several clusters with prices and data (routing, rule 3b of docs/policy.md).

A :class:`MultiClusterSpec` describes sites (a cluster each: region, interconnect, nodes of one
GPU model, some of them spot, prices per GPU-hour, the datasets it holds with their egress
price) plus datasets (size, residency) and teams restricted to clusters. It builds one
simulator :class:`~scheduler.simulation.cluster.ClusterSpec` (node names ``site-NNN``, one
fabric per site) and annotates trace jobs deterministically from ``(seed, job id)``: a dataset
(or none) and whether the job refuses spot. Public traces carry neither, so this annotation is
synthetic and stated as such wherever its numbers are reported.

:class:`RoutedPolicy` is the ``gpuplatform`` adapter with the clusters, datasets, teams' clusters
and job constraints added to every snapshot (``pooled=True``: none of them, the engine before
routing, whose nodes form one pool per GPU model). Its :class:`CostLedger` charges every run
segment its nodes' price for the segment's wall time (lost work and grace included), every
start on a cluster that does not hold the job's dataset the cheapest egress, and counts the
starts that break a constraint (``routing.start_violations``, residency separately).

Limits: GPU models run every job at the same speed (an A100 is not slower than an H100 here);
spot nodes are interrupted only if ``SimConfig.spot_mtbi_s`` is set, independently of
``spot_interruption_rate``, which only prices them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.policy import (
    Cluster,
    Config,
    Dataset,
    Decisions,
    JobRouting,
    Node,
    PendingJob,
    Snapshot,
    Start,
    Team,
    start_violations,
)

from .cluster import ClusterSpec, NodeSpec
from .gpuplatform_policy import GpuPlatformPolicy
from .simulator import SimConfig, SimJob, Simulator
from .trace_job import TraceJob


@dataclass(frozen=True, slots=True)
class Site:
    """One cluster: ``nodes`` nodes of ``gpus_per_node`` GPUs, the last ``spot_nodes`` spot."""

    name: str
    region: str
    interconnect: str
    gpu_model: str
    nodes: int
    gpus_per_node: int = 8
    spot_nodes: int = 0
    prices: Mapping[str, float] = field(default_factory=dict)  # on_demand / spot -> per GPU-h
    datasets: Mapping[str, float] = field(default_factory=dict)  # held -> egress per GB
    spot_interruption_rate: float = 0.0

    def cluster(self) -> Cluster:
        return Cluster(
            name=self.name,
            region=self.region,
            interconnect=self.interconnect,
            prices={self.gpu_model: dict(self.prices)},
            datasets=dict(self.datasets),
            spot_interruption_rate=self.spot_interruption_rate,
        )


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A dataset ``share`` of the jobs read: its size and residency (``None``: anywhere)."""

    name: str
    size_gb: float
    share: float
    regions: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class MultiClusterSpec:
    """Sites, datasets and constraints of a multi-cluster replay (see the module docstring)."""

    sites: tuple[Site, ...]
    datasets: tuple[DatasetSpec, ...] = ()
    team_clusters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    no_spot_share: float = 0.0  # jobs that refuse spot (routing.spot = false)
    seed: int = 0

    def cluster_spec(self) -> ClusterSpec:
        nodes = []
        for s in self.sites:
            for i in range(s.nodes):
                name = f"{s.name}-{i:03d}"
                nodes.append(
                    NodeSpec(
                        name=name,
                        gpu_model=s.gpu_model,
                        gpus=s.gpus_per_node,
                        zone=s.region,
                        rack=f"{s.name}-r{i // 16}",
                        nvlink_domain=name,
                        fabric=s.name,
                        spot=i >= s.nodes - s.spot_nodes,
                    )
                )
        total = sum(s.nodes for s in self.sites)
        return ClusterSpec(tuple(nodes), name=f"{len(self.sites)} clusters, {total} nodes")

    def clusters(self) -> tuple[Cluster, ...]:
        return tuple(s.cluster() for s in self.sites)

    def residency(self) -> tuple[Dataset, ...]:
        return tuple(Dataset(d.name, d.regions) for d in self.datasets if d.regions is not None)

    def node_clusters(self) -> list[str]:
        """The site of each node of :meth:`cluster_spec`, by node index."""
        return [s.name for s in self.sites for _ in range(s.nodes)]

    def annotate(self, job_id: str) -> tuple[str | None, float | None, JobRouting | None]:
        """The job's dataset, its size and its routing constraints, from ``(seed, job id)``."""
        digest = hashlib.blake2b(f"{self.seed}:{job_id}".encode(), digest_size=8).digest()
        u = int.from_bytes(digest[:4], "big") / 2**32
        v = int.from_bytes(digest[4:], "big") / 2**32
        dataset = None
        size = None
        acc = 0.0
        for d in self.datasets:
            acc += d.share
            if u < acc:
                dataset, size = d.name, d.size_gb
                break
        routing = JobRouting(spot=False) if v < self.no_spot_share else None
        return dataset, size, routing

    def teams(self) -> tuple[Team, ...]:
        return tuple(Team(name=t, clusters=tuple(c)) for t, c in self.team_clusters.items())


def three_clusters(scale: int = 1) -> MultiClusterSpec:
    """The issue's example: on-premises 32 x 8 H100; a cloud of 64 x 8 A100, half of them spot;
    a second cloud of 16 x 8 H100 (half spot) with other prices, other data and Ethernet between
    nodes. Prices per GPU-hour (on-prem amortised). ``scale`` divides every node count."""
    return MultiClusterSpec(
        sites=(
            Site(
                "onprem",
                "eu-west",
                "infiniband",
                "h100",
                32 // scale,
                prices={"on_demand": 1.90},
                datasets={"web-eu": 0.02, "code": 0.02},
            ),
            Site(
                "cloud-a",
                "us-east",
                "infiniband",
                "a100",
                64 // scale,
                spot_nodes=32 // scale,
                prices={"on_demand": 3.40, "spot": 1.20},
                datasets={"code": 0.09},
                spot_interruption_rate=0.10,
            ),
            Site(
                "cloud-b",
                "eu-central",
                "ethernet",
                "h100",
                16 // scale,
                spot_nodes=8 // scale,
                prices={"on_demand": 4.10, "spot": 1.60},
                datasets={"images": 0.08},
                spot_interruption_rate=0.05,
            ),
        ),
        datasets=(
            # personal data: may not leave the EU
            DatasetSpec("web-eu", 3000.0, 0.25, ("eu-west", "eu-central")),
            DatasetSpec("code", 400.0, 0.25),
            DatasetSpec("images", 1500.0, 0.20),
        ),
        # an EU-only team
        team_clusters={"team-d": ("onprem", "cloud-b")},
        no_spot_share=0.2,
    )


class CostLedger:
    """What a replay spent: GPU cost per cluster (price x GPUs x wall seconds of every run
    segment), egress, and the starts that broke a routing constraint."""

    def __init__(self, spec: MultiClusterSpec) -> None:
        self.spec = spec
        cspec = spec.cluster_spec()
        sites = {s.name: s for s in spec.sites}
        self.node_site = spec.node_clusters()
        # price per GPU-second of each node
        self.rate = [
            sites[self.node_site[i]].prices["spot" if n.spot else "on_demand"] / 3600.0
            for i, n in enumerate(cspec.nodes)
        ]
        self.gpu_cost: dict[str, float] = dict.fromkeys(sites, 0.0)
        self.egress_cost = 0.0
        self.egress_gb = 0.0
        self.starts = 0
        self.violations = 0
        self.residency_violations = 0
        self.split_gangs = 0
        self._open: dict[int, tuple[float, dict[str, float]]] = {}  # job -> (executed_s, rates)
        # the routed view of the cluster that start_violations reads (static: free GPUs unused)
        self._nodes = tuple(
            Node(n.name, n.gpu_model, n.gpus, (), spot=n.spot, cluster=self.node_site[i])
            for i, n in enumerate(cspec.nodes)
        )
        self._clusters = spec.clusters()
        self._datasets = spec.residency()
        self._teams = spec.teams()
        self._holders = {
            d.name: [s.datasets[d.name] for s in spec.sites if d.name in s.datasets]
            for d in spec.datasets
        }

    def _close(self, job: SimJob) -> None:
        seg = self._open.pop(job.idx, None)
        if seg is not None:
            seconds = job.executed_s - seg[0]
            for site, rate in seg[1].items():
                self.gpu_cost[site] += rate * seconds

    def on_start(self, job: SimJob, pj: PendingJob, now: float) -> None:
        """``job`` (as the engine saw it: ``pj``) has just started on ``job.placement``."""
        self._close(job)
        rates: dict[str, float] = {}
        for n, gpus in job.placement.items():
            site = self.node_site[n]
            rates[site] = rates.get(site, 0.0) + self.rate[n] * len(gpus)
        self._open[job.idx] = (job.executed_s, rates)
        self.starts += 1
        sites = set(rates)
        if len(sites) > 1:
            self.split_gangs += 1
        if pj.dataset and pj.dataset_size_gb:
            held = [s for s in self.spec.sites if pj.dataset in s.datasets]
            if held and not any(s.name in sites for s in held):
                self.egress_gb += pj.dataset_size_gb
                self.egress_cost += pj.dataset_size_gb * min(self._holders[pj.dataset])
        snap = Snapshot(
            now=now,
            teams=self._teams,
            nodes=self._nodes,
            pending=(pj,),
            clusters=self._clusters,
            datasets=self._datasets,
        )
        names = {self._nodes[n].name: tuple(g) for n, g in job.placement.items()}
        broken = start_violations(snap, Start(pj.id, names))
        if broken:
            self.violations += 1
            if any("residency" in b for b in broken):
                self.residency_violations += 1

    def finish(self, sim: Simulator) -> None:
        """Close every segment (call once, after the replay)."""
        for job in sim.jobs:
            self._close(job)

    def report(self) -> dict[str, Any]:
        gpu = sum(self.gpu_cost.values())
        return {
            "gpu_cost": gpu,
            "egress_cost": self.egress_cost,
            "total_cost": gpu + self.egress_cost,
            "egress_gb": self.egress_gb,
            "gpu_cost_by_cluster": dict(self.gpu_cost),
            "starts": self.starts,
            "violating_starts": self.violations,
            "residency_violations": self.residency_violations,
            "gangs_split_across_clusters": self.split_gangs,
        }


class RoutedPolicy(GpuPlatformPolicy):
    """``gpuplatform`` over a :class:`MultiClusterSpec` (see the module docstring)."""

    def __init__(
        self,
        spec: MultiClusterSpec,
        config: Config | None = None,
        *,
        name: str,
        pooled: bool = False,
    ) -> None:
        super().__init__(config, name=name)
        self.spec = spec
        self.pooled = pooled
        self.ledger = CostLedger(spec)
        self._node_site = spec.node_clusters()
        self._clusters = spec.clusters()
        self._residency = spec.residency()
        self._team_clusters = {t.name: t.clusters for t in spec.teams()}
        self._annotated: dict[int, tuple[PendingJob, PendingJob]] = {}

    def _sync_nodes(self, sim: Simulator) -> None:
        changed = list(sim.changed_nodes)
        super()._sync_nodes(sim)
        if not self.pooled:
            for i in changed:
                self._nodes[i] = replace(self._nodes[i], cluster=self._node_site[i])

    def _pending_job(self, job: SimJob, now: float) -> PendingJob:
        # The annotated job is rebuilt only when the adapter rebuilt the plain one, so the
        # engine sees the same object while nothing changed (its memos go by identity).
        base = super()._pending_job(job, now)
        cached = self._annotated.get(job.idx)
        if cached is not None and cached[0] is base:
            return cached[1]
        dataset, size, routing = self.spec.annotate(job.id)
        pj = replace(base, dataset=dataset, dataset_size_gb=size, routing=routing)
        self._annotated[job.idx] = (base, pj)
        return pj

    def snapshot(self, sim: Simulator, now: float) -> Snapshot:
        s = super().snapshot(sim, now)
        if len(self._annotated) > len(sim.pending):
            for idx in [i for i in self._annotated if i not in sim.pending]:
                del self._annotated[idx]
        teams = tuple(
            replace(t, clusters=self._team_clusters.get(t.name)) if not self.pooled else t
            for t in s.teams
        )
        if self.pooled:
            return s
        return replace(s, teams=teams, clusters=self._clusters, datasets=self._residency)

    def apply(self, sim: Simulator, now: float, decisions: Decisions) -> None:
        by_id = sim.by_id
        before = {s.job: by_id[s.job].run_id for s in decisions.start}
        super().apply(sim, now, decisions)
        for s in decisions.start:
            job = by_id[s.job]
            if job.state == "running" and job.run_id != before[s.job]:
                cached = self._annotated.get(job.idx)
                pj = cached[1] if cached is not None else self._pending_job(job, now)
                self.ledger.on_start(job, pj, now)


def replay_policies(
    trace: Sequence[TraceJob],
    spec: MultiClusterSpec,
    policies: Mapping[str, tuple[Config, bool]],
    sim_config: SimConfig | None = None,
) -> dict[str, dict[str, Any]]:
    """Replay ``trace`` on ``spec`` under each named ``(engine config, pooled)``; per policy the
    simulator's metrics plus the ledger's report."""
    from .metrics import compute_metrics

    out = {}
    cluster = spec.cluster_spec()
    for name, (config, pooled) in policies.items():
        policy = RoutedPolicy(spec, config, name=name, pooled=pooled)
        sim = Simulator(trace, cluster, policy, sim_config).run()
        policy.ledger.finish(sim)
        out[name] = {**compute_metrics(sim), **policy.ledger.report()}
    return out
