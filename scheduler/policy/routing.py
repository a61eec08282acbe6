"""Rule 3b of docs/policy.md: routing work across clusters by cost, capability and data location.

The rule, in one sentence: *among the pools that satisfy a job's constraints, the job starts on
the preferred, then, outside the clusters that a dataset's residency or a team's clusters confine
jobs to before inside them, the cheapest by expected total (GPU price x expected run time + data
movement) that can start it now, trying last the pools that a higher-ranked job waits for or
that another waiting job can use alone, and it holds out for a cheaper busy pool only while the
money saved exceeds ``wait_price_per_gpu_h`` x its GPUs x the hours it has waited.*

The confinement part alone: *a job that may run outside the clusters some jobs are confined to
runs there whenever it can, leaving those clusters to the jobs that have no choice* (a job
confined itself has all its pools inside them, so cost alone orders them). Without it, cost
sends the jobs that could run anywhere to the cheap confined cluster, and the confined jobs
wait and are preempted more there (docs/routing.md, "Why confinement comes before cost").

A pool is one (GPU model, cluster, capacity type); with ``Snapshot.clusters`` the engine treats
each pool as a GPU model of its own (``memo.pool_key``), so a gang, a reservation or a
preemption plan never spans two clusters, while quotas, fair share and priorities are counted
per GPU model over all clusters (one ledger). This module says, for one pending job, which pools
it may use at all and in which order to try them; the engine (``engine.place_or_plan``) walks
them. Without clusters nothing here is called and every decision is as before.

Hard constraints (a pool failing one is never used, and ``why`` names it):
- the cluster is reachable;
- it is among the job's ``clusters`` and in its ``regions`` (when given), among the clusters of
  the job's team and of every ancestor (when given), and in the residency regions of the job's
  dataset (when the snapshot lists them);
- the pool's price is at most the job's ``max_price_per_gpu_h`` (an unpriced pool fails a cap);
- a spot pool only for a job that tolerates spot (``routing.spot``, else ``preemptible``);
- a communication-heavy gang (``routing.comm_heavy``, else more than one worker) spreads over
  nodes only on an ``nvlink`` or ``infiniband`` cluster; on ``ethernet`` its whole gang goes on
  one node (the engine places it as one block), and a gang larger than any node there is
  excluded.

:func:`start_violations` states the same constraints independently of the walk, for the tests
and for the simulator's count of violations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.policy.memo import pool_key
from scheduler.policy.model import (
    FAST_INTERCONNECTS,
    Cluster,
    Config,
    PendingJob,
    Snapshot,
    Start,
    Team,
)

__all__ = [
    "COST_CEILING",
    "Router",
    "comm_heavy",
    "egress_cost",
    "expected_cost",
    "explain_starts",
    "start_violations",
    "tolerates_spot",
]


def tolerates_spot(job: PendingJob) -> bool:
    """Whether ``job`` may run on spot capacity: its own say, else whether it is preemptible."""
    r = job.routing
    return job.preemptible if r is None or r.spot is None else r.spot


def comm_heavy(job: PendingJob) -> bool:
    """Whether a gang of ``job`` spread over nodes needs a fast interconnect."""
    r = job.routing
    return job.workers > 1 if r is None or r.comm_heavy is None else r.comm_heavy


def team_clusters(teams: Mapping[str, Team], team: str) -> frozenset[str] | None:
    """The clusters ``team`` may use: the intersection of its own and its ancestors' lists
    (``None``: no restriction anywhere up the tree). Cycle-safe."""
    allowed: frozenset[str] | None = None
    seen: set[str] = set()
    t = teams.get(team)
    while t is not None and t.name not in seen:
        seen.add(t.name)
        if t.clusters is not None:
            mine = frozenset(t.clusters)
            allowed = mine if allowed is None else allowed & mine
        t = teams.get(t.parent) if t.parent is not None else None
    return allowed


# The most an expected total (or a price of waiting) counts for, in the price book's currency.
# The factors are each bounded, but a policy's default run time may be any finite number: at
# 1e305 s a gang's total overflowed to inf, which the routed event could not store (PostgreSQL
# refuses Infinity in JSON), so every cycle failed for every team; two such totals subtracted
# made NaN. No budget tells pools apart past this, so they tie there and go by name.
COST_CEILING = 1e15


def _capped(amount: float) -> float:
    """``amount`` (never negative here) at most :data:`COST_CEILING`; NaN counts as the
    ceiling (every comparison with NaN is false, so it is caught by the same test)."""
    return amount if amount < COST_CEILING else COST_CEILING


def egress_cost(job: PendingJob, cluster: Cluster, clusters: Mapping[str, Cluster]) -> float:
    """What moving ``job``'s dataset to ``cluster`` costs: nothing if it holds the dataset (or
    nobody does, or the size is unknown), else the size x the cheapest holder's egress price
    (at most :data:`COST_CEILING`)."""
    d = job.dataset
    size = job.dataset_size_gb
    if not d or not size or d in cluster.datasets:
        return 0.0
    prices = [c.datasets[d] for c in clusters.values() if d in c.datasets]
    return _capped(size * min(prices)) if prices else 0.0


def price_of(cluster: Cluster, gpu: str, spot: bool) -> float | None:
    """The pool's price per GPU-hour, or ``None`` when the price book has none."""
    return cluster.prices.get(gpu, {}).get("spot" if spot else "on_demand")


