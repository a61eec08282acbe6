"""What ``decide`` carries from one call to the next, and why it never changes a decision.

Consecutive cycles (the live loop, the simulator) nearly always see the same nodes, teams and
running jobs; only free GPUs and a few jobs change. So ``decide`` keeps, across calls:

- the static topology of recently seen eligible-node sets (:class:`_Topology`: pools per GPU
  model, dataset caches, node sizes), keyed by value, checked by node identity first;
- the fair-share standings of recently seen team lists, keyed by value;
- per pool, the capacity index the last cycle handed back, repaired where counts differ;
- the eligible nodes' checked free GPUs, checked again only for nodes passed as new objects;
- per running job, its LAS rank and the time until which it holds (``ranking._rank_span``), and
  its planner view (``victims``) and the nodes its end releases (``backfill``), checked by the
  identity of the objects passed;
- pending jobs' LAS ranks, keyed by the fields they are computed from;
- the cycle's summary of the running jobs (``running``), updated for the jobs that changed.

Every hit is exactly what a rebuild would give (keys hold every field read), so decisions never
depend on the memos; :func:`clear` forgets them all, as a new process would. Racing threads only
cost each other rebuilds: entries are replaced whole (the running summary and the capacity indexes
are taken by one call at a time and handed back when its cycle is done).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from scheduler.policy.capacity import Index, Pool
from scheduler.policy.fairshare import standings
from scheduler.policy.model import Node, Pending, RunningJob, Team

_MEMO_SIZE = 8


def _memo_put(memo: dict[Any, Any], key: tuple[Any, ...], value: object) -> None:
    """Insert into a small memo, evicting the oldest entry; safe if threads race (a lost
    eviction or insertion only costs a rebuild later, never a wrong answer)."""
    while len(memo) >= _MEMO_SIZE:
        try:
            memo.pop(next(iter(memo)), None)
        except (RuntimeError, StopIteration):
            break
    memo[key] = value


_STANDINGS_MEMO: dict[tuple[Any, ...], tuple[dict[str, int], int]] = {}


def _standings(teams: Sequence[Team], band: float) -> tuple[dict[str, int], int]:
    # Memoised by value (the fields fair share reads): teams rarely change between cycles.
    key = (band, tuple((t.name, t.parent, t.weight, t.usage_gpu_s) for t in teams))
    out = _STANDINGS_MEMO.get(key)
    if out is None:
        out = standings(teams, band)
        _memo_put(_STANDINGS_MEMO, key, out)
    return out


class _Topology:
    """Static facts about a set of eligible nodes: topology order, pools per GPU model
    (all / spot / on-demand), dataset caches, node sizes. Immutable once built."""

    __slots__ = ("order", "names", "id_of", "rack", "node_model", "models", "gpu_of")

    def __init__(self, eligible: list[Node], routed: bool = False) -> None:
        # With clusters (routing, rule 3b) each (GPU model, cluster, capacity type) is a model
        # of its own to every rule, so no gang, reservation or preemption plan spans two
        # clusters or two prices; ``gpu_of`` maps it back to the GPU model quotas count.
        key_of = [pool_key(n) if routed else n.gpu_model for n in eligible]
        self.order = sorted(
            range(len(eligible)),
            key=lambda p: (
                key_of[p],
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
        self.node_model = [key_of[p] for p in self.order]
        self.gpu_of = {key_of[p]: eligible[p].gpu_model for p in self.order}
        gpus = [n.gpus for n in elig]
        domain = [n.nvlink_domain for n in elig]
        fabric = [n.fabric for n in elig]
        groups: dict[str, list[int]] = {}
        for i in range(len(elig)):
            groups.setdefault(self.node_model[i], []).append(i)
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
_TOPOLOGY_MEMO: dict[tuple[Any, ...], _Topology] = {}


def _static(n: Node) -> tuple[Any, ...]:
    return (
        n.name,
        n.gpu_model,
        n.gpus,
        n.fabric,
        n.rack,
        n.nvlink_domain,
        n.spot,
        tuple(n.datasets),
        n.cluster,
    )


# The eligible nodes of the last call and their topology. Callers (live loop, simulator) pass
# the same Node objects for unchanged nodes, so comparing identities first and the static fields
# of changed nodes only is O(changed) instead of building the whole value key; the hit is still
# by value, so it is exactly what a rebuild would give. One tuple, replaced atomically.
_LAST_TOPOLOGY: list[tuple[list[Node], _Topology, bool] | None] = [None]


def pool_key(n: Node) -> str:
    """With clusters, the pool a node belongs to: ``model@cluster``, ``/spot`` for spot."""
    return f"{n.gpu_model}@{n.cluster}/spot" if n.spot else f"{n.gpu_model}@{n.cluster}"


def _topology(eligible: list[Node], routed: bool = False) -> _Topology:
    last = _LAST_TOPOLOGY[0]
    if last is not None:
        prev, topo, was_routed = last
        if (
            was_routed == routed
            and len(prev) == len(eligible)
            and all(a is b or _static(a) == _static(b) for a, b in zip(prev, eligible, strict=True))
        ):
            _LAST_TOPOLOGY[0] = (eligible, topo, routed)
            return topo
    key = (routed, *(_static(n) for n in eligible))
    known = _TOPOLOGY_MEMO.get(key)
    if known is None:
        known = _Topology(eligible, routed)
        _memo_put(_TOPOLOGY_MEMO, key, known)
    topo = known
    _LAST_TOPOLOGY[0] = (eligible, topo, routed)
    return topo


# The eligible nodes of the last call (topology order) and each one's checked free GPUs (tuples,
# never changed): a node passed as the same object has the same free GPUs. One tuple, replaced
# atomically.
_LAST_FREE: list[tuple[list[Node], list[tuple[int, ...]]] | None] = [None]


def _checked_free(n: Node) -> tuple[int, ...]:
    f = n.free_gpus
    # The codec guarantees distinct in-range indices; dataclasses built directly get a cheap
    # check (a GPU listed twice must never be placed twice).
    if f and (len(f) > n.gpus or len(set(f)) != len(f) or min(f) < 0 or max(f) >= n.gpus):
        return tuple(sorted({g for g in f if 0 <= g < n.gpus}))
    return tuple(f)


def _free_lists(elig: list[Node]) -> list[list[int]]:
    """Each eligible node's free GPU indices, distinct and in range (a fresh list per node, the
    cycle's own); only the nodes not passed as the same object as last call are checked."""
    last = _LAST_FREE[0]
    if last is not None and len(last[0]) == len(elig):
        checked = list(last[1])
        prev = last[0]
        for i in range(len(elig)):
            if prev[i] is not elig[i]:
                checked[i] = _checked_free(elig[i])
    else:
        checked = [_checked_free(n) for n in elig]
    _LAST_FREE[0] = (elig, checked)
    return list(map(list, checked))


