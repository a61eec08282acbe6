"""The engine configuration's fields, defined once.

:data:`FIELDS` names every field of :class:`~scheduler.policy.model.Config` and of its nested
attained-service section :class:`~scheduler.policy.model.Las` (JSON key ``las``): its kind, the
values it accepts, whether ``null`` turns its rule off, and what it means. From this one table
the codec validates and encodes a configuration (``codec.config_from_dict``,
``codec.config_to_dict``) and :func:`docs_table` writes the table of docs/policy.md; a test
fails when a dataclass field has no entry here or the docs table differs.

:data:`LEGACY` lists the flat keys of the configuration before the ``las`` section, each with
its replacement. The codec accepts them for one release (with a ``DeprecationWarning`` naming
the replacement) and translates them to the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from scheduler.policy.model import QUEUE_ORDERS, Config, Las

__all__ = [
    "FIELDS",
    "LEGACY",
    "MAX_ATTAINED_GPU_S",
    "MAX_CYCLE_COUNT",
    "MAX_FAIR_SHARE_BAND",
    "MAX_LAS_THRESHOLDS",
    "MAX_SECONDS",
    "MAX_WAIT_PRICE_PER_GPU_H",
    "Field",
    "docs_table",
]

# The upper bound of a per-cycle count (``max_preemption_attempts``, ``reservations_per_model``).
# Each counts blocked pending jobs of one cycle (a reservation is one job's, a preemption plan one
# job's on one GPU model), so a bound ten times the largest cycle the benchmarks measure (10,000
# pending jobs on 1,000 nodes x 8 GPUs, docs/benchmarks.md) means "no limit" on any real cluster
# and changes no decision; above it a value only ever meant "unlimited" (or a typo: 1e30).
MAX_CYCLE_COUNT = 100_000
# The upper bound of every duration (a grace, a half-life, a wait, a runtime): a century. A job
# lives at most a year and a day (its runtime limit and checkpoint interval, core.bounds
# MAX_DURATION_S), so a protection window, grace, slack, default runtime, wait or total run
# longer than that is already "never" (or "always") for every job, and a century decides the same;
# a half-life or an aging time of a century weighs a year-old GPU-hour, or shrinks a year-old
# wait's job, by under 1 %, inside any fair-share band. Above it a value only ever meant
# "forever" (1e300), and it kept products with GPU counts and prices finite.
MAX_SECONDS = 100 * 365 * 24 * 3600
# The upper bound of a LAS threshold: more GPU-seconds than any job can attain (the largest job
# the platform takes, 4096 workers x 64 GPUs, running a year and a day attains 8.3e12), so a
# threshold above it is one no job ever crosses, as this one.
MAX_ATTAINED_GPU_S = 1e15
# The upper bound of ``fair_share_band``: a band of a million ties every team within a factor of
# a thousand of its share either way (sites use 1.x to 10; the default is 2); a wider one only
# ever meant "fair share off".
MAX_FAIR_SHARE_BAND = 1e6
# The upper bound of ``wait_price_per_gpu_h``: the price book's own ceiling for a GPU-hour
# (billing MAX_RATE); waiting valued above the dearest GPU-hour anyone can sell only ever meant
# "never hold out", which is ``null``.
MAX_WAIT_PRICE_PER_GPU_H = 100_000.0
# The most LAS thresholds (so at most 64 queues per class, the bound of
# ``las.bottom_fifo_queues``): Tiresias uses two or three, the default four.
MAX_LAS_THRESHOLDS = 63


@dataclass(frozen=True, slots=True)
class Field:
    """One configuration field. ``key`` is its JSON path (``las.reserve_after_s``)."""

    key: str
    kind: str  # "bool", "number", "integer", "choice", "thresholds" or "section"
    meaning: str
    low: float | None = None  # the smallest value accepted ...
    above: bool = False  # ... or, when set, the value it must exceed
    high: float | None = None  # the largest value accepted (of "thresholds": the most items)
    item_high: float | None = None  # of "thresholds": the largest item accepted
    nullable: bool = False  # null turns the field's rule off

    @property
    def section(self) -> str:
        """``""`` for a field of ``Config``, ``"las"`` for one of its ``las`` section."""
        return self.key.rpartition(".")[0]

    @property
    def name(self) -> str:
        """The dataclass attribute."""
        return self.key.rpartition(".")[2]


FIELDS: tuple[Field, ...] = (
    Field(
        "backfill", "bool", "EASY backfill with reservations; `false` = strict order per GPU model"
    ),
    Field("preemption", "bool", "priority preemption, reclaim of borrowed GPUs, elastic shrink"),
    Field(
        "checkpoint_protect_s",
        "number",
        "a job whose next checkpoint is due within this is not preempted this cycle",
        low=0,
        high=MAX_SECONDS,
    ),
    Field(
        "preemption_grace_s",
        "number",
        "grace period carried by every `Preempt`",
        low=0,
        high=MAX_SECONDS,
    ),
    Field(
        "fair_share_half_life_s",
        "number",
        "half-life of the usage fair share reads (the engine takes usage as decayed; the loop "
        "and the simulator decay with it)",
        low=0,
        above=True,
        high=MAX_SECONDS,
    ),
    Field("min_health", "number", "nodes below this health receive no new work", low=0, high=1),
    Field(
        "queue_order",
        "choice",
        "tie-break: " + ", ".join(f"`{o}`" for o in QUEUE_ORDERS) + " (rule 1)",
    ),
    Field(
        "queue_aging_s",
        "number",
        "`fair` order: waiting this long halves a job's effective size",
        low=0,
        above=True,
        high=MAX_SECONDS,
    ),
    Field(
        "default_runtime_s",
        "number",
        "runtime assumed for ordering when a job has no estimate",
        low=0,
        high=MAX_SECONDS,
    ),
    Field(
        "deadline_slack_s",
        "number",
        "a waiting job with at most this much slack before its deadline (and not less than 0) "
        "goes first within its rank (rule 1b)",
        low=0,
        high=MAX_SECONDS,
    ),
    Field(
        "fair_share_band",
        "number",
        "fair-share ratios within about this factor tie",
        low=1,
        above=True,
        high=MAX_FAIR_SHARE_BAND,
    ),
    Field(
        "max_preemption_attempts",
        "integer",
        "blocked jobs that may plan a preemption per cycle (16, then 8 before; on the suite's 22 "
        "cases 2 waited longer on 12 and lost a goal, 10 traded two goals for two; "
        'docs/benchmarks.md, "The other defaults on the 22 cases")',
        low=0,
        high=MAX_CYCLE_COUNT,
    ),
    Field(
        "reservations_per_model",
        "integer",
        "EASY reservations per GPU model per cycle (1 before: with LAS queues the single "
        "reservation changed hands between cycles and big gangs starved; on the 22 cases 1 lost "
        "two goals and 8 waited longer on 5 cases, shorter on 1)",
        low=1,
        high=MAX_CYCLE_COUNT,
    ),
    Field(
        "victims_lowest_rank_first",
        "bool",
        "preemption victims in rank order: moves first, then the lowest class / most-served LAS "
        "queue first, least lost work within a rank (a victim of the job's own class: the most "
        "recently started run, rule 4); `false` = least lost work across all lower ranks",
    ),
    Field(
        "route_by_cost",
        "bool",
        "with clusters: try a job's allowed pools cheapest expected total first (rule 3b); "
        "`false` = cost-blind, pools in name order (the replays' baseline)",
    ),
    Field(
        "wait_price_per_gpu_h",
        "number",
        "with clusters: what a GPU-hour of waiting is worth; a job holds out for a cheaper busy "
        "pool while the saving exceeds this x its GPUs x the hours it has waited (rule 3b); "
        "`null` = never while an allowed pool can start it now",
        low=0,
        nullable=True,
        high=MAX_WAIT_PRICE_PER_GPU_H,
    ),
    Field(
        "las",
        "section",
        "the least-attained-service queues inside a class and their rules (rule 1a, the "
        "`las.` rows below); `null` = off",
        nullable=True,
    ),
    Field(
        "las.thresholds_gpu_s",
        "thresholds",
        "attained GPU-seconds at which a job drops to the next queue of its class; ascending, > 0",
        high=MAX_LAS_THRESHOLDS,
        item_high=MAX_ATTAINED_GPU_S,
    ),
    Field(
        "las.fifo_one_node_after_s",
        "number",
        "a blocked one-node job that has waited this long may preempt later-submitted jobs of "
        "its queue; `null` = never",
        low=0,
        nullable=True,
        high=MAX_SECONDS,
    ),
    Field(
        "las.defragment",
        "bool",
        "a fragmentation-blocked gang may move later-submitted jobs of its class that fit elsewhere",
    ),
    Field(
        "las.reserve_after_s",
        "number",
        "with preemption: no reservation before a job has waited this long while preemptible "
        "work can make room; `null` = reserve at once",
        low=0,
        above=True,
        nullable=True,
        high=MAX_SECONDS,
    ),
    Field(
        "las.bottom_fifo_queues",
        "integer",
        "this many most-served queues of a class (from the last) are served in submission order "
        "and give up their most recently submitted job first; `null` = none",
        low=1,
        high=MAX_LAS_THRESHOLDS + 1,
        nullable=True,
    ),
    Field(
        "las.long_run_s",
        "number",
        "a job of the last queue that has run this many seconds in total sits in a queue below "
        "it (served last, preempted first); `null` = off (the tail-latency setting)",
        low=0,
        above=True,
        nullable=True,
        high=MAX_SECONDS,
    ),
)

# Today's flat keys (before the `las` section), accepted for one release: key -> replacement.
LEGACY: dict[str, str] = {
    "las_thresholds_gpu_s": "las.thresholds_gpu_s ([] is las: null)",
    "las_fifo_one_node": "las.fifo_one_node_after_s (false is null)",
    "las_fifo_after_s": "las.fifo_one_node_after_s",
    "las_defragment": "las.defragment",
    "las_reserve_after_s": "las.reserve_after_s (0 is null)",
    "las_lowest_queue_first": "victims_lowest_rank_first",
    "las_bottom_fifo": "las.bottom_fifo_queues (false is null)",
    "las_fifo_from_gpu_s": "las.bottom_fifo_queues (a number of queues, not GPU-seconds)",
    "las_long_run_s": "las.long_run_s (0 is null)",
}


def _json(value: object) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(_json(v).strip("`") for v in value) + "]`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _bounds(f: Field) -> str:
    if f.kind == "thresholds":
        return f"(1 to {f.high:g} of them, each <= {_number(f.item_high or 0)})"
    parts = []
    if f.low is not None:
        parts.append(f"{'>' if f.above else '>='} {f.low:g}")
    if f.high is not None:
        parts.append(f"<= {_number(f.high)}")
    return ", ".join(parts)


def docs_table() -> str:
    """The Markdown table of docs/policy.md ("Config and defaults"), from :data:`FIELDS` and the
    dataclasses' defaults."""
    config, las = Config(), Las()
    rows = ["| key | default | accepts | meaning |", "|---|---|---|---|"]
    for f in FIELDS:
        if f.kind == "section":
            default = "an object (below)"
        else:
            default = _json(getattr(las if f.section else config, f.name))
        accepts = {
            "bool": "`true` / `false`",
            "number": "a number",
            "integer": "an integer",
            "choice": "one of the orders",
            "thresholds": "a list of numbers",
            "section": "an object or `null`",
        }[f.kind]
        bounds = _bounds(f)
        if bounds:
            accepts += f" {bounds}"
        if f.nullable and f.kind != "section":
            accepts += " or `null`"
        rows.append(f"| `{f.key}` | {default} | {accepts} | {f.meaning} |")
    return "\n".join(rows)


def _check_complete() -> None:
    # Importing this module fails loudly if a dataclass field has no entry (or one too many):
    # a field the codec and docs do not know must never reach a release.
    want = [f.name for f in fields(Config)] + [f"las.{f.name}" for f in fields(Las)]
    have = [f.key for f in FIELDS]
    if sorted(want) != sorted(have):
        raise AssertionError(f"Config fields {sorted(want)} != FIELDS {sorted(have)}")


_check_complete()