def expected_cost(
    job: PendingJob,
    cluster: Cluster,
    gpu: str,
    spot: bool,
    clusters: Mapping[str, Cluster],
    config: Config,
) -> float:
    """Expected total of running ``job`` on the pool: price x GPUs x expected remaining run
    hours (on spot, the run divided by ``1 - spot_interruption_rate``), plus data movement; a
    finite number, at most :data:`COST_CEILING`."""
    est = job.runtime_estimate_s if job.runtime_estimate_s is not None else config.default_runtime_s
    run_h = max(est - job.attained_service_s, 0.0) / 3600.0
    if spot and cluster.spot_interruption_rate > 0:
        run_h /= 1.0 - min(cluster.spot_interruption_rate, 0.99)
    price = price_of(cluster, gpu, spot) or 0.0
    gpu_time = _capped(price * job.workers * job.gpus_per_worker * run_h)
    return _capped(gpu_time + egress_cost(job, cluster, clusters))


class _PoolInfo:
    __slots__ = ("key", "cluster", "gpu", "spot", "price", "cap")

    def __init__(self, key: str, cluster: Cluster, gpu: str, spot: bool, cap: int) -> None:
        self.key = key
        self.cluster = cluster
        self.gpu = gpu
        self.spot = spot
        self.price = price_of(cluster, gpu, spot)
        self.cap = cap  # GPUs of the pool's largest ready, healthy node