# Per running job, facts of the previous call that stay true while the caller passes the same
# RunningJob object (the simulator and the live loop rebuild a job's object only when one of its
# fields changes). A hit is checked by identity and gives exactly what a rebuild gives; each
# call keeps only the entries of its own running jobs, so the memo holds one call's worth.
# Both are replaced atomically; concurrent callers only cost each other rebuilds.
#
# LAS rank: (job, valid_from, valid_until, rank), with ``classes`` and thresholds it holds for.
_LAST_RANKS: list[tuple[dict[str, int], tuple[Any, ...], dict[str, tuple[Any, ...]]]] = [
    ({}, ((), 0.0), {})
]


def _same_service(a: RunningJob, b: RunningJob) -> bool:
    """Whether the two have the same LAS rank at every time (the fields it is computed from)."""
    return (
        a.started_at == b.started_at
        and a.attained_service_s == b.attained_service_s
        and a.workers == b.workers
        and a.gpus_per_worker == b.gpus_per_worker
        and a.priority_class == b.priority_class
    )


# Pending jobs' LAS ranks by the fields a rank is computed from (class, attained service,
# workers, GPUs per worker): (classes, (thresholds, long_run), {fields: rank}). A rank is a pure
# function of those, so a hit is a rebuild; the entry is replaced whole when the classes or
# thresholds differ, or emptied when large (attained service takes many values over time).
# Concurrent callers write equal values for equal keys.
_PENDING_RANKS: list[tuple[dict[str, int], tuple[Any, ...], dict[tuple[Any, ...], int]]] = [
    ({}, ((), 0.0), {})
]
_PENDING_RANKS_MAX = 4096


