"""Free-capacity index and topology-aware gang placement for one scheduling cycle.

A :class:`Pool` is the static shape of a set of eligible nodes of one GPU model: which NVLink
domain, rack and fabric each node belongs to. An :class:`Index` is a mutable view of how many
GPUs each node of a pool can give right now (or at some future time, for reservations), kept as
histograms so that the questions the engine asks every job are cheap:

- ``slots(g)``: how many workers of ``g`` GPUs fit in the whole pool, in O(max GPUs per node),
  memoised until the index changes, so a job that cannot fit is rejected without a search;
- ``place(w, g, ...)``: where a gang of ``w`` workers of ``g`` GPUs goes, by the topology rules:
  one node if it fits; else one NVLink domain; else one rack; else the fewest racks within one
  fabric; else the fewest fabrics. Among equal choices best-fit (the smallest group or node that
  fits) so that large free blocks stay intact; ties go to the lowest node in topology order.

Guarantees: ``place`` returns ``None`` exactly when ``slots(g) < w``; otherwise a list of
``(node, workers)`` whose total is ``w`` and where each node has at least ``workers * g``
GPUs counted in the index. Everything is deterministic (no iteration over string sets).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet

__all__ = ["Pool", "Index"]


class Pool:
    """Static topology of a set of nodes (global node ids in topology order) of one GPU model."""

    __slots__ = (
        "nodes",
        "cap",
        "groups_of",
        "members",
        "domains",
        "racks",
        "fabrics",
        "fabric_racks",
        "fabric_of",
        "rack_of",
    )

    def __init__(
        self,
        nodes: Sequence[int],
        gpus: Sequence[int],
        domain: Sequence[str],
        rack: Sequence[str],
        fabric: Sequence[str],
    ) -> None:
        """``nodes`` are global ids (ascending); ``gpus``/``domain``/... are indexed by global id."""
        self.nodes = list(nodes)
        self.cap = max((gpus[n] for n in nodes), default=0)
        # Group 0 is the whole pool; then multi-node NVLink domains, racks, fabrics.
        members: list[list[int]] = [list(self.nodes)]
        groups_of: dict[int, list[int]] = {n: [0] for n in self.nodes}

        def build(keyfn: Callable[[int], str]) -> tuple[list[int], dict[str, int]]:
            by_key: dict[str, list[int]] = {}
            for n in self.nodes:
                by_key.setdefault(keyfn(n), []).append(n)
            gids = []
            ids: dict[str, int] = {}
            for key in sorted(by_key):
                gid = len(members)
                members.append(by_key[key])
                ids[key] = gid
                gids.append(gid)
                for n in by_key[key]:
                    groups_of[n].append(gid)
            return gids, ids

        # A node's own NVLink domain (or none) adds nothing beyond "one node".
        dom_count: dict[str, int] = {}
        for n in self.nodes:
            if domain[n]:
                dom_count[domain[n]] = dom_count.get(domain[n], 0) + 1
        multi = [n for n in self.nodes if domain[n] and dom_count[domain[n]] > 1]
        by_dom: dict[str, list[int]] = {}
        for n in multi:
            by_dom.setdefault(domain[n], []).append(n)
        self.domains = []
        for key in sorted(by_dom):
            gid = len(members)
            members.append(by_dom[key])
            self.domains.append(gid)
            for n in by_dom[key]:
                groups_of[n].append(gid)
        # Racks are named within a fabric; nodes without a rack name share one unnamed rack.
        self.racks, rack_ids = build(lambda n: f"{fabric[n]}\0{rack[n]}")
        self.fabrics, fabric_ids = build(lambda n: fabric[n])
        self.rack_of = {n: rack_ids[f"{fabric[n]}\0{rack[n]}"] for n in self.nodes}
        self.fabric_racks: dict[int, list[int]] = {f: [] for f in self.fabrics}
        self.fabric_of: dict[int, int] = {}
        for key, gid in rack_ids.items():
            f = fabric_ids[key.split("\0", 1)[0]]
            self.fabric_racks[f].append(gid)
            self.fabric_of[gid] = f
        self.members = members
        self.groups_of = {n: tuple(g) for n, g in groups_of.items()}


class Index:
    """Mutable per-node GPU counts over a :class:`Pool`, with histograms per topology group."""

    __slots__ = ("pool", "cnt", "buckets", "ghist", "_slots", "version")

    def __init__(self, pool: Pool, counts: dict[int, int] | None) -> None:
        """Index ``pool`` with ``counts[node]`` usable GPUs per node (every pool node present);
        with ``None``, an empty shell that :meth:`clone` fills."""
        self.pool = pool
        if counts is None:
            self.cnt: dict[int, int] = {}
            self.buckets: list[list[int]] = []
            self.ghist: list[list[int]] = []
            self._slots: dict[int, int] = {}
            self.version = 0
            return
        cap = pool.cap
        self.cnt = {n: counts[n] for n in pool.nodes}
        self.buckets = [[] for _ in range(cap + 1)]
        self.ghist = [[0] * (cap + 1) for _ in pool.members]
        for n in pool.nodes:  # ascending ids, so every bucket starts sorted
            c = self.cnt[n]
            self.buckets[c].append(n)
            for gid in pool.groups_of[n]:
                self.ghist[gid][c] += 1
        self._slots = {}
        self.version = 0  # bumped on every change, so callers can memoise answers

    def clone(self) -> Index:
        """An independent copy (for what-if planning: reservations, preemption)."""
        # through __init__, not Index.__new__: a class compiled by mypyc has no bare __new__
        new = Index(self.pool, None)
        new.cnt = dict(self.cnt)
        new.buckets = [list(b) for b in self.buckets]
        new.ghist = [list(h) for h in self.ghist]
        new._slots = dict(self._slots)
        new.version = self.version
        return new

    def set(self, n: int, c: int) -> None:
        """Set node ``n``'s usable count to ``c`` (clamped to the pool's node size range)."""
        old = self.cnt[n]
        if c == old:
            return
        if c > self.pool.cap:
            c = self.pool.cap
        b = self.buckets[old]
        del b[bisect_left(b, n)]
        insort(self.buckets[c], n)
        for gid in self.pool.groups_of[n]:
            h = self.ghist[gid]
            h[old] -= 1
            h[c] += 1
        self.cnt[n] = c
        self._slots.clear()
        self.version += 1

    def max_block(self) -> int:
        """Largest usable count on any single node."""
        for c in range(self.pool.cap, 0, -1):
            if self.buckets[c]:
                return c
        return 0

    def slots(self, g: int) -> int:
        """How many workers of ``g`` GPUs fit in the pool (each worker on one node)."""
        s = self._slots.get(g)
        if s is None:
            s = self.group_slots(0, g)
            self._slots[g] = s
        return s

    def group_slots(self, gid: int, g: int) -> int:
        """How many workers of ``g`` GPUs fit in group ``gid``."""
        h = self.ghist[gid]
        return sum(h[c] * (c // g) for c in range(g, len(h)) if h[c])

    def group_free(self, gid: int) -> int:
        """Usable GPUs in group ``gid``."""
        h = self.ghist[gid]
        return sum(c * h[c] for c in range(1, len(h)))

    def nodes_with(self, g: int) -> int:
        """Number of nodes with at least ``g`` usable GPUs."""
        return sum(len(self.buckets[c]) for c in range(g, len(self.buckets)))

    # ------------------------------------------------------------------ placement

    def pick_node(self, need: int, prefer: AbstractSet[int] | None = None) -> int | None:
        """Best-fit node with at least ``need`` usable GPUs; nodes in ``prefer`` win first."""
        buckets = self.buckets
        top = len(buckets)
        if need >= top:
            return None
        need = max(need, 1)
        if prefer:
            for c in range(need, top):
                for n in buckets[c]:
                    if n in prefer:
                        return n
        for c in range(need, top):
            b = buckets[c]
            if b:
                return b[0]
        return None

    def pick_node_after(
        self, counts: dict[int, int], need: int, prefer: AbstractSet[int] | None = None
    ) -> int | None:
        """The node ``pick_node(need, prefer)`` would return on a copy of this index after
        ``set(n, max(c, 0))`` for every ``(n, c)`` in ``counts``, without the copy; only
        when no node has ``need`` usable GPUs now (``slots(need) == 0``, else None), so that only
        the nodes in ``counts`` can. What-if planning of one-node jobs asks it on every plan."""
        if need < 1 or self.slots(need) != 0:
            return None
        cap = self.pool.cap
        best = None
        for n, c in counts.items():
            if c > cap:
                c = cap
            if c >= need:
                key = (not (prefer and n in prefer), c, n)
                if best is None or key < best:
                    best = key
        return None if best is None else best[2]

    def place(
        self, w: int, g: int, prefer: AbstractSet[int] | None = None
    ) -> list[tuple[int, int]] | None:
        """Topology-aware placement of ``w`` workers of ``g`` GPUs, or ``None`` if it can't fit."""
        if self.slots(g) < w:
            return None
        n = self.pick_node(w * g, prefer)
        if n is not None:
            return [(n, w)]
        pool = self.pool
        # One NVLink domain, then one rack: the fitting group with the fewest slots (best-fit).
        for gids in (pool.domains, pool.racks):
            best = None
            for gid in gids:
                s = self.group_slots(gid, g)
                if s >= w and (best is None or s < best[0]):
                    best = (s, gid)
            if best is not None:
                return self._fill(pool.members[best[1]], w, g, prefer)
        # Fewest racks inside one fabric; else fewest fabrics, each taking its roomiest racks.
        best_f = None
        for f in pool.fabrics:
            racks = self._roomiest(pool.fabric_racks[f], g)
            total = 0
            used = 0
            for s, _ in racks:
                total += s
                used += 1
                if total >= w:
                    break
            if total >= w and (best_f is None or (used, total) < best_f[0]):
                best_f = ((used, total), [gid for _, gid in racks[:used]])
        if best_f is not None:
            chosen = best_f[1]
        else:
            # Several fabrics: the roomiest racks overall (fewest racks), unless filling fabric
            # by fabric needs fewer fabrics; compare (fabrics, racks).
            by_fabric = []
            total = 0
            for _, f in sorted(
                ((self.group_slots(f, g), f) for f in pool.fabrics), key=lambda x: (-x[0], x[1])
            ):
                if total >= w:
                    break
                for rs, gid in self._roomiest(pool.fabric_racks[f], g):
                    if total >= w:
                        break
                    by_fabric.append(gid)
                    total += rs
            overall = []
            total = 0
            for rs, gid in self._roomiest(pool.racks, g):
                if total >= w:
                    break
                overall.append(gid)
                total += rs
            cost_a = (len({pool.fabric_of[r] for r in by_fabric}), len(by_fabric))
            cost_b = (len({pool.fabric_of[r] for r in overall}), len(overall))
            chosen = overall if cost_b < cost_a else by_fabric
        nodes = sorted(n for gid in chosen for n in pool.members[gid])
        return self._fill(nodes, w, g, prefer)

    def _roomiest(self, rack_gids: list[int], g: int) -> list[tuple[int, int]]:
        racks = [(self.group_slots(gid, g), gid) for gid in rack_gids]
        racks = [r for r in racks if r[0] > 0]
        racks.sort(key=lambda x: (-x[0], x[1]))
        return racks

    def _fill(
        self, nodes: list[int], w: int, g: int, prefer: AbstractSet[int] | None
    ) -> list[tuple[int, int]]:
        # Best-fit inside the chosen group: fill the tightest nodes first so whole nodes survive.
        cnt = self.cnt
        cands = [n for n in nodes if cnt[n] >= g]
        if prefer:
            cands.sort(key=lambda n: (n not in prefer, cnt[n], n))
        else:
            cands.sort(key=lambda n: (cnt[n], n))
        out = []
        left = w
        for n in cands:
            k = min(cnt[n] // g, left)
            out.append((n, k))
            left -= k
            if not left:
                return out
        raise AssertionError("group slots said the gang fits")  # pragma: no cover