class Router:
    """The routing facts of one cycle: the pools (by key) with their cluster, GPU model,
    capacity type, price and largest node; :meth:`route` answers for one job."""

    def __init__(
        self,
        snap: Snapshot,
        pools: Mapping[str, tuple[str, str, bool, int]],
    ) -> None:
        """``pools``: key -> (cluster name, GPU model, spot, largest node's GPUs)."""
        self.cfg = snap.config
        self.clusters = {c.name: c for c in snap.clusters}
        self.residency = {d.name: d.regions for d in snap.datasets}
        self.teams = {t.name: t for t in snap.teams}
        self.pools = {
            key: _PoolInfo(key, self.clusters[c], gpu, spot, cap)
            for key, (c, gpu, spot, cap) in pools.items()
        }
        self._team_allowed: dict[str, frozenset[str] | None] = {}
        # the clusters that some jobs are confined to: those of a team's list, those in a
        # dataset's residency (a job that may run elsewhere tries them after the others)
        confined: set[str] = set()
        for t in snap.teams:
            if t.clusters is not None:
                confined.update(t.clusters)
        for d in snap.datasets:
            if d.regions is not None:
                confined.update(c.name for c in snap.clusters if c.region in d.regions)
        self.confined = frozenset(confined)

    def one_block(self, job: PendingJob, key: str) -> bool:
        """Whether ``job``'s gang must go on one node of the pool (communication-heavy, more
        than one worker, on a cluster without a fast interconnect)."""
        return (
            job.workers > 1
            and self.pools[key].cluster.interconnect not in FAST_INTERCONNECTS
            and comm_heavy(job)
        )

    def exclusion(self, job: PendingJob, key: str) -> str | None:
        """Why ``job`` may never use pool ``key``, or ``None`` when it may."""
        p = self.pools[key]
        c = p.cluster
        r = job.routing
        if not c.reachable:
            return f"cluster {c.name} is unreachable"
        if r is not None and r.clusters is not None and c.name not in r.clusters:
            return f"cluster {c.name} is not among the job's clusters"
        if r is not None and r.regions is not None and c.region not in r.regions:
            return f"cluster {c.name} is in region {c.region or '(none)'}, not the job's regions"
        allowed = self._team_allowed.get(job.team, ())
        if allowed == ():
            allowed = self._team_allowed[job.team] = team_clusters(self.teams, job.team)
        if allowed is not None and c.name not in allowed:
            return f"team {job.team} may not use cluster {c.name}"
        if job.dataset:
            regions = self.residency.get(job.dataset)
            if regions is not None and c.region not in regions:
                return (
                    f"dataset {job.dataset} must stay in {', '.join(regions) or 'no region'}; "
                    f"cluster {c.name} is in {c.region or '(no region)'}"
                )
        if p.spot and not tolerates_spot(job):
            return f"{key} is spot capacity and the job does not tolerate spot"
        cap = r.max_price_per_gpu_h if r is not None else None
        if cap is not None and (p.price is None or p.price > cap):
            price = "has no price" if p.price is None else f"costs {p.price:g} per GPU-hour"
            return f"{key} {price}, above the job's cap of {cap:g}"
        if self.one_block(job, key):
            wmin = job.workers if job.elastic is None else max(1, job.elastic.min_workers)
            if wmin * job.gpus_per_worker > p.cap:
                return (
                    f"cluster {c.name} has {c.interconnect} interconnect: a communication-heavy "
                    f"gang of {job.workers}x{job.gpus_per_worker} must fit one node there, "
                    f"and its largest has {p.cap} GPUs"
                )
        return None

    def cost(self, job: PendingJob, key: str) -> float:
        """The job's expected total on pool ``key`` (see :func:`expected_cost`)."""
        p = self.pools[key]
        return expected_cost(job, p.cluster, p.gpu, p.spot, self.clusters, self.cfg)

    def preferred(self, job: PendingJob, key: str) -> bool:
        r = job.routing
        if r is None:
            return False
        c = self.pools[key].cluster
        return c.name in r.prefer_clusters or (bool(c.region) and c.region in r.prefer_regions)

    def route(self, job: PendingJob, keys: list[str]) -> tuple[list[str], list[str]]:
        """The pools of ``keys`` that ``job`` may use, in the order to try them (preferred
        first, then those outside the confined clusters, then cheapest expected total, then
        name; preferred then name only with ``route_by_cost`` off), and the reasons the others
        are excluded (one per reason, in key order)."""
        allowed = []
        reasons: list[str] = []
        for key in keys:
            why = self.exclusion(job, key)
            if why is None:
                allowed.append(key)
            elif why not in reasons:
                reasons.append(why)
        if self.cfg.route_by_cost:
            confined = self.confined
            allowed.sort(
                key=lambda k: (
                    not self.preferred(job, k),
                    self.pools[k].cluster.name in confined,
                    self.cost(job, k),
                    k,
                )
            )
        else:
            allowed.sort(key=lambda k: (not self.preferred(job, k), k))
        return allowed, reasons

    def holds_out(self, job: PendingJob, key: str, busy: list[str], now: float) -> str | None:
        """Whether ``job``, which pool ``key`` can start now, should rather wait for the
        cheapest of the ``busy`` pools tried before it: only while the saving exceeds
        ``wait_price_per_gpu_h`` x its GPUs x the hours it has waited. The reason, or None."""
        price = self.cfg.wait_price_per_gpu_h
        if price is None or not busy or not self.cfg.route_by_cost:
            return None
        cheap = min(busy, key=lambda k: (self.cost(job, k), k))
        saving = self.cost(job, key) - self.cost(job, cheap)
        waited_h = max(now - job.submitted_at, 0.0) / 3600.0
        gpus = job.workers * job.gpus_per_worker
        if saving <= _capped(price * gpus * waited_h):
            return None
        return (
            f"holding out for {cheap}: {saving:.2f} cheaper than {key}, which could start it "
            f"now, and worth more than its {waited_h:.2f} h of waiting at {price:g} per GPU-hour"
        )