# The cycle's summary of the running jobs (``running``): (key, now, job ids, job id -> job, job id ->
# (rank span or None, model, rank or None, GPUs), job id -> rank, {(model, rank): preemptible
# jobs}, {model: {rank: GPUs}}, heap of (span end, job id), elastic jobs, releasing jobs); ``key``
# is what ranks depend on besides the job and the time: (classes, thresholds, long_run). At most
# one entry: a call pops it (atomic), owns it while its cycle runs, and puts it back after.
_LAST_SUMMARY: list[tuple[Any, ...]] = []


class RunView(NamedTuple):
    """The planner's view of a running job (``victims``), kept by job id between calls. The
    placement part (``placement`` .. ``on``) is checked by the identity of the placement
    mapping, which callers keep while a job's placement is unchanged; the rest by the identity
    of the job and the topology, and ``run`` by its rank and protection too (both recomputed
    every call)."""

    placement: Any  # the job's placement mapping, as passed
    topology: Any  # the _Topology its node indexes refer to
    model: str  # GPU model (or pool, rule 3b) the job's GPUs count for
    total: int  # GPUs the job holds
    on: dict[int, int]  # GPUs per eligible node index, of that model
    job: RunningJob
    rank: int
    protected: bool
    run: Any  # its state._Run
    checkpoint_due: float | None
    quiet: bool  # neither releasing nor elastic
    # the node the model was read from: "" if not read from a node, None if not from the first
    # node of its placement (then it is read afresh next call)
    model_node: str | None
    lost_base: float  # the time its lost work counts from
    end: float | None  # expected end, or the end of its grace if sooner


_LAST_PLACEMENTS: list[dict[str, RunView]] = [{}]

# Per running job, the eligible nodes its placement releases, by GPU model (``backfill``):
# ``(placement mapping, topology, {model: ((node, GPUs), ...)})``, valid while the caller passes
# the same mapping and the topology is the same object.
_LAST_RELEASE_NODES: list[dict[str, tuple[Any, Any, dict[str, tuple[tuple[int, int], ...]]]]] = [{}]


# Per pool, an index the last cycle handed back (``keep_index``). Between calls only a few nodes'
# counts change, so repairing it costs O(pool nodes) compares plus O(changed nodes) updates
# instead of indexing every node again, and nothing is copied. A call takes the entry out
# (atomic ``dict.pop``) and owns it until its cycle hands it back, so no two calls ever change
# the same index; a concurrent call finds none and builds its own.
_LAST_INDEX: dict[int, tuple[Pool, Index]] = {}


def _fresh_index(pool: Pool, free: list[list[int]]) -> Index:
    """An index of ``pool`` with each node's free GPUs, the cycle's own: the same state as
    ``Index(pool, {i: len(free[i]) for i in pool.nodes})`` (counts, buckets, histograms, empty
    slot memo, version 0), repaired from the index an earlier cycle handed back when there is
    one (any state of it: every node's count is compared)."""
    last = _LAST_INDEX.pop(id(pool), None)
    if last is None or last[0] is not pool:
        return Index(pool, {i: len(free[i]) for i in pool.nodes})
    index = last[1]
    cnt = index.cnt
    for i in pool.nodes:
        c = len(free[i])
        if cnt[i] != c:
            index.set(i, c)
    index._slots = {}
    index.version = 0
    return index


def keep_index(pool: Pool, index: Index) -> None:
    """Hand ``index`` back for the next call's :func:`_fresh_index` of ``pool``, once the cycle
    that got it no longer reads or changes it."""
    if len(_LAST_INDEX) >= 4 * _MEMO_SIZE and id(pool) not in _LAST_INDEX:
        _LAST_INDEX.clear()
    _LAST_INDEX[id(pool)] = (pool, index)


# The last call's waiting jobs by id (``Pending``, immutable): a job told the same thing again,
# without a start estimate, gets the same object back instead of a new one (compared by value,
# so a hit is what a new object would be).
_LAST_PENDING: list[dict[str, Pending]] = [{}]


def clear() -> None:
    """Forget everything earlier calls left behind (benchmarks and tests of a cold cycle)."""
    _TOPOLOGY_MEMO.clear()
    _STANDINGS_MEMO.clear()
    _LAST_INDEX.clear()
    _LAST_TOPOLOGY[0] = None
    _LAST_FREE[0] = None
    _LAST_RANKS[0] = ({}, ((), 0.0), {})
    _PENDING_RANKS[0] = ({}, ((), 0.0), {})
    _LAST_PLACEMENTS[0] = {}
    _LAST_RELEASE_NODES[0] = {}
    _LAST_SUMMARY.clear()
    _LAST_PENDING[0] = {}
