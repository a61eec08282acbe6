"""The scheduling policy engine: :func:`decide` turns one :class:`Snapshot` into :class:`Decisions`.

Pure and deterministic: no clock (time is ``snapshot.now``), no I/O, no randomness, no
iteration over hash-ordered string sets; the same snapshot always yields the same decisions.

One cycle, in order (docs/policy.md explains each rule and default):

1. Rank the pending queue: priority class (and inside a class, with
   ``Config.las_thresholds_gpu_s``, on by default, the least-attained-service queue: jobs that
   received less GPU service first), then hierarchical fair-share standing, then the
   ``Config.queue_order`` tie-break (default "fair": requeued jobs first, then smallest predicted
   remaining GPU-time, aged so that waiting halves a job's effective size every
   ``queue_aging_s``).
2. Walk the queue once. A job whose dataset is not ready, or whose team (or an ancestor) would
   exceed its quota, waits without holding anyone up. Otherwise the job is placed as a gang
   (all workers or none) with topology-aware best-fit placement on ``ready`` nodes with health at
   least ``min_health``; preemptible jobs try spot nodes first, others avoid spot nodes unless
   nothing else fits; nodes caching the job's dataset are preferred.
3. A job that does not fit may (if higher priority than preemptible jobs, including
   preemptible jobs of its class in a higher attained-service queue, or reclaiming GPUs
   borrowed from its guarantee) shrink elastic jobs and then preempt the victims that lose the
   least work (GPUs x time since their last checkpoint), skipping victims whose next checkpoint
   is due within ``checkpoint_protect_s`` (a one-node job takes the node whose victims lose the
   least work in total; with LAS queues it may also preempt jobs of its own queue submitted
   after it). Freed GPUs come back only after ``preemption_grace_s``,
   so the job is reported pending ("waiting for N preempted GPUs ...") with a reservation at the
   end of the grace period; those GPUs are never handed to another job in the same cycle.
4. Otherwise the highest-ranked blocked jobs of each GPU model (``reservations_per_model``,
   default 4) get an EASY-backfill reservation each at the earliest time the running jobs'
   expected ends free enough GPUs (a later reservation never counts on GPUs or releases an
   earlier one counts on); with LAS queues, not before a job has waited ``las_reserve_after_s``
   while preemptible work could make room. Lower-ranked jobs start only on GPUs no reservation
   needs, or if
   their estimated end comes before the earliest reservation.
5. Elastic running jobs grow into GPUs left idle on GPU models where no job waits for capacity.

Invariants (checked by the property tests): a started GPU was free now and is given once; a
started gang has all its workers, ``gpus_per_worker`` each on one node of the requested model,
every node ``ready`` and healthy; every pending job not started gets a non-empty ``why``;
non-preemptible jobs and jobs inside their checkpoint protection window are never preempted.

Cost: O(N + R) to index N nodes and R running jobs, O(P log P) to rank P pending jobs, O(1)-ish
per job that cannot fit (memoised slot counts per request shape, and a job shaped like one that
just waited reuses that outcome while nothing changed), O(nodes of the chosen group) per start;
reservations pop one heap of expected releases only as far as they need; preemption planning is
capped. Never jobs x nodes x GPUs. Static topology and fair-share standings are memoised by
value across calls (a hit equals a rebuild, so decisions never depend on the memo). Also carried
over from the previous call, likewise exact: each pool's capacity index (updated for the nodes
whose free count changed, O(N) compares plus O(changed nodes)), and per running job its LAS rank
(until the time it can next change) and its placement view, while the caller passes the same
RunningJob object or placement mapping.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from operator import itemgetter

from scheduler.policy.capacity import Index, Pool
from scheduler.policy.fairshare import standings
from scheduler.policy.model import (
    Decisions,
    Node,
    Pending,
    PendingJob,
    Preempt,
    Quota,
    Reserve,
    Resize,
    RunningJob,
    Snapshot,
    Start,
)

__all__ = ["decide", "queue_order"]

_INF = math.inf
# Preemption planning looks at no more than this many candidate victims per blocked job; it
# bounds the cycle's cost on huge clusters (the cheapest candidates come first anyway).
_MAX_VICTIM_CANDIDATES = 128
# ... and for a one-node job this many, grouped by node (see _Cycle.cheapest_node): the cheapest
# few victims are usually spread over many nodes, and none of those nodes would be complete.
_MAX_NODE_CANDIDATES = 1024
# A GPU model gets at most ``Config.reservations_per_model`` EASY reservations; blocked jobs that
# cannot get one (their GPUs are held by jobs without an expected end) may cost this many extra
# tries in all.
_EXTRA_RESERVATION_TRIES = 3
# Preemption candidates sort by (kind, cost, job id); never by the rest (unorderable).
_KIND_COST_ID = itemgetter(0, 1, 2)
# Victims sort by (lost work, job id) likewise.
_COST_ID = itemgetter(0, 1)


def _fmt_t(t: float) -> str:
    return f"{t:.0f}" if abs(t) >= 1 or t == 0 else f"{t:g}"


def _fmt_s(s: float) -> str:
    return f"{s:.0f}" if float(s).is_integer() or s >= 10 else f"{s:g}"


_STANDINGS_MEMO: dict[tuple, tuple[dict[str, int], int]] = {}
_MEMO_SIZE = 8


def _memo_put(memo: dict, key: tuple, value: object) -> None:
    """Insert into a small memo, evicting the oldest entry; safe if threads race (a lost
    eviction or insertion only costs a rebuild later, never a wrong answer)."""
    while len(memo) >= _MEMO_SIZE:
        try:
            memo.pop(next(iter(memo)), None)
        except (RuntimeError, StopIteration):
            break
    memo[key] = value


def _standings(teams, band: float) -> tuple[dict[str, int], int]:
    # Memoised by value (the fields fair share reads): teams rarely change between cycles.
    key = (band, tuple((t.name, t.parent, t.weight, t.usage_gpu_s) for t in teams))
    out = _STANDINGS_MEMO.get(key)
    if out is None:
        out = standings(teams, band)
        _memo_put(_STANDINGS_MEMO, key, out)
    return out


def _thresholds(cfg) -> tuple[float, ...]:
    th = cfg.las_thresholds_gpu_s
    return tuple(sorted(th)) if th else ()


def _long_run(cfg, th: tuple[float, ...]) -> float:
    """``las_long_run_s`` where it applies (LAS on), else 0."""
    return cfg.las_long_run_s if th and cfg.las_long_run_s > 0 else 0.0


def _levels(th: tuple[float, ...], long_run: float) -> int:
    """Ranks per class: the LAS queues, plus the long-run queue below them when it is on."""
    return len(th) + 1 + (1 if long_run else 0)


def _fifo_queues(cfg, th: tuple[float, ...]) -> int:
    """How many of a class's most-served LAS queues are served in submission order
    (``las_bottom_fifo``): those whose jobs attained at least ``las_fifo_from_gpu_s``, the last
    one in any case, and the long-run queue below it; 0 when LAS or the rule is off. A rank
    ``r`` is in one of them when ``r % levels < _fifo_queues(...)``."""
    if not th or not cfg.las_bottom_fifo:
        return 0
    # queue 0 starts at 0 GPU-s, queue q >= 1 at th[q - 1]: count the queues starting below it
    start = cfg.las_fifo_from_gpu_s
    below = bisect_left(th, start) + (1 if start > 0 else 0)
    return max(len(th) + 1 - below, 1) + (1 if _long_run(cfg, th) else 0)


def _queue(gpu_s: float, served_s: float, th: tuple[float, ...], long_run: float) -> int:
    """The LAS queue of a job that attained ``gpu_s`` GPU-seconds in ``served_s`` seconds."""
    q = bisect_right(th, gpu_s)
    if long_run and q == len(th) and served_s >= long_run:
        q += 1
    return q


def _rank(prio: int, gpu_s: float, th: tuple[float, ...], served_s: float, long_run: float) -> int:
    """The effective priority: the class, then (with LAS thresholds) the attained-service queue.

    ``prio x levels + (levels - 1 - queue)`` keeps every class strictly above the next lower
    one, so a queue only reorders (and lets preempt) jobs of the same class.
    """
    if not th:
        return prio
    n = _levels(th, long_run)
    return prio * n + (n - 1 - _queue(gpu_s, served_s, th, long_run))


def _pending_rank(p: PendingJob, classes, th: tuple[float, ...], long_run: float) -> int:
    prio = classes.get(p.priority_class, 0)
    if not th:
        return prio
    served = p.attained_service_s
    return _rank(prio, served * p.workers * p.gpus_per_worker, th, served, long_run)


def _running_rank(
    r: RunningJob, classes, th: tuple[float, ...], long_run: float, now: float
) -> int:
    prio = classes.get(r.priority_class, 0)
    if not th:
        return prio
    ran = now - r.started_at
    served = r.attained_service_s + (ran if ran > 0 else 0.0)
    return _rank(prio, served * r.workers * r.gpus_per_worker, th, served, long_run)


def queue_order(snapshot: Snapshot, ranks: dict[int, int] | None = None) -> list[PendingJob]:
    """The pending queue in the order the engine considers it (highest rank first).

    With ``ranks`` (LAS on), each job's effective rank is also recorded there by ``id(job)``,
    so that the cycle does not compute it again."""
    cfg = snapshot.config
    classes = snapshot.priority_classes
    th = _thresholds(cfg)
    long_run = _long_run(cfg, th)
    if th and ranks is not None:

        def prio_of(p: PendingJob) -> int:
            r = ranks[id(p)] = _pending_rank(p, classes, th, long_run)
            return r

    elif th:

        def prio_of(p: PendingJob) -> int:
            return _pending_rank(p, classes, th, long_run)

    else:

        def prio_of(p: PendingJob) -> int:
            return classes.get(p.priority_class, 0)

    fs_rank, neutral = _standings(snapshot.teams, cfg.fair_share_band)
    now = snapshot.now
    order = cfg.queue_order
    if order == "fifo":

        def key(p: PendingJob):
            return (
                -prio_of(p),
                fs_rank.get(p.team, neutral),
                p.submitted_at,
                p.id,
            )

    elif order == "las":

        def key(p: PendingJob):
            return (
                -prio_of(p),
                fs_rank.get(p.team, neutral),
                p.attained_service_s * p.workers * p.gpus_per_worker,
                p.submitted_at,
                p.id,
            )

    else:
        dflt = cfg.default_runtime_s
        aging = cfg.queue_aging_s
        sjf = order == "sjf"
        log2 = math.log2
        levels = _levels(th, long_run)
        fifo_queues = 0 if sjf else _fifo_queues(cfg, th)

        def key(p: PendingJob):
            r = prio_of(p)
            if r % levels < fifo_queues:
                # the most-served LAS queues of a class: submission order (las_bottom_fifo)
                return (-r, fs_rank.get(p.team, neutral), p.submitted_at, p.id)
            est = p.runtime_estimate_s if p.runtime_estimate_s is not None else dflt
            rem = est - p.attained_service_s
            if rem < 1.0:
                rem = 1.0
            size = rem * p.workers * p.gpus_per_worker
            if sjf:
                return (
                    -r,
                    fs_rank.get(p.team, neutral),
                    size,
                    p.submitted_at,
                    p.id,
                )
            wait = now - p.submitted_at
            return (
                -r,
                fs_rank.get(p.team, neutral),
                not p.requeued,
                log2(size) - (wait / aging if wait > 0 else 0.0),
                p.submitted_at,
                p.id,
            )

    return sorted(snapshot.pending, key=key)


class _Run:
    """A running job as the planner sees it (GPUs per eligible node id)."""

    __slots__ = ("job", "model", "gpus", "on", "prio", "end", "protected")

    def __init__(
        self,
        job: RunningJob,
        model: str,
        gpus: int,
        on: dict[int, int],
        prio: int,
        end: float | None,
        protected: bool,
    ) -> None:
        self.job = job
        self.model = model
        self.gpus = gpus
        self.on = on
        self.prio = prio
        self.end = end
        self.protected = protected


class _Model:
    """Per-GPU-model cycle state: pools (all / spot / on-demand), their views, reservations."""

    __slots__ = (
        "name",
        "pools",
        "now",
        "long",
        "initial",
        "ds_nodes",
        "static_slots",
        "min_res_at",
        "reservations",
        "reserved_nodes",
        "res_count",
        "claimed",
        "easy_tries",
        "easy_failed",
        "blocked_by",
        "capacity_wait",
        "started_ends",
        "unknown_started",
        "pre_failed",
        "victims",
        "elastic",
        "releasing",
        "chains",
        "sizes",
        "soft_estimated",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.pools: dict[str, Pool] = {}
        self.now: dict[str, Index] = {}
        self.long: dict[str, Index] | None = None  # None: same as ``now`` (nothing protected)
        self.initial: dict[int, int] = {}  # g -> worker slots free at the start of the cycle
        self.ds_nodes: dict[str, frozenset[int]] = {}
        self.static_slots: dict[int, int] = {}
        self.min_res_at = _INF
        self.reservations: list[tuple[str, float]] = []
        self.reserved_nodes: set[int] = set()
        self.res_count = 0  # EASY reservations made this cycle
        self.claimed: dict[int, int] = {}  # node -> future releases a reservation counts on
        self.easy_tries = 0
        self.easy_failed: list[tuple[int, int]] = []
        self.blocked_by: str | None = None
        self.capacity_wait = False
        self.started_ends: list[tuple[float, int, int]] = []
        self.unknown_started = 0
        self.pre_failed: dict[tuple[int, bool, bool], list[tuple[int, int, tuple]]] = {}
        # Planner view of running jobs (built lazily): preemptible, unprotected victims by
        # rank, cheapest first (cost = lost work; with las_bottom_fifo, age in the queues a
        # class serves in submission order); elastic jobs; jobs already being preempted.
        self.victims: dict[int, list[tuple[float, str, _Run]]] = {}
        self.elastic: list[_Run] = []
        self.releasing: list[_Run] = []
        self.chains: dict[str, tuple[tuple[str, Quota], ...]] = {}
        self.sizes: dict[int, int] = {}  # node size (GPUs) -> number of eligible nodes
        self.soft_estimated = False  # a gated job got a start estimate this cycle


class _Topology:
    """Static facts about a set of eligible nodes: topology order, pools per GPU model
    (all / spot / on-demand), dataset caches, node sizes. Immutable once built."""

    __slots__ = ("order", "names", "id_of", "rack", "node_model", "models")

    def __init__(self, eligible: list[Node]) -> None:
        self.order = sorted(
            range(len(eligible)),
            key=lambda p: (
                eligible[p].gpu_model,
                eligible[p].fabric,
                eligible[p].rack,
                eligible[p].nvlink_domain,
                eligible[p].name,
            ),
        )
        elig = [eligible[p] for p in self.order]
        self.names = [n.name for n in elig]
        self.id_of = {n.name: i for i, n in enumerate(elig)}
        self.rack = [n.rack for n in elig]
        self.node_model = [n.gpu_model for n in elig]
        gpus = [n.gpus for n in elig]
        domain = [n.nvlink_domain for n in elig]
        fabric = [n.fabric for n in elig]
        groups: dict[str, list[int]] = {}
        for i, n in enumerate(elig):
            groups.setdefault(n.gpu_model, []).append(i)
        self.models = []
        for model in sorted(groups):
            ids = groups[model]
            sizes: dict[int, int] = {}
            for i in ids:
                sizes[gpus[i]] = sizes.get(gpus[i], 0) + 1
            spot = [i for i in ids if elig[i].spot]
            ondemand = [i for i in ids if not elig[i].spot]
            subsets = {"all": ids}
            if spot and ondemand:
                subsets["spot"] = spot
                subsets["ondemand"] = ondemand
            pools = {
                key: Pool(sub, gpus, domain, self.rack, fabric) for key, sub in subsets.items()
            }
            ds: dict[str, list[int]] = {}
            for i in ids:
                for d in elig[i].datasets:
                    ds.setdefault(d, []).append(i)
            ds_nodes = {d: frozenset(v) for d, v in ds.items()}
            self.models.append((model, pools, ds_nodes, sizes))


# Memo of the static topology of recently seen eligible-node sets. Building pools is most of the
# cost of a small cycle, and consecutive cycles (live loop, simulator) nearly always see the same
# nodes; only free GPUs change. Keyed by value (every static field of every eligible node, in
# order), so a hit is exactly what a rebuild would produce: decisions do not depend on the memo.
_TOPOLOGY_MEMO: dict[tuple, _Topology] = {}


def _static(n: Node) -> tuple:
    return (
        n.name,
        n.gpu_model,
        n.gpus,
        n.fabric,
        n.rack,
        n.nvlink_domain,
        n.spot,
        tuple(n.datasets),
    )


# The eligible nodes of the last call and their topology. Callers (live loop, simulator) pass
# the same Node objects for unchanged nodes, so comparing identities first and the static fields
# of changed nodes only is O(changed) instead of building the whole value key; the hit is still
# by value, so it is exactly what a rebuild would give. One tuple, replaced atomically.
_LAST_TOPOLOGY: list[tuple[list[Node], _Topology] | None] = [None]


def _topology(eligible: list[Node]) -> _Topology:
    last = _LAST_TOPOLOGY[0]
    if last is not None:
        prev, topo = last
        if len(prev) == len(eligible) and all(
            a is b or _static(a) == _static(b) for a, b in zip(prev, eligible, strict=True)
        ):
            _LAST_TOPOLOGY[0] = (eligible, topo)
            return topo
    key = tuple(_static(n) for n in eligible)
    topo = _TOPOLOGY_MEMO.get(key)
    if topo is None:
        topo = _Topology(eligible)
        _memo_put(_TOPOLOGY_MEMO, key, topo)
    _LAST_TOPOLOGY[0] = (eligible, topo)
    return topo


# Per running job, facts of the previous call that stay true while the caller passes the same
# RunningJob object (the simulator and the live loop rebuild a job's object only when one of its
# fields changes). A hit is checked by identity and gives exactly what a rebuild gives; each
# call keeps only the entries of its own running jobs, so the memo holds one call's worth.
# Both are replaced atomically; concurrent callers only cost each other rebuilds.
#
# LAS rank: (job, valid_from, valid_until, rank), with ``classes`` and thresholds it holds for.
_LAST_RANKS: list[tuple[dict, tuple, dict[str, tuple]]] = [({}, ((), 0.0), {})]


def _same_service(a: RunningJob, b: RunningJob) -> bool:
    """Whether the two have the same LAS rank at every time (the fields it is computed from)."""
    return (
        a.started_at == b.started_at
        and a.attained_service_s == b.attained_service_s
        and a.workers == b.workers
        and a.gpus_per_worker == b.gpus_per_worker
        and a.priority_class == b.priority_class
    )


# The planner's view of a placement: (placement, topology, model, GPUs, GPUs per eligible node
# id), by job id; checked by the identity of the placement mapping, which callers keep while a
# job's placement is unchanged.
_LAST_PLACEMENTS: list[dict[str, tuple]] = [{}]


def _rank_span(
    r: RunningJob, cls_rank: int, th: tuple[float, ...], long_run: float, now: float
) -> tuple:
    """``(r, now, until, rank)``: the running job's LAS rank now, and a time up to which it is
    still the same. The rank is computed exactly as the setup loop computes it; attained service
    only grows with time (every float step of it is monotone), so a rank found both at ``now``
    and at ``until`` holds at every time between them."""
    gpus = r.workers * r.gpus_per_worker

    def crossed(t: float) -> int:  # queue at time t
        ran = t - r.started_at
        served = r.attained_service_s + (ran if ran > 0 else 0.0)
        return _queue(served * gpus, served, th, long_run)

    nxt = crossed(now)
    until = now
    levels = _levels(th, long_run)
    if nxt >= levels - 1:
        until = _INF
    elif gpus > 0:
        # just before the crossing; verified, so rounding can only shorten the span
        if nxt < len(th):
            cross = r.started_at + th[nxt] / gpus - r.attained_service_s
        else:  # in the last queue, before the long-run one
            cross = r.started_at + long_run - r.attained_service_s
        guess = cross - max(1e-3, abs(cross) * 1e-9)
        if guess > now and crossed(guess) == nxt:
            until = guess
    return (r, now, until, cls_rank * levels + levels - 1 - nxt)


# Per pool, the index of the last call's free counts (never mutated once stored). Between calls
# only a few nodes' counts change, so updating a copy of it costs O(pool groups + changed nodes)
# instead of indexing every node again.
_LAST_INDEX: dict[int, tuple[Pool, Index]] = {}


def _fresh_index(pool: Pool, free: list[list[int]]) -> Index:
    """An index of ``pool`` with each node's free GPUs: the same state as
    ``Index(pool, {i: len(free[i]) for i in pool.nodes})`` (counts, buckets, histograms, empty
    slot memo, version 0), built from the last call's index when there is one."""
    last = _LAST_INDEX.get(id(pool))
    if last is None or last[0] is not pool:
        index = Index(pool, {i: len(free[i]) for i in pool.nodes})
    else:
        index = last[1].clone()
        cnt = index.cnt
        for i in pool.nodes:
            c = len(free[i])
            if cnt[i] != c:
                index.set(i, c)
        index._slots = {}
        index.version = 0
    if len(_LAST_INDEX) >= 4 * _MEMO_SIZE and id(pool) not in _LAST_INDEX:
        _LAST_INDEX.clear()
    _LAST_INDEX[id(pool)] = (pool, index)
    return index.clone()  # the cycle's own, which it mutates