def start_violations(snap: Snapshot, start: Start) -> list[str]:
    """The routing constraints ``start`` breaks in ``snap`` (empty when it keeps them all).

    Independent of the engine's walk: it reads the started nodes and the job's constraints
    directly. A snapshot without clusters has no routing constraints."""
    if not snap.clusters:
        return []
    job = next((p for p in snap.pending if p.id == start.job), None)
    if job is None:
        return [f"{start.job}: not a pending job"]
    nodes = {n.name: n for n in snap.nodes}
    clusters = {c.name: c for c in snap.clusters}
    used = [nodes[name] for name in start.placement if name in nodes]
    out = []
    names = {n.cluster for n in used}
    if len(names) != 1:
        return [f"{job.id}: gang spans clusters {sorted(names)}"]
    c = clusters.get(next(iter(names)))
    if c is None:
        return [f"{job.id}: on a node of no known cluster"]
    r = job.routing
    if not c.reachable:
        out.append("unreachable cluster")
    if r is not None and r.clusters is not None and c.name not in r.clusters:
        out.append("cluster not allowed for the job")
    if r is not None and r.regions is not None and c.region not in r.regions:
        out.append("region not allowed for the job")
    allowed = team_clusters({t.name: t for t in snap.teams}, job.team)
    if allowed is not None and c.name not in allowed:
        out.append("cluster not allowed for the team")
    if job.dataset:
        regions = {d.name: d.regions for d in snap.datasets}.get(job.dataset)
        if regions is not None and c.region not in regions:
            out.append("residency")
    spot = {n.spot for n in used}
    if True in spot and not tolerates_spot(job):
        out.append("spot for a job that does not tolerate spot")
    if r is not None and r.max_price_per_gpu_h is not None:
        for n in used:
            price = price_of(c, n.gpu_model, n.spot)
            if price is None or price > r.max_price_per_gpu_h:
                out.append("price above the job's cap")
                break
    if len(used) > 1 and c.interconnect not in FAST_INTERCONNECTS and comm_heavy(job):
        out.append("communication-heavy gang over nodes on a slow interconnect")
    return [f"{job.id}: {v}" for v in out]


def explain_starts(snap: Snapshot, starts: list[Start]) -> dict[str, dict[str, Any]]:
    """Where each of ``starts`` runs and why there, for the job's page: its pool, price and
    expected total (GPU time plus data movement), whether it was preferred, and every other pool
    of its GPU model with its expected total or the constraint that excluded it. Empty without
    clusters."""
    if not snap.clusters or not starts:
        return {}
    nodes = {n.name: n for n in snap.nodes}
    pools: dict[str, tuple[str, str, bool, int]] = {}
    for n in snap.nodes:
        key = pool_key(n)
        cap = pools[key][3] if key in pools else 0
        pools[key] = (n.cluster, n.gpu_model, n.spot, max(cap, n.gpus))
    router = Router(snap, pools)
    jobs = {p.id: p for p in snap.pending}
    out = {}
    for start in starts:
        job = jobs.get(start.job)
        first = nodes.get(next(iter(start.placement), ""))
        if job is None or first is None:
            continue
        key = pool_key(first)
        pool = router.pools[key]
        others = []
        for other in sorted(k for k, p in router.pools.items() if p.gpu == pool.gpu and k != key):
            excluded = router.exclusion(job, other)
            others.append(
                {
                    "pool": other,
                    "expected_cost": None if excluded else round(router.cost(job, other), 2),
                    "excluded": excluded,
                    "confined": router.pools[other].cluster.name in router.confined,
                }
            )
        out[start.job] = {
            "cluster": pool.cluster.name,
            "region": pool.cluster.region,
            "pool": key,
            "spot": pool.spot,
            "price_per_gpu_h": pool.price,
            "expected_cost": round(router.cost(job, key), 2),
            "egress_cost": round(egress_cost(job, pool.cluster, router.clusters), 2),
            "preferred": router.preferred(job, key),
            "confined": pool.cluster.name in router.confined,
            "alternatives": others,
        }
    return out
