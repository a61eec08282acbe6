"""The per-cycle views the rules share: a running job as the planner sees it (:class:`_Run`)
and one GPU model's state during a cycle (:class:`_Model`), plus the number formats of the
``why`` texts. Package-internal (names with a leading underscore are the policy package's own).
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from scheduler.policy.capacity import Index, Pool
from scheduler.policy.model import Pending, Quota, RunningJob

_INF = math.inf

# Pending is a frozen dataclass: its generated __init__ sets each field through
# object.__setattr__, about 5,700 instructions per object, and a cycle makes one per waiting job
# (over 9,000 in the cold cycle of 10,000 pending jobs, 7 % of its instructions). Setting its
# slots through their descriptors makes the same object (the same class and field values, as
# frozen) for half of that. Three fields, in order: a field added to Pending fails here, loudly.
_new_object = object.__new__
_set_job, _set_why, _set_start = (Pending.__dict__[f.name].__set__ for f in fields(Pending))


def new_pending(job: str, why: str, estimated_start: float | None = None) -> Pending:
    """``Pending(job, why, estimated_start)``, built at half the cost (see above)."""
    p: Pending = _new_object(Pending)
    _set_job(p, job)
    _set_why(p, why)
    _set_start(p, estimated_start)
    return p


# A walk of a GPU model's release timeline, handed to the reservation it leads to: the time the
# gang fits (None: not by the walk's horizon) and the GPUs per node counted free by then.
ReleaseWalk = tuple[float | None, dict[int, int]]

# One entry of a GPU model's release timeline (``backfill.release_order``): (expected release
# time, index into snapshot.running, job id, ((node, GPUs), ...) on the model's eligible nodes,
# or None while not resolved yet: on a one-model cluster a walk resolves it when it first gets
# there).
Release = tuple[float, int, str, tuple[tuple[int, int], ...] | None]


def _fmt_t(t: float) -> str:
    return f"{t:.0f}" if abs(t) >= 1 or t == 0 else f"{t:g}"


def other_team_job(job_id: str, job_team: str, reader_team: str) -> str:
    """How a why or a preemption reason told to a job of ``reader_team`` names another job: by
    its id within the team, as "a job of another team" otherwise (whose jobs are not the
    reader's to see, so neither are their ids)."""
    return job_id if job_team == reader_team else "a job of another team"


def _fmt_s(s: float) -> str:
    return f"{s:.0f}" if float(s).is_integer() or s >= 10 else f"{s:g}"


class _Run:
    """A running job as the planner sees it (GPUs per eligible node id)."""

    __slots__ = ("job", "model", "gpus", "on", "prio", "end", "protected", "saved")

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
        # Whether the job has saved a checkpoint since it (re)started: only then may a job of
        # its own priority class preempt it (the minimum quantum, docs/policy.md).
        lca = job.last_checkpoint_at
        self.saved = lca is not None and lca > job.started_at


class _Model:
    """Per-GPU-model cycle state: pools (all / spot / on-demand), their views, reservations."""

    __slots__ = (
        "name",
        "gpu",
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
        "blocked_by_team",
        "capacity_wait",
        "started_ends",
        "unknown_started",
        "pre_failed",
        "victims",
        "peer_victims",
        "elastic",
        "releasing",
        "chains",
        "sizes",
        "soft_estimated",
    )

    def __init__(self, name: str, gpu: str | None = None) -> None:
        self.name = name
        # The GPU model quotas and the ledger count (``name`` is ``model@cluster`` with
        # clusters: a pool of its own, rule 3b).
        self.gpu = gpu if gpu is not None else name
        self.pools: dict[str, Pool] = {}
        self.now: dict[str, Index] = {}
        self.long: dict[str, Index] | None = None  # None: same as ``now`` (nothing protected)
        self.initial: dict[int, int] = {}  # g -> worker slots free at the start of the cycle
        self.ds_nodes: dict[str, frozenset[int]] = {}
        self.static_slots: dict[int, int] = {}
        self.min_res_at = _INF
        # (job, start time, its team): a why names the job only to its own team
        self.reservations: list[tuple[str, float, str]] = []
        self.reserved_nodes: set[int] = set()
        self.res_count = 0  # EASY reservations made this cycle
        self.claimed: dict[int, int] = {}  # node -> future releases a reservation counts on
        self.easy_tries = 0
        self.easy_failed: list[tuple[int, int]] = []
        self.blocked_by: str | None = None
        self.blocked_by_team = ""
        self.capacity_wait = False
        self.started_ends: list[tuple[float, int, int]] = []
        self.unknown_started = 0
        self.pre_failed: dict[
            tuple[int, bool, bool, bool], list[tuple[int, int, tuple[Any, ...]]]
        ] = {}
        # Planner view of running jobs (built lazily): preemptible, unprotected victims by
        # rank, cheapest first (cost = lost work; with las.bottom_fifo_queues, age in the queues a
        # class serves in submission order); elastic jobs; jobs already being preempted.
        self.victims: dict[int, list[tuple[float, str, _Run]]] = {}
        # The same victims as a job of their own class takes them (rule 4a lets them run on to
        # their next checkpoint): the most recently started run first. Only for ranks that a
        # peer can preempt and that are not served in submission order.
        self.peer_victims: dict[int, list[tuple[float, str, _Run]]] = {}
        self.elastic: list[_Run] = []
        self.releasing: list[_Run] = []
        self.chains: dict[str, tuple[tuple[str, Quota], ...]] = {}
        self.sizes: dict[int, int] = {}  # node size (GPUs) -> number of eligible nodes
        self.soft_estimated = False  # a gated job got a start estimate this cycle
