"""What every rule of a cycle reads and writes of it: the one list of ``_Cycle``'s state.

``engine._Cycle`` is built from one mixin per rule (placement, backfill reservations, victims,
preemption planning, elastic jobs). Each mixin reads state that ``_Cycle.__init__`` sets up and
calls methods another mixin defines; this base class names both, with their types, so each rule's
module type-checks on its own and a reader finds the cycle's state in one place. It holds no
state and no code of its own: the stubs below are always overridden (every mixin inherits this
class, so ``_Cycle``'s method resolution order reaches a mixin's method before the stub).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.policy.memo import _Topology
from scheduler.policy.model import (
    Config,
    Las,
    Node,
    PendingJob,
    Preempt,
    Quota,
    Reserve,
    Resize,
    Snapshot,
    Start,
    Team,
)
from scheduler.policy.routing import Router
from scheduler.policy.state import _INF, Release, ReleaseWalk, _Model, _Run


class _CycleState:
    """The state of one ``decide`` call, as the rules' mixins see it (set by ``_Cycle``)."""

    # ---- the snapshot and the configuration (set once per cycle)
    snap: Snapshot
    cfg: Config
    now: float
    classes: Mapping[str, int]
    las: Las | None
    th: tuple[float, ...]  # LAS queue thresholds (GPU-s); () = off
    long_run: float
    levels: int
    fifo_queues: int
    # ---- eligible nodes, by global id in topology order
    topo: _Topology
    names: list[str]
    id_of: dict[str, int]
    rack: list[str]
    node_model: list[str]
    node_by_name: dict[str, Node]
    free: list[list[int]]
    free0: list[int]
    protected: list[int]
    models: dict[str, _Model]
    model_names: list[str]  # sorted
    routed: bool
    router: Router | None
    # ---- teams and quotas
    teams: dict[str, Team]
    any_quota: bool
    used: dict[tuple[str, str], int]
    reclaimed: dict[tuple[str, str], int]
    borrowing: set[int]
    _ancestry: dict[str, tuple[str, ...]]
    _chains: dict[tuple[str, str], tuple[tuple[str, Quota], ...]]
    # ---- running jobs as the planner sees them
    has_elastic: bool
    has_releasing: bool
    run_rank: dict[str, int]
    pending_ranks: dict[int, int]
    min_victim: dict[str | None, int]
    lowest_victim: dict[str | None, int | None]
    victim_gpus: dict[str | None, dict[int, int]]
    victim_gpus_upto: dict[tuple[str, int], int]
    runs: dict[str, _Run]
    runs_unique: bool
    _runs_built: bool
    _unknown_runs: list[int]
    _release_order: dict[str, list[Release]] | None
    _release_pairs: dict[int, tuple[tuple[int, int], ...]]
    _release_memo: dict[str, tuple[Any, Any, dict[str, tuple[tuple[int, int], ...]]]]
    _pools_of: list[list[tuple[_Model, str]]] | None
    # ---- what the cycle has decided so far
    starts: list[Start]
    preempts: list[Preempt]
    reserves: list[Reserve]
    resizes: list[Resize]
    gone: set[str]
    shrunk: dict[str, list[tuple[int, tuple[int, ...]]]]
    preempt_attempts: int
    epoch: int  # bumped by every change of capacity or reservations in this cycle
    why_cache: dict[tuple[Any, ...], str]

    # ---- rules one mixin asks of another (each defined once, in the module named)
    def pending_rank(self, job: PendingJob) -> int:  # engine
        raise NotImplementedError

    def route_of(self, job: PendingJob) -> tuple[list[str], list[str]]:  # engine
        raise NotImplementedError

    def ancestry(self, team: str) -> tuple[str, ...]:  # placement
        raise NotImplementedError

    def quota_chain(self, team: str, model: str) -> tuple[tuple[str, Quota], ...]:  # placement
        raise NotImplementedError

    def would_borrow(self, team: str, model: str, need: int) -> bool:  # placement
        raise NotImplementedError

    def protect(self, ms: _Model, i: int, k: int) -> None:  # placement
        raise NotImplementedError

    def take(self, ms: _Model, plan: list[tuple[int, int]], g: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError  # placement

    def ensure_runs(self) -> None:  # victims
        raise NotImplementedError

    def shrink_units(self, run: _Run) -> list[tuple[int, tuple[int, ...]]]:  # elastic
        raise NotImplementedError

    def release_walk(
        self, ms: _Model, w: int, g: int, overdue: bool = True, until: float = _INF
    ) -> tuple[float | None, dict[int, int], bool]:  # backfill
        raise NotImplementedError

    # Other rules only hold a reservation, from a walk of the release timeline they made;
    # backfill's own options (an estimate without holding, a horizon) stay its own.
    def reserve(
        self, job: PendingJob, ms: _Model, w: int, g: int, *, walked: ReleaseWalk | None
    ) -> float | None:  # backfill
        raise NotImplementedError