class _Cycle:
    """State of one ``decide`` call. Built from the snapshot, consumed by :meth:`run`."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        cfg = self.cfg = snap.config
        self.now = snap.now
        self.classes = snap.priority_classes
        self.th = _thresholds(cfg)  # LAS queue thresholds (GPU-s); () = off
        self.long_run = _long_run(cfg, self.th)  # s of run time for the long-run queue; 0 = off
        # rank % levels == 0 is a class's most-served queue; with las_bottom_fifo the queues with
        # rank % levels < fifo_queues are served in submission order and give up their most
        # recently submitted job first
        self.levels = _levels(self.th, self.long_run)
        self.fifo_queues = _fifo_queues(cfg, self.th)
        self.starts: list[Start] = []
        self.preempts: list[Preempt] = []
        self.reserves: list[Reserve] = []
        self.resizes: list[Resize] = []
        self.pendings: list[Pending] = []
        self.preempt_attempts = 0
        self.gone: set[str] = set()  # running jobs preempted this cycle
        self.shrunk: dict[str, list[tuple[int, tuple[int, ...]]]] = {}  # job -> removed units
        self.why_cache: dict[tuple, str] = {}

        # ---- nodes: eligible ones get global ids in topology order
        min_health = cfg.min_health
        self.node_by_name = {n.name: n for n in snap.nodes}
        eligible = [
            n for n in snap.nodes if n.state == "ready" and n.health >= min_health and n.gpus > 0
        ]
        topo = self.topo = _topology(eligible)
        elig = [eligible[p] for p in topo.order]
        self.names = topo.names
        self.id_of = topo.id_of
        self.rack = topo.rack
        self.node_model = topo.node_model
        self.free: list[list[int]] = []
        for n in elig:
            f = list(n.free_gpus)
            # The codec guarantees distinct in-range indices; dataclasses built directly get a
            # cheap check (a GPU listed twice must never be placed twice).
            if f and (len(f) > n.gpus or len(set(f)) != len(f) or min(f) < 0 or max(f) >= n.gpus):
                f = sorted({g for g in f if 0 <= g < n.gpus})
            self.free.append(f)
        self.protected = [0] * len(elig)
        self.free0 = [len(f) for f in self.free]
        self.models: dict[str, _Model] = {}
        self._pools_of: list[list[tuple[_Model, str]]] | None = None  # see refresh
        free = self.free
        for model, pools, ds_nodes, sizes in topo.models:
            ms = _Model(model)
            ms.pools = pools
            ms.ds_nodes = ds_nodes
            ms.sizes = sizes
            for key, pool in pools.items():
                ms.now[key] = _fresh_index(pool, free)
            self.models[model] = ms
        self.model_names = sorted(self.models)

        # ---- teams and quotas
        self.teams = {t.name: t for t in snap.teams}
        self._chains: dict[tuple[str, str], tuple[tuple[str, Quota], ...]] = {}
        self._ancestry: dict[str, tuple[str, ...]] = {}
        self.used: dict[tuple[str, str], int] = {}
        self.reclaimed: dict[tuple[str, str], int] = {}

        # ---- running jobs: quota usage now (only if any team has a quota), the cheapest
        # facts the preemption planner needs to know whether to look at all; the full planner
        # view is built lazily (ensure_runs) because most cycles never need it.
        self.any_quota = any(t.quota for t in snap.teams)
        per: dict[tuple[str, str], int] = {}
        self.has_elastic = False
        self.has_releasing = False
        classes = self.classes
        th = self.th
        now = self.now
        min_victim: dict[str | None, int] = {}  # model -> lowest priority of a preemptible job
        # LAS: model -> rank -> GPUs of preemptible jobs (only what the reservation gate reads)
        victim_gpus: dict[str | None, dict[int, int]] = {}
        gate = bool(th) and cfg.las_reserve_after_s > 0 and cfg.preemption
        run_rank = self.run_rank = {}  # LAS: effective rank of preemptible running jobs
        any_quota = self.any_quota
        long_run = self.long_run
        memo_classes, memo_th, memo_ranks = _LAST_RANKS[0]
        if memo_th != (th, long_run) or memo_classes != classes:
            memo_classes, memo_ranks = dict(classes), {}
        ranks: dict[str, tuple] = {}
        for r in snap.running:
            model = r.gpu_model
            if r.elastic is not None:
                self.has_elastic = True
            if r.releasing_at is not None:
                self.has_releasing = True
            elif r.preemptible:
                if th:
                    # this loop runs over every running job every call: reuse the last call's
                    # rank while it provably still holds
                    span = memo_ranks.get(r.id)
                    if span is None or not span[1] <= now <= span[2]:
                        span = _rank_span(r, classes.get(r.priority_class, 0), th, long_run, now)
                    elif span[0] is not r:
                        if _same_service(span[0], r):  # rebuilt for another field
                            span = (r, span[1], span[2], span[3])
                        else:
                            span = _rank_span(
                                r, classes.get(r.priority_class, 0), th, long_run, now
                            )
                    ranks[r.id] = span
                    p = run_rank[r.id] = span[3]
                    if gate:
                        vg = victim_gpus.setdefault(model, {})
                        vg[p] = vg.get(p, 0) + r.workers * r.gpus_per_worker
                else:
                    p = classes.get(r.priority_class, 0)
                m = min_victim.get(model)
                if m is None or p < m:
                    min_victim[model] = p
            if any_quota:
                if model is None:
                    model = self.model_of_placement(r)
                    if model is None:
                        continue
                key = (r.team, model)
                per[key] = per.get(key, 0) + r.workers * r.gpus_per_worker
        if th:
            _LAST_RANKS[0] = (memo_classes, (th, long_run), ranks)
        self.min_victim = min_victim
        self.victim_gpus = victim_gpus
        for (team, model), n in per.items():
            for t in self.ancestry(team):
                self.used[(t, model)] = self.used.get((t, model), 0) + n
        self.runs: dict[str, _Run] = {}
        self._runs_built = False
        self.runs_unique = True  # no two running jobs share an id (set by ensure_runs)
        self.epoch = 0  # bumped by every change of capacity or reservations in this cycle
        self.fail_cache: dict[tuple, tuple[int, str, tuple]] = {}
        self.soft_plain: str | None = None  # see place_or_plan (start estimate, nothing held)
        self._release_heap: list[tuple[float, int]] | None = None
        self._unknown_runs: list[int] = []
        self.pending_ranks: dict[int, int] = {}  # id(pending job) -> its LAS rank

    def pending_rank(self, job: PendingJob) -> int:
        r = self.pending_ranks.get(id(job))  # filled by queue_order
        return r if r is not None else _pending_rank(job, self.classes, self.th, self.long_run)

    def model_of_placement(self, r: RunningJob) -> str | None:
        for name in r.placement:
            node = self.node_by_name.get(name)
            if node is not None:
                return node.gpu_model
        return None

    def ensure_runs(self) -> None:
        """Build the planner's view of running jobs (victim lists, timeline inputs) once."""
        if self._runs_built:
            return
        self._runs_built = True
        now = self.now
        protect = self.cfg.checkpoint_protect_s
        id_of = self.id_of
        node_model = self.node_model
        classes = self.classes
        models = self.models
        topo = self.topo
        memo = _LAST_PLACEMENTS[0]
        placements: dict[str, tuple] = {}
        node_by_name = self.node_by_name
        run_rank = self.run_rank
        runs = self.runs
        built = 0
        levels = self.levels
        fifo_queues = self.fifo_queues
        for r in self.snap.running:
            # Only jobs the planner may touch: already releasing, elastic, or preemptible and
            # outside their checkpoint protection window.
            base = r.last_checkpoint_at if r.last_checkpoint_at is not None else r.started_at
            interval = r.checkpoint_interval_s
            protected = interval is not None and now <= base + interval <= now + protect
            if r.releasing_at is None and r.elastic is None and (not r.preemptible or protected):
                seen = memo.get(r.id)
                if seen is not None and seen[0] is r.placement:
                    placements[r.id] = seen  # protected only for now: keep it for later calls
                continue
            model = r.gpu_model
            if not model:
                model = None
                for name in r.placement:  # model_of_placement, inlined (hot loop)
                    node = node_by_name.get(name)
                    if node is not None:
                        model = node.gpu_model
                        break
                if model is None:
                    continue
            seen = memo.get(r.id)
            if seen is not None and seen[0] is r.placement and seen[1] is topo and seen[2] == model:
                total, on = seen[3], seen[4]
                placements[r.id] = seen
            else:
                pl = r.placement
                if len(pl) == 1:
                    for name, idxs in pl.items():
                        total = len(idxs)
                        i = id_of.get(name)
                        on = (
                            {i: total} if i is not None and total and node_model[i] == model else {}
                        )
                else:
                    on = {}
                    total = 0
                    for name, idxs in pl.items():
                        total += len(idxs)
                        i = id_of.get(name)
                        if i is not None and idxs and node_model[i] == model:
                            on[i] = on.get(i, 0) + len(idxs)
                placements[r.id] = (pl, topo, model, total, on)
            end = r.expected_end
            if r.releasing_at is not None and (end is None or r.releasing_at < end):
                end = r.releasing_at
            rank = run_rank.get(r.id)
            if rank is None:
                rank = _running_rank(r, classes, self.th, self.long_run, now)
            lost = total * (now - base) if now > base else 0.0
            run = _Run(r, model, total, on, rank, end, protected)
            runs[r.id] = run
            built += 1
            ms = models.get(model)
            if ms is None or not on:
                continue
            if r.releasing_at is not None:
                ms.releasing.append(run)
                continue
            if r.elastic is not None:
                ms.elastic.append(run)
            if r.preemptible and not protected:
                cost = lost
                if rank % levels < fifo_queues:
                    # the reverse of the order the queue is served in
                    sub = r.submitted_at if r.submitted_at is not None else r.started_at
                    cost = now - sub if now > sub else 0.0
                ms.victims.setdefault(rank, []).append((cost, r.id, run))
        _LAST_PLACEMENTS[0] = placements
        self.runs_unique = built == len(runs)
        for ms in self.models.values():
            for lst in ms.victims.values():
                lst.sort(key=_COST_ID)
            ms.elastic.sort(key=lambda run: (run.prio, run.job.id))
            ms.releasing.sort(key=lambda run: run.job.id)

    # ------------------------------------------------------------------ teams / quota

    def ancestry(self, team: str) -> tuple[str, ...]:
        """``team`` and its known ancestors, nearest first (cycle-safe)."""
        a = self._ancestry.get(team)
        if a is None:
            out = []
            seen = set()
            t = team
            while t is not None and t in self.teams and t not in seen:
                seen.add(t)
                out.append(t)
                t = self.teams[t].parent
            if not out:
                out = [team]
            a = self._ancestry[team] = tuple(out)
        return a

    def quota_chain(self, team: str, model: str) -> tuple[tuple[str, Quota], ...]:
        """Quota entries for ``model`` on ``team`` and its ancestors, nearest first."""
        key = (team, model)
        c = self._chains.get(key)
        if c is None:
            c = tuple(
                (t, self.teams[t].quota[model])
                for t in self.ancestry(team)
                if t in self.teams and model in self.teams[t].quota
            )
            self._chains[key] = c
        return c

    def quota_block(self, job: PendingJob, model: str, need: int) -> str | None:
        """Why ``need`` more GPUs of ``model`` would break a quota of the job's team tree."""
        if not self.any_quota:
            return None
        ms = self.models[model]
        chain = ms.chains.get(job.team)
        if chain is None:
            chain = ms.chains[job.team] = self.quota_chain(job.team, model)
        for t, q in chain:
            used = self.used.get((t, model), 0)
            limit = q.guaranteed + q.borrow_limit
            if used + need > limit:
                who = f"team {t}" if t == job.team else f"team {t} (ancestor of {job.team})"
                return (
                    f"quota: {who} would use {used + need} {model} GPUs, above its limit of "
                    f"{limit} ({q.guaranteed} guaranteed + {q.borrow_limit} borrowable); "
                    f"{used} in use"
                )
        return None

    # ------------------------------------------------------------------ capacity

    def views(self, ms: _Model, short: bool) -> dict[str, Index]:
        return ms.now if short or ms.long is None else ms.long

    def refresh(self, i: int) -> None:
        """Re-sync node ``i``'s counts in every view after a take or a protection."""
        free = len(self.free[i])
        prot = self.protected[i]
        pools_of = self._pools_of
        if pools_of is None:
            # built on the first change only: most cycles change nothing
            pools_of = self._pools_of = [[] for _ in self.names]
            for ms in self.models.values():
                for key, pool in ms.pools.items():
                    for n in pool.nodes:
                        pools_of[n].append((ms, key))
        for ms, key in pools_of[i]:
            ms.now[key].set(i, free)
            if ms.long is not None:
                ms.long[key].set(i, free - prot if free > prot else 0)

    def protect(self, ms: _Model, i: int, k: int) -> None:
        if k <= 0:
            return
        if ms.long is None:
            ms.long = {key: idx.clone() for key, idx in ms.now.items()}
        self.protected[i] += k
        self.epoch += 1
        self.refresh(i)

    def pool_order(self, ms: _Model, preemptible: bool) -> tuple[str, ...]:
        if "spot" not in ms.pools:
            return ("all",)
        return ("spot", "all") if preemptible else ("ondemand", "all")

    def take(self, ms: _Model, plan: list[tuple[int, int]], g: int) -> dict[str, tuple[int, ...]]:
        """Allocate the lowest free GPU indices per node of ``plan``; returns the placement."""
        placement = {}
        self.epoch += 1
        for i, workers in plan:
            k = workers * g
            f = self.free[i]
            placement[self.names[i]] = tuple(f[:k])
            del f[:k]
            self.refresh(i)
        return {name: placement[name] for name in sorted(placement)}

    def initial_slots(self, ms: _Model, g: int) -> int:
        """Worker slots of ``g`` GPUs the model had free at the start of the cycle."""
        s = ms.initial.get(g)
        if s is None:
            free0 = self.free0
            s = ms.initial[g] = sum(free0[i] // g for i in ms.pools["all"].nodes)
        return s

    def static_slots(self, ms: _Model, g: int) -> int:
        s = ms.static_slots.get(g)
        if s is None:
            s = sum(n * (size // g) for size, n in ms.sizes.items())
            ms.static_slots[g] = s
        return s

    # ------------------------------------------------------------------ main loop

    def run(self) -> Decisions:
        for job in queue_order(self.snap, self.pending_ranks):
            self.consider(job)
        self.grow_elastic()
        return Decisions(
            start=tuple(self.starts),
            preempt=tuple(self.preempts),
            reserve=tuple(self.reserves),
            resize=tuple(self.resizes),
            pending=tuple(self.pendings),
        )

    def consider(self, job: PendingJob) -> None:
        """Start ``job`` or record why it waits (plus any preemption / reservation for it)."""
        if not job.dataset_ready:
            self.pendings.append(
                Pending(
                    job.id,
                    f"dataset {job.dataset or '(unnamed)'} is not ready yet; "
                    "the job waits without holding up others",
                )
            )
            return
        # A job shaped like one that just waited, of the same team, class and backfill window,
        # with nothing changed since (same epoch), waits for the same reason: skip the search
        # and the planning. This keeps a long blocked queue near O(1) per job.
        key = None
        if job.elastic is None:
            est = job.runtime_estimate_s
            if job.gpu_model is not None:
                ms = self.models.get(job.gpu_model)
                short = ms is not None and est is not None and self.now + est <= ms.min_res_at
            else:
                short = tuple(
                    [
                        est is not None and self.now + est <= ms.min_res_at
                        for ms in self.models.values()
                    ]
                )
            key = (
                job.gpu_model,
                short,
                job.workers,
                job.gpus_per_worker,
                job.preemptible,
                job.priority_class,
                job.team,
                self.pending_rank(job) if self.th else 0,
            )
            hit = self.fail_cache.get(key)
            if (
                hit is not None
                and hit[0] == self.epoch
                and (not hit[2] or hit[2] <= (job.submitted_at, job.id))
            ):
                self.pendings.append(Pending(job.id, hit[1]))
                return
        epoch = self.epoch
        out = self.place_or_plan(job)
        if out is None:
            return
        why, at = out
        soft_plain, self.soft_plain = self.soft_plain, None
        if key is not None and self.epoch == epoch and (at is None or soft_plain is not None):
            # a start estimate without held GPUs is the first job's only: the next
            # same-shaped job is told the rest
            cached = why if at is None else soft_plain
            # With FIFO within a queue, a job submitted later than one that failed fails too
            # (fewer jobs were submitted after it); one submitted earlier may not.
            by_submit = self.cfg.las_fifo_one_node or self.cfg.las_defragment
            mine = (job.submitted_at, job.id) if self.th and by_submit else ()
            self.fail_cache[key] = (epoch, cached, mine)
        self.pendings.append(Pending(job.id, why, at))

    def place_or_plan(self, job: PendingJob) -> tuple[str, float | None] | None:
        """Start ``job`` (returns None) or return ``(why, estimated_start)``."""
        g = job.gpus_per_worker
        w = job.workers
        wmin = w
        if job.elastic is not None:
            wmin = max(1, min(w, job.elastic.min_workers))
        models = (job.gpu_model,) if job.gpu_model is not None else tuple(self.model_names)
        if not models:
            return "no ready, healthy GPU nodes in the cluster", None
        reasons: list[str] = []
        blocked: list[tuple[_Model, bool, int]] = []  # capacity-blocked: model, short, workers
        est = job.runtime_estimate_s
        for model in models:
            ms = self.models.get(model)
            if ms is None:
                reasons.append(f"no ready, healthy nodes with {model} GPUs")
                continue
            if self.static_slots(ms, g) < wmin:
                reasons.append(self.never_fits(ms, wmin, g))
                continue
            q = self.quota_block(job, model, wmin * g)
            if q is not None:
                reasons.append(q)
                continue
            if not self.cfg.backfill and ms.blocked_by is not None:
                reasons.append(
                    f"queued behind {ms.blocked_by}, which waits for {model} GPUs (backfill is off)"
                )
                ms.capacity_wait = True
                continue
            short = est is not None and self.now + est <= ms.min_res_at
            views = self.views(ms, short)
            order = self.pool_order(ms, job.preemptible)
            prefer = ms.ds_nodes.get(job.dataset) if job.dataset else None
            k = w
            while k >= wmin:
                if k > wmin and self.quota_block(job, model, k * g) is not None:
                    k -= 1
                    continue
                for key in order:
                    plan = views[key].place(k, g, prefer)
                    if plan is not None:
                        self.start(job, ms, plan, g, k)
                        return None
                k -= 1
            blocked.append((ms, short, wmin))
            reasons.append(self.capacity_why(ms, views["all"], short, wmin, g))
        if not blocked:
            return "; ".join(reasons), None
        for ms, _, _ in blocked:
            ms.capacity_wait = True
            if not self.cfg.backfill and ms.blocked_by is None:
                ms.blocked_by = job.id
                self.epoch += 1  # later jobs now wait behind this one, not for capacity
        # Capacity-blocked: preempt (priority or reclaim), else an EASY reservation.
        if self.cfg.preemption and self.preempt_attempts < self.cfg.max_preemption_attempts:
            for ms, _, wneed in blocked:
                plan = self.plan_preemption(job, ms, wneed, g)
                if plan is not None:
                    return plan
        suffix = ""
        at = None
        if self.cfg.backfill:
            for ms, _, wneed in blocked:
                if ms.res_count >= self.cfg.reservations_per_model:
                    continue
                if self.reserve_later(job, ms, wneed * g):
                    # No GPUs held yet; the model's first such job still gets a start estimate
                    # from the release timeline (an estimate, not a promise).
                    soft = None
                    if not ms.soft_estimated:
                        ms.soft_estimated = True
                        soft = self.reserve(job, ms, wneed, g, hold=False)
                    plain = (
                        "; no GPUs held for it before it has waited "
                        f"{_fmt_s(self.cfg.las_reserve_after_s)} s (preemptible jobs hold enough "
                        "GPUs and change hands by attained service)"
                    )
                    suffix = plain
                    if soft is not None:
                        at = soft
                        suffix = f"; estimated start t={_fmt_t(soft)}" + plain
                        # what a same-shaped job after it is told (consider() caches it)
                        self.soft_plain = "; ".join(reasons) + plain
                    continue
                got = self.reserve(job, ms, wneed, g)
                if got is not None:
                    at = got
                    suffix = f"; reserved to start at t={_fmt_t(at)}"
                    break
                unknown = self.unknown_gpus(ms)
                if unknown:
                    suffix = (
                        f"; no start estimate: {unknown} {ms.name} GPUs are held by "
                        "jobs without an expected end"
                    )
        return "; ".join(reasons) + suffix, at

    def start(self, job: PendingJob, ms: _Model, plan: list[tuple[int, int]], g: int, k: int):
        # GPUs held for a reservation that this (short, backfilled) job borrows go back to that
        # reservation when it ends: its release must not be promised to a later reservation.
        protected = self.protected
        unheld = [max(len(self.free[i]) - protected[i], 0) for i, _ in plan]
        placement = self.take(ms, plan, g)
        self.starts.append(Start(job.id, placement, k))
        need = k * g
        for t in self.ancestry(job.team):
            self.used[(t, ms.name)] = self.used.get((t, ms.name), 0) + need
        if job.runtime_estimate_s is not None:
            end = self.now + job.runtime_estimate_s
            for (i, workers), own in zip(plan, unheld, strict=True):
                n = min(workers * g, own)
                if n:
                    ms.started_ends.append((end, i, n))
        else:
            ms.unknown_started += need

    # ------------------------------------------------------------------ why

    def never_fits(self, ms: _Model, w: int, g: int) -> str:
        cap = ms.pools["all"].cap
        if g > cap:
            return f"needs {g} {ms.name} GPUs per worker; the largest ready, healthy node has {cap}"
        return (
            f"gang of {w}x{g} {ms.name} GPUs can never fit: the ready, healthy {ms.name} nodes "
            f"have room for only {self.static_slots(ms, g)} workers of {g} GPUs"
        )

    def capacity_why(self, ms: _Model, view: Index, short: bool, w: int, g: int) -> str:
        now_view = ms.now["all"]
        key = (ms.name, w, g, id(view), view.version, now_view.version, len(ms.reservations))
        cached = self.why_cache.get(key)
        if cached is not None:
            return cached
        m = ms.name
        if w == 1:
            base = (
                f"needs {g} free {m} GPUs on one node; the largest free block is {view.max_block()}"
            )
        else:
            free = view.group_free(0)
            base = (
                f"gang of {w}x{g} {m} GPUs does not fit: free GPUs per node leave room for "
                f"{view.slots(g)} of {w} workers"
            )
            if free >= w * g:
                base += f" ({free} GPUs free in total, spread too thinly across nodes)"
        if view is not now_view and now_view.slots(g) >= w and ms.reservations:
            rj, rat = ms.reservations[0]
            base += (
                f"; the free GPUs are held for {rj} (reserved at t={_fmt_t(rat)}); "
                "an estimated end before then would let it backfill"
            )
        elif self.initial_slots(ms, g) >= w:
            base += "; the free GPUs went to higher-ranked jobs this cycle (priority, fair share)"
        self.why_cache[key] = base
        return base

    # ------------------------------------------------------------------ reservations

    def release_heap(self) -> list[tuple[float, int]]:
        """A heap of ``(expected release time, index into snapshot.running)``, built once.

        The time is ``expected_end`` (or ``releasing_at`` if sooner), never before ``now``.
        Building it is O(running) with a tiny constant; reservations then pop only the
        releases they need, in time order.
        """
        if self._release_heap is None:
            now = self.now
            heap = []
            unknown = []
            for k, r in enumerate(self.snap.running):
                end = r.expected_end
                rel = r.releasing_at
                if rel is not None and (end is None or rel < end):
                    end = rel
                if end is None:
                    unknown.append(k)
                else:
                    heap.append((end if end > now else now, k))
            heapq.heapify(heap)
            self._release_heap = heap
            self._unknown_runs = unknown
        return self._release_heap

    def unknown_gpus(self, ms: _Model) -> int:
        """GPUs of the model's eligible nodes held by jobs without an expected end."""
        self.release_heap()
        running = self.snap.running
        id_of = self.id_of
        node_model = self.node_model
        n = ms.unknown_started
        for k in self._unknown_runs:
            r = running[k]
            if r.id in self.gone or r.id in self.shrunk:
                continue
            for name, idxs in r.placement.items():
                i = id_of.get(name)
                if i is not None and node_model[i] == ms.name:
                    n += len(idxs)
        return n

    def reserve_later(self, job: PendingJob, ms: _Model, need: int) -> bool:
        """LAS: no reservation (which would hold GPUs idle) yet for ``job``: it has waited less
        than ``las_reserve_after_s`` and preemptible jobs of its class or lower hold enough GPUs
        of the model for it. Those GPUs change hands by attained service anyway (the job may
        preempt them once they have run longer than it), so holding GPUs idle for it mostly
        delays others; a cluster of non-preemptible work keeps its reservations."""
        after = self.cfg.las_reserve_after_s
        if not self.th or after <= 0 or not self.cfg.preemption:
            return False
        if self.now - job.submitted_at - job.attained_service_s >= after:
            return False
        levels = self.levels
        top = self.classes.get(job.priority_class, 0) * levels + levels - 1
        held = 0
        for key in (ms.name, None):
            for p, n in self.victim_gpus.get(key, {}).items():
                if p <= top:
                    held += n
        return held >= need

    def reserve(
        self, job: PendingJob, ms: _Model, w: int, g: int, hold: bool = True
    ) -> float | None:
        """Give ``job`` the model's EASY reservation if its gang fits on the release timeline.

        With ``hold=False`` only the start time is computed: nothing is held or emitted."""
        if hold and ms.easy_tries >= self.cfg.reservations_per_model + _EXTRA_RESERVATION_TRIES:
            return None
        if any(fg <= g and fw <= w for fw, fg in ms.easy_failed):
            return None
        if hold:
            ms.easy_tries += 1
        long_view = (ms.long or ms.now)["all"]
        base = long_view.cnt
        cap = ms.pools["all"].cap
        model = ms.name
        id_of = self.id_of
        node_model = self.node_model
        gone = self.gone
        shrunk = self.shrunk
        running = self.snap.running
        # Walk the releases in time order (running jobs from a heap copy, jobs started this
        # cycle from a sorted list), keeping the worker-slot count up to date in O(1) per
        # release; the gang fits at the first time slots >= w. Jobs preempted or shrunk this
        # cycle are skipped: their GPUs are promised to a preemptor.
        heap = list(self.release_heap())
        started = sorted(ms.started_ends)
        si = 0
        cnt: dict[int, int] = {}
        slots = long_view.slots(g)
        found = None
        # Releases an earlier reservation of this cycle already counts on are not available
        # again (conservative: they stay claimed whatever the time), so reservations never
        # promise the same GPUs twice.
        debt = dict(ms.claimed)

        def release(i: int, k: int) -> None:
            nonlocal slots
            d = debt.get(i)
            if d:
                used = d if d < k else k
                debt[i] = d - used
                k -= used
                if not k:
                    return
            old = cnt.get(i)
            if old is None:
                old = base[i]
            new = old + k
            cnt[i] = new
            slots += min(new, cap) // g - min(old, cap) // g

        while slots < w and (heap or si < len(started)):
            t_run = heap[0][0] if heap else _INF
            t_new = started[si][0] if si < len(started) else _INF
            t = t_run if t_run < t_new else t_new
            while heap and heap[0][0] == t:
                r = running[heapq.heappop(heap)[1]]
                if r.id in gone or r.id in shrunk:
                    continue
                for name, idxs in r.placement.items():
                    i = id_of.get(name)
                    if i is not None and idxs and node_model[i] == model:
                        release(i, len(idxs))
            while si < len(started) and started[si][0] == t:
                release(started[si][1], started[si][2])
                si += 1
            if slots >= w:
                found = t
        if not hold:
            return found
        if found is None:
            ms.easy_failed.append((w, g))
            return None
        hyp = long_view.clone()
        for node, c in cnt.items():
            hyp.set(node, min(c, cap))
        prefer = ms.ds_nodes.get(job.dataset) if job.dataset else None
        plan = hyp.place(w, g, prefer)
        assert plan is not None
        claimed = ms.claimed
        for node, workers in plan:
            k = workers * g
            released = hyp.cnt[node] - long_view.cnt[node]
            self.protect(ms, node, k - released)
            if released > 0:
                claimed[node] = claimed.get(node, 0) + (k if k < released else released)
            ms.reserved_nodes.add(node)
        ms.res_count += 1
        self.epoch += 1
        ms.min_res_at = min(ms.min_res_at, found)
        ms.reservations.append((job.id, found))
        self.reserves.append(Reserve(job.id, found, tuple(sorted(self.names[n] for n, _ in plan))))
        return found

    # ------------------------------------------------------------------ preemption

    def plan_preemption(self, job: PendingJob, ms: _Model, w: int, g: int):
        """Shrink elastic jobs, then preempt the cheapest eligible victims, so ``job`` fits.

        Returns ``(why, estimated_start)`` after emitting the decisions, or ``None``.
        """
        now = self.now
        model = ms.name
        prio = self.pending_rank(job)
        need = w * g
        chain = self.quota_chain(job.team, model)
        reclaim_team = None
        if chain:
            t, q = chain[0]
            if self.used.get((t, model), 0) + need <= q.guaranteed:
                reclaim_team = (t, q)
        # FIFO within a queue (LAS): a one-node job that has waited las_fifo_after_s may also
        # preempt jobs of its own queue submitted after it. Gangs do not: on the ITP trace that
        # more than doubled lost work.
        fifo = (
            bool(self.th)
            and self.cfg.las_fifo_one_node
            and w == 1
            and reclaim_team is None
            and now - job.submitted_at - job.attained_service_s >= self.cfg.las_fifo_after_s
        )
        # Defragmenting (LAS): a gang blocked only by fragmentation (enough GPUs free in total)
        # may move jobs of its class submitted after it, in any queue, if they fit in the GPUs
        # left free elsewhere: they restart at once there and whole nodes drain for the gang.
        base_view = (ms.long or ms.now)["all"]
        defrag = (
            bool(self.th)
            and self.cfg.las_defragment
            and w > 1
            and reclaim_team is None
            and base_view.group_free(0) >= w * g
        )
        fail_key = (prio, reclaim_team is not None, fifo, defrag)
        # A job of the same or a smaller shape failed, so this one fails too; with FIFO within
        # a queue or defragmenting, only if that job was submitted no later (fewer jobs came
        # after it).
        mine = (job.submitted_at, job.id) if fifo or defrag else ()
        failed = ms.pre_failed.get(fail_key, ())
        if any(fg <= g and fw <= w and fm <= mine for fw, fg, fm in failed):
            return None
        lowest = min(
            (p for m, p in self.min_victim.items() if m is None or m == model), default=None
        )
        if (
            reclaim_team is None
            and not self.has_elastic
            and not self.has_releasing
            and (lowest is None or lowest > prio or (lowest == prio and not fifo))
            and not defrag
        ):
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        self.ensure_runs()
        if (
            reclaim_team is None
            and not ms.releasing
            and not ms.elastic
            and not any(p < prio or (fifo and p == prio) for p in ms.victims)
            and not defrag
        ):
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        own = set(self.ancestry(job.team))
        gone = self.gone

        def borrower(run: _Run) -> str | None:
            if reclaim_team is None:
                return None
            for t, q in self.quota_chain(run.job.team, model):
                if t in own:
                    return None
                if self.used.get((t, model), 0) - self.reclaimed.get((t, model), 0) > q.guaranteed:
                    return t
            return None

        # Candidates: (kind, cost, tiebreak, run, on, units, reason_team). Kind 0: already
        # being preempted (free of further cost); 1: an elastic job's spare worker; 2: a victim.
        # ``on`` is read-only: for kinds 0 and 2 it is the run's own map, which later calls reuse.
        cands = []
        for run in ms.releasing:
            if run.job.id not in gone:
                cands.append((0, 0.0, run.job.id, run, run.on, None, None))
        for run in ms.elastic:
            rid = run.job.id
            if rid in gone or rid in self.shrunk:
                continue
            bt = None if run.prio < prio else borrower(run)
            if run.prio >= prio and bt is None:
                continue
            for u in self.shrink_units(run):
                cands.append((1, 0.0, rid, run, {u[0]: len(u[1])}, [u], bt))
        reserved = ms.reserved_nodes
        lower = [lst for p, lst in sorted(ms.victims.items()) if p < prio]
        found = 0
        limit = _MAX_NODE_CANDIDATES if w == 1 else _MAX_VICTIM_CANDIDATES
        if len(lower) <= 1 or self.cfg.las_lowest_queue_first:
            # under the candidate cap, the lowest ranks (each cheapest first) as they are tried
            source = itertools.chain.from_iterable(lower)
        elif self.runs_unique and sum(map(len, lower)) <= limit:
            # all of them are taken, and candidates are sorted by (kind, cost, id) below, which
            # orders them as the merge would (ids are unique): skip the merge
            source = itertools.chain.from_iterable(lower)
        else:
            source = heapq.merge(*lower)
        for cost, rid, run in source:
            if rid in gone or not reserved.isdisjoint(run.on):
                continue
            cands.append((2, cost, rid, run, run.on, None, None))
            found += 1
            if found >= limit:
                break
        later: set[str] = set()  # victims submitted after the job (submission-order rules)

        def add_submitted_later(victims) -> None:
            for cost, rid, run in victims:
                sub = run.job.submitted_at
                if sub is None or (sub, rid) <= mine or rid in gone:
                    continue
                if not reserved.isdisjoint(run.on):
                    continue
                cands.append((2, cost, rid, run, run.on, None, None))
                later.add(rid)

        if fifo and prio in ms.victims:
            add_submitted_later(ms.victims[prio])
        if defrag:
            levels = self.levels
            top = self.classes.get(job.priority_class, 0) * levels + levels - 1
            for p in sorted(ms.victims):
                if p < prio or p > top:
                    continue  # lower queues are ordinary victims; higher classes are not moved
                add_submitted_later(ms.victims[p])
        if reclaim_team is not None:
            for p in sorted(ms.victims):
                if p < prio:
                    continue
                for cost, rid, run in ms.victims[p]:
                    if rid in gone or not reserved.isdisjoint(run.on):
                        continue
                    bt = borrower(run)
                    if bt is not None:
                        cands.append((2, cost, rid, run, run.on, None, bt))
        if not cands:
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        self.preempt_attempts += 1
        tier = None
        if self.cfg.las_lowest_queue_first:
            # Moves (later-submitted jobs under submission order or defragmenting, borrowed GPUs
            # under reclaim) first; then victims of lower ranks, the lowest rank first: a lower
            # class, then the LAS queue with the most attained service.
            def tier(c: tuple) -> int:
                rank = c[3].prio
                return -1 if rank >= prio or c[2] in later else rank

            cands.sort(key=lambda c: (c[0], tier(c), c[1], c[2]))
        else:
            cands.sort(key=_KIND_COST_ID)
        picked = None
        if w == 1 and all(c[0] != 1 for c in cands):
            picked = self.cheapest_node(cands, (ms.long or ms.now)["all"], g, tier)
        cands = picked if picked is not None else cands[:_MAX_VICTIM_CANDIDATES]
        base = (ms.long or ms.now)["all"]
        bcnt = base.cnt
        cap = ms.pools["all"].cap
        # What-if counts of touched nodes and the resulting worker slots, updated in O(1) per
        # node: fitting is "slots >= w" (the tiered placement always succeeds then).
        cnt: dict[int, int] = {}
        slots = base.slots(g)

        def add(on: dict[int, int], sign: int) -> None:
            nonlocal slots
            for i, k in on.items():
                old = cnt.get(i)
                if old is None:
                    old = bcnt[i]
                new = old + sign * k
                cnt[i] = new
                slots += min(new, cap) // g - min(old, cap) // g

        chosen = []
        units_on: dict[str, dict[int, int]] = {}
        fits = False
        for c in cands:
            if c[0] == 1:
                d = units_on.setdefault(c[2], {})
                for i, k in c[4].items():
                    d[i] = d.get(i, 0) + k
            elif c[0] == 2 and c[2] in units_on:
                # A fully preempted elastic job also frees the units already counted.
                d = units_on[c[2]]
                on = {i: k - d.get(i, 0) for i, k in c[4].items() if k > d.get(i, 0)}
                c = c[:4] + (on,) + c[5:]
            add(c[4], 1)
            chosen.append(c)
            if slots >= w:
                fits = True
                break
        if not fits:
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        # Drop what is not needed, most expensive first (victims before elastic shrinks).
        kept = []
        for c in reversed(chosen):
            add(c[4], -1)
            if slots < w:
                add(c[4], 1)
                kept.append(c)
        chosen = kept[::-1]
        hyp = base.clone()
        for i, c in cnt.items():
            hyp.set(i, min(max(c, 0), cap))
        prefer = ms.ds_nodes.get(job.dataset) if job.dataset else None
        plan = hyp.place(w, g, prefer)
        assert plan is not None
        take = {i: workers * g for i, workers in plan}
        freed: dict[int, int] = {}
        for c in chosen:
            for i, k in c[4].items():
                freed[i] = freed.get(i, 0) + k
        for c in list(reversed(chosen)):
            if all(take.get(i, 0) <= base.cnt[i] + freed[i] - k for i, k in c[4].items()):
                chosen.remove(c)
                for i, k in c[4].items():
                    freed[i] -= k
        if defrag and not self.moves_fit(chosen, later, base, take, cap):
            ms.pre_failed.setdefault(fail_key, []).append((w, g, mine))
            return None
        # Emit: preemptions, shrinks, and a reservation at the end of the grace period.
        grace = self.cfg.preemption_grace_s
        at = now
        n_gpus = 0
        for c in chosen:
            if c[0] == 0:
                self.gone.add(c[2])
                n_gpus += sum(c[4].values())
                at = max(at, c[3].job.releasing_at)
            else:
                at = max(at, now + grace)
        victims = [c for c in chosen if c[0] == 2]
        victim_ids = {c[2] for c in victims}
        by_job: dict[str, list] = {}
        for c in chosen:
            if c[0] == 1 and c[2] not in victim_ids:
                by_job.setdefault(c[2], []).extend(c[5])
        for c in victims:
            run = c[3]
            self.gone.add(c[2])
            n_gpus += sum(c[4].values())
            if run.prio % self.levels < self.fifo_queues:
                basis = "was submitted last of the jobs in its queue (served oldest first)"
            else:
                basis = "loses the least work since its last checkpoint"
            if run.prio < prio and self.classes.get(run.job.priority_class, 0) == self.classes.get(
                job.priority_class, 0
            ):
                # Same class: only the attained-service queue separates them (LAS).
                reason = (
                    f"attained service: {job.id} ({job.priority_class}) needs {need} {model} "
                    f"GPUs and has received less GPU service than {c[2]}, which {basis}"
                )
            elif c[2] in later and defrag:
                reason = (
                    f"defragment: {job.id} needs {w}x{g} {model} GPUs, as many are free but "
                    f"spread across nodes; {c[2]}, submitted after it, can restart on the GPUs "
                    "left free on other nodes"
                )
            elif c[2] in later:
                reason = (
                    f"submission order: {job.id} needs {g} {model} GPUs on one node and was "
                    f"submitted before {c[2]}, in the same attained-service queue; {c[2]} {basis}"
                )
            elif run.prio < prio:
                reason = (
                    f"priority: {job.id} ({job.priority_class}) needs {need} {model} GPUs; "
                    f"{c[2]} ({run.job.priority_class}) {basis}"
                )
            else:
                t, q = reclaim_team
                reason = (
                    f"reclaim: team {t} is within its guarantee of {q.guaranteed} {model} GPUs "
                    f"and reclaims GPUs borrowed by team {c[6]}"
                )
                for bt in self.ancestry(run.job.team):
                    self.reclaimed[(bt, model)] = self.reclaimed.get((bt, model), 0) + run.gpus
            self.preempts.append(Preempt(c[2], reason, grace))
        shrink_gpus = 0
        for rid in sorted(by_job):
            run = self.runs[rid]
            units = by_job[rid]
            self.shrunk[rid] = units
            removed: dict[str, set[int]] = {}
            for i, idxs in units:
                removed.setdefault(self.names[i], set()).update(idxs)
                shrink_gpus += len(idxs)
            kept = {}
            for name in sorted(run.job.placement):
                left = tuple(x for x in run.job.placement[name] if x not in removed.get(name, ()))
                if left:
                    kept[name] = left
            self.resizes.append(Resize(rid, run.job.workers - len(units), kept))
        for i, k in take.items():
            self.protect(ms, i, min(k, base.cnt[i]))
            ms.reserved_nodes.add(i)
        self.epoch += 1
        ms.min_res_at = min(ms.min_res_at, at)
        ms.reservations.append((job.id, at))
        self.reserves.append(Reserve(job.id, at, tuple(sorted(self.names[i] for i in take))))
        parts = []
        if n_gpus:
            parts.append(f"waiting for {n_gpus} preempted GPUs to be released")
        if shrink_gpus:
            parts.append(f"waiting for {shrink_gpus} GPUs released by shrinking elastic jobs")
        if victims or by_job:
            when = f"grace {_fmt_s(grace)} s"
        else:
            when = f"expected at t={_fmt_t(at)}"
        return f"{'; '.join(parts)} ({when})", at

    @staticmethod
    def moves_fit(chosen: list, later: set[str], base: Index, take: dict[int, int], cap: int):
        """Defragmenting: every moved job's workers fit, node by node, in the GPUs that stay
        free outside the gang's nodes (largest workers first, into the largest holes)."""
        workers = []
        for c in chosen:
            if c[2] in later:
                job = c[3].job
                workers.extend([job.gpus_per_worker] * job.workers)
        if not workers:
            return True
        holes = sorted(
            (min(k, cap) for i, k in base.cnt.items() if k and i not in take), reverse=True
        )
        for need in sorted(workers, reverse=True):
            for h, room in enumerate(holes):
                if room >= need:
                    holes[h] = room - need
                    break
            else:
                return False
            holes.sort(reverse=True)
        return True

    @staticmethod
    def cheapest_node(
        cands: list, base: Index, g: int, tier: Callable[[tuple], int] | None = None
    ) -> list | None:
        """For a one-node job of ``g`` GPUs: the candidates that complete one node for the
        least lost work (each node's cheapest candidates first), or None if no node completes.
        With ``tier`` (the candidates are sorted by it first), a node's highest tier counts
        before its lost work.

        Adding candidates cheapest-first over the whole cluster would scatter them, and on a
        busy, fragmented cluster no node completes before the candidate cap."""
        bcnt = base.cnt
        have: dict[int, int] = {}
        top: dict[int, int] = {}
        cost: dict[int, float] = {}
        picks: dict[int, list] = {}
        best = None
        for c in cands:  # sorted: by tier, then cheapest first
            t = tier(c) if tier is not None else 0
            if best is not None and (t, c[1]) > best[0][:2]:
                # candidates ascend by (tier, cost) and costs are >= 0: a node completed from
                # here on has at least this tier and costs at least c[1]; it cannot win
                break
            for i, k in c[4].items():
                h = have.get(i)
                if h is None:
                    h = bcnt[i]
                if h >= g:
                    continue  # this node is complete already
                have[i] = h + k
                top[i] = max(top.get(i, t), t)
                cost[i] = cost.get(i, 0.0) + c[1]
                picks.setdefault(i, []).append(c)
                if h + k >= g:
                    key = (top[i], cost[i], len(picks[i]), i)
                    if best is None or key < best[0]:
                        best = (key, picks[i])
        return None if best is None else list(best[1])

    def shrink_units(self, run: _Run) -> list[tuple[int, tuple[int, ...]]]:
        """Workers an elastic job can give up (down to its minimum), last nodes first."""
        job = run.job
        spare = job.workers - max(1, job.elastic.min_workers)
        if spare <= 0:
            return []
        g = job.gpus_per_worker
        units = []
        for name in sorted(job.placement, reverse=True):
            i = self.id_of.get(name)
            idxs = sorted(job.placement[name], reverse=True)
            for s in range(0, len(idxs) - g + 1, g):
                if len(units) == spare:
                    return units
                if i is not None and self.node_model[i] == run.model:
                    units.append((i, tuple(sorted(idxs[s : s + g]))))
        return units

    # ------------------------------------------------------------------ elastic growth

    def grow_elastic(self) -> None:
        """Grow elastic running jobs into idle GPUs that no waiting job can use this cycle."""
        if not self.has_elastic:
            return
        self.ensure_runs()
        growers = []
        for run in self.runs.values():
            e = run.job.elastic
            if e is None or run.job.workers >= e.max_workers:
                continue
            rid = run.job.id
            if rid in self.gone or rid in self.shrunk or run.job.releasing_at is not None:
                continue
            ms = self.models.get(run.model)
            if ms is None or ms.capacity_wait:
                continue
            growers.append(run)
        growers.sort(key=lambda r: (-r.prio, r.job.id))
        for run in growers:
            job = run.job
            ms = self.models[run.model]
            g = job.gpus_per_worker
            extra = job.elastic.max_workers - job.workers
            for t, q in self.quota_chain(job.team, run.model):
                room = q.guaranteed + q.borrow_limit - self.used.get((t, run.model), 0)
                extra = min(extra, room // g)
            if extra <= 0:
                continue
            view = (ms.long or ms.now)["all"]
            mine = {self.id_of[n] for n in job.placement if n in self.id_of}
            racks = {self.rack[i] for i in mine}
            cands = [i for i in view.pool.nodes if view.cnt[i] >= g]
            if not cands:
                continue
            cands.sort(key=lambda i: (i not in mine, self.rack[i] not in racks, view.cnt[i], i))
            plan = []
            left = extra
            for i in cands:
                k = min(view.cnt[i] // g, left)
                plan.append((i, k))
                left -= k
                if not left:
                    break
            added = self.take(ms, plan, g)
            merged = {name: tuple(idx) for name, idx in job.placement.items()}
            for name, idx in added.items():
                merged[name] = tuple(sorted(merged.get(name, ()) + idx))
            grown = extra - left
            for t in self.ancestry(job.team):
                self.used[(t, run.model)] = self.used.get((t, run.model), 0) + grown * g
            self.resizes.append(
                Resize(job.id, job.workers + grown, {n: merged[n] for n in sorted(merged)})
            )


def decide(snapshot: Snapshot) -> Decisions:
    """Decide one scheduling cycle for ``snapshot`` (see the module docstring for the rules).

    Deterministic and side-effect free. Every pending job appears exactly once, either in
    ``start`` or in ``pending`` (in queue order, with a non-empty ``why``).
    """
    return _Cycle(snapshot).run()
