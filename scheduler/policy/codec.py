"""JSON <-> dataclass conversion for the policy contract, with field-level validation.

Guarantees:
- :func:`snapshot_from_dict` either returns a :class:`Snapshot` that the engine can decide on, or
  raises :class:`SnapshotError` whose ``str`` is ``"field: reason"`` naming the first offending
  field by its JSON path (e.g. ``pending[3].workers: must be >= 1``). It never raises anything
  else for any JSON-shaped input (dicts, lists, strings, numbers, bools, None).
- Unknown keys are ignored (forward compatibility); every ``config`` key is optional, and
  today's flat ``las_*`` keys are still read (``config_from_dict``).
- ``snapshot_to_dict(snapshot_from_dict(d))`` is a normalised ``d``;
  ``snapshot_from_dict(snapshot_to_dict(s)) == s`` for any valid snapshot ``s``.
- :func:`decisions_to_dict` produces the contract's decision shape; ``Pending`` carries
  ``estimated_start`` only when known, ``Start`` carries ``workers`` only when set, ``Resize``
  carries ``placement`` only when set.

The readers by JSON path are in ``jsonread``; clusters, datasets and jobs' routing constraints in
``routing_codec``.
"""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.policy.fields import (
    FIELDS,
    LEGACY,
    MAX_ATTAINED_GPU_S,
    MAX_LAS_THRESHOLDS,
    MAX_SECONDS,
    Field,
)
from scheduler.policy.jsonread import (
    SnapshotError,
    _bool,
    _fmt,
    _get,
    _indices,
    _int,
    _join,
    _list,
    _num,
    _obj,
    _opt_num,
    _opt_str,
    _str,
)
from scheduler.policy.model import (
    NODE_STATES,
    QUEUE_ORDERS,
    Config,
    Decisions,
    Elastic,
    Las,
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
    Team,
)
from scheduler.policy.routing_codec import _cluster, _dataset, _opt_names, _routing, _routing_out

__all__ = [
    "MAX_JOB_WORKERS",
    "MAX_NODE_GPUS",
    "SnapshotError",
    "config_deprecations",
    "config_from_dict",
    "config_to_dict",
    "snapshot_from_dict",
    "snapshot_to_dict",
    "decisions_to_dict",
    "decisions_from_dict",
]

# The most GPUs one node may have. The engine sizes per-node tables by the largest node
# (capacity.Index keeps a bucket per possible free count), so a huge count is a hang. Real
# nodes have 8 to 16 GPUs, a whole NVL72 rack 72; the platform's Node.gpu_count stops at 1024.
# 4096 leaves room for any node the platform stores while keeping the tables small.
MAX_NODE_GPUS = 4096
# The most workers a job (or its elastic range) may ask for. Placing a job tries each worker
# count from the largest down, so a huge count is a hang; 65,536 still decides at once. The
# platform's jobs stop at 4096 workers (core.bounds.MAX_WORKERS).
MAX_JOB_WORKERS = 65_536


def config_from_dict(data: Any, *, base: Config | None = None, path: str = "config") -> Config:
    """``base`` (default ``Config()``) with the fields of ``data`` (a snapshot's ``config``
    object) changed; inside ``las``, the fields given change ``base.las`` (or the defaults when
    ``base.las`` is off), and ``"las": null`` turns the queues off. Unlike a snapshot, an
    unknown key is an error here: a typo in a change to try must not silently try nothing.
    Today's flat ``las_*`` keys are accepted for one release (``DeprecationWarning`` naming the
    replacement, same decisions). Raises ``SnapshotError`` (``field: reason``)."""
    return _config(data, path, base, strict=True)


def config_to_dict(config: Config) -> dict[str, Any]:
    """Every field of ``config`` as JSON (``las`` nested, or null); ``config_from_dict`` of it
    gives ``config`` back."""
    out: dict[str, Any] = {}
    las = config.las
    for f in FIELDS:
        if f.kind == "section":
            out["las"] = None if las is None else {}
            continue
        if f.section:
            if las is not None:
                v = getattr(las, f.name)
                out["las"][f.name] = list(v) if isinstance(v, tuple) else v
            continue
        v = getattr(config, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def config_deprecations(data: Any, path: str = "config") -> list[str]:
    """One message per deprecated key in ``data`` (a configuration object), naming its
    replacement: for callers that log them (settings, stored policy versions)."""
    if not isinstance(data, Mapping):
        return []
    return [
        f"{_join(path, key)} is deprecated: use {LEGACY[key]}"
        for key in sorted(data)
        if key in LEGACY
    ]


def _field(f: Field, value: Any, path: str) -> Any:
    """One field's value, validated by its entry in ``FIELDS``."""
    if value is None and f.nullable:
        return None
    kind = f.kind
    if kind == "bool":
        return _bool(value, path)
    if kind == "number":
        if f.above:
            v = _num(value, path, minimum=f.low if f.low == 0 else None)
            if f.low is not None and v <= f.low:
                raise SnapshotError(path, f"must be > {_fmt(f.low)}")
        else:
            v = _num(value, path, minimum=f.low)
        return _at_most(v, f.high, path)
    if kind == "integer":
        return _int(
            value,
            path,
            minimum=None if f.low is None else int(f.low),
            maximum=None if f.high is None else int(f.high),
        )
    if kind == "choice":
        order = _str(value, path)
        if order not in QUEUE_ORDERS:
            raise SnapshotError(path, f"must be one of {', '.join(QUEUE_ORDERS)}")
        return order
    if kind == "thresholds":
        th = _thresholds(value, path)
        if not th:
            raise SnapshotError(path, "must not be empty (las: null turns the queues off)")
        return th
    raise AssertionError(f"no decoder for {f.kind}")  # FIELDS and this function disagree


def _thresholds(value: Any, path: str) -> tuple[float, ...]:
    items = _list(value, path)
    if len(items) > MAX_LAS_THRESHOLDS:
        raise SnapshotError(path, f"must have at most {MAX_LAS_THRESHOLDS} thresholds")
    th = tuple(_num(x, f"{path}[{k}]") for k, x in enumerate(items))
    for k, x in enumerate(th):
        if x <= 0:
            raise SnapshotError(f"{path}[{k}]", "must be > 0")
        _at_most(x, MAX_ATTAINED_GPU_S, f"{path}[{k}]")
        if k and x <= th[k - 1]:
            raise SnapshotError(f"{path}[{k}]", "must be greater than the previous threshold")
    return th


def _at_most(value: float, high: float | None, path: str) -> float:
    if high is not None and value > high:
        raise SnapshotError(path, f"must be <= {_fmt(high)}")
    return value


_TOP = {f.name: f for f in FIELDS if not f.section}
_LAS = {f.name: f for f in FIELDS if f.section == "las"}


def _config(value: Any, path: str, base: Config | None = None, strict: bool = False) -> Config:
    d = _obj(value, path)
    c = base or Config()
    if strict:
        for key in sorted(d):
            if key not in _TOP and key not in LEGACY:
                raise SnapshotError(_join(path, key), "unknown config field")
    kw: dict[str, Any] = {}
    for key, f in _TOP.items():
        if key in d and f.kind != "section":
            kw[key] = _field(f, d[key], _join(path, key))
    las = c.las
    if "las" in d:
        lp = _join(path, "las")
        if d["las"] is None:
            las = None
        else:
            ld = _obj(d["las"], lp)
            if strict:
                for key in sorted(ld):
                    if key not in _LAS:
                        raise SnapshotError(_join(lp, key), "unknown config field")
            changed = {k: _field(f, ld[k], _join(lp, k)) for k, f in _LAS.items() if k in ld}
            las = replace(las or Las(), **changed)
    if any(key in LEGACY for key in d):
        las = _legacy(d, path, kw, las)
    out = replace(c, **kw)
    return out if out.las is las else replace(out, las=las)


# The flat las_fifo_from_gpu_s's default: the queues of jobs that attained this much or more.
_FLAT_FIFO_FROM_GPU_S = 360000.0
# What the flat las_fifo_one_node switch turned on when las_fifo_after_s was not given (the
# rule's default until it was switched off by default).
_FLAT_FIFO_ONE_NODE_AFTER_S = 600.0


def _legacy(d: Mapping[str, Any], path: str, kw: dict[str, Any], las: Las | None) -> Las | None:
    """Apply today's flat ``las_*`` keys (validated as before) on top of the new ones; sets
    ``victims_lowest_rank_first`` in ``kw``; returns the ``las`` section."""
    for message in config_deprecations(d, path):
        warnings.warn(message, DeprecationWarning, stacklevel=4)
    for key in sorted(d):
        if key not in LEGACY:
            continue
        target = LEGACY[key].split(" ", 1)[0]
        if target in d or (target.startswith("las.") and target[4:] in (d.get("las") or {})):
            raise SnapshotError(_join(path, key), f"given with its replacement {target}")

    def get(key: str, decode: Callable[[Any, str], Any]) -> Any:
        return decode(d[key], _join(path, key)) if key in d else None

    # Bounded as their replacements are: a flat key must not let in what the new one refuses.
    def seconds(v: Any, p: str) -> float:
        return _at_most(_num(v, p, minimum=0), MAX_SECONDS, p)

    def gpu_s(v: Any, p: str) -> float:
        return _at_most(_num(v, p, minimum=0), MAX_ATTAINED_GPU_S, p)

    if "las_lowest_queue_first" in d:
        kw["victims_lowest_rank_first"] = get("las_lowest_queue_first", _bool)
    th = get("las_thresholds_gpu_s", _thresholds)
    one_node = get("las_fifo_one_node", _bool)
    after = get("las_fifo_after_s", seconds)
    defrag = get("las_defragment", _bool)
    reserve = get("las_reserve_after_s", seconds)
    bottom = get("las_bottom_fifo", _bool)
    fifo_from = get("las_fifo_from_gpu_s", gpu_s)
    long_run = get("las_long_run_s", seconds)
    if th is not None:
        if not th:
            return None  # the queues off: the other las_* keys only applied with them
        las = replace(las or Las(), thresholds_gpu_s=th)
    if las is None:
        return None
    changed: dict[str, Any] = {}
    if one_node is False:
        changed["fifo_one_node_after_s"] = None
    elif after is not None:
        changed["fifo_one_node_after_s"] = after
    elif one_node is True:
        changed["fifo_one_node_after_s"] = _FLAT_FIFO_ONE_NODE_AFTER_S
    if defrag is not None:
        changed["defragment"] = defrag
    if reserve is not None:
        changed["reserve_after_s"] = reserve or None
    if fifo_from is None and th is not None and las.bottom_fifo_queues is not None:
        fifo_from = _FLAT_FIFO_FROM_GPU_S  # new thresholds meant the old default's queues
    if bottom is False:
        changed["bottom_fifo_queues"] = None
    elif fifo_from is not None:
        # the queues a job enters at fifo_from GPU-s or more (queue 0 starts at 0 GPU-s, queue
        # q >= 1 at the threshold q - 1), and the last queue in any case, as the flat key meant
        th = tuple(sorted(las.thresholds_gpu_s))
        below = bisect.bisect_left(th, fifo_from) + (1 if fifo_from > 0 else 0)
        changed["bottom_fifo_queues"] = max(len(th) + 1 - below, 1)
    if long_run is not None:
        changed["long_run_s"] = long_run or None
    return replace(las, **changed)


def _elastic(value: Any, path: str) -> Elastic | None:
    if value is None:
        return None
    d = _obj(value, path)
    lo = _int(
        _get(d, "min_workers", path),
        _join(path, "min_workers"),
        minimum=1,
        maximum=MAX_JOB_WORKERS,
    )
    hi = _int(
        _get(d, "max_workers", path),
        _join(path, "max_workers"),
        minimum=1,
        maximum=MAX_JOB_WORKERS,
    )
    if hi < lo:
        raise SnapshotError(_join(path, "max_workers"), "must be >= min_workers")
    return Elastic(min_workers=lo, max_workers=hi)


def _team(value: Any, path: str) -> Team:
    d = _obj(value, path)
    quota_raw = _obj(_get(d, "quota", path, {}), _join(path, "quota"))
    quota = {}
    for model in sorted(quota_raw):
        qp = f"{path}.quota.{model}"
        q = _obj(quota_raw[model], qp)
        quota[model] = Quota(
            guaranteed=_int(_get(q, "guaranteed", qp), f"{qp}.guaranteed", minimum=0),
            borrow_limit=_int(_get(q, "borrow_limit", qp, 0), f"{qp}.borrow_limit", minimum=0),
        )
    weight = _num(_get(d, "weight", path, 1.0), _join(path, "weight"), minimum=0)
    if weight <= 0:
        raise SnapshotError(_join(path, "weight"), "must be > 0")
    return Team(
        name=_str(_get(d, "name", path), _join(path, "name")),
        parent=_opt_str(_get(d, "parent", path, None), _join(path, "parent")),
        weight=weight,
        quota=quota,
        usage_gpu_s=_num(_get(d, "usage_gpu_s", path, 0.0), _join(path, "usage_gpu_s"), minimum=0),
        clusters=_opt_names(_get(d, "clusters", path, None), _join(path, "clusters")),
    )


def _node(value: Any, path: str) -> Node:
    d = _obj(value, path)
    gpus = _int(_get(d, "gpus", path), _join(path, "gpus"), minimum=1, maximum=MAX_NODE_GPUS)
    state = _str(_get(d, "state", path, "ready"), _join(path, "state"))
    if state not in NODE_STATES:
        raise SnapshotError(_join(path, "state"), f"must be one of {', '.join(NODE_STATES)}")
    health = _num(_get(d, "health", path, 1.0), _join(path, "health"), minimum=0)
    if health > 1:
        raise SnapshotError(_join(path, "health"), "must be <= 1")
    datasets = _list(_get(d, "datasets", path, []), _join(path, "datasets"))
    return Node(
        name=_str(_get(d, "name", path), _join(path, "name")),
        gpu_model=_str(_get(d, "gpu_model", path), _join(path, "gpu_model")),
        gpus=gpus,
        free_gpus=_indices(_get(d, "free_gpus", path), _join(path, "free_gpus"), gpus),
        zone=_str(_get(d, "zone", path, ""), _join(path, "zone"), allow_empty=True),
        rack=_str(_get(d, "rack", path, ""), _join(path, "rack"), allow_empty=True),
        nvlink_domain=_str(
            _get(d, "nvlink_domain", path, ""), _join(path, "nvlink_domain"), allow_empty=True
        ),
        fabric=_str(_get(d, "fabric", path, ""), _join(path, "fabric"), allow_empty=True),
        spot=_bool(_get(d, "spot", path, False), _join(path, "spot")),
        health=health,
        state=state,
        datasets=tuple(_str(x, f"{path}.datasets[{i}]") for i, x in enumerate(datasets)),
        cluster=_str(_get(d, "cluster", path, ""), _join(path, "cluster"), allow_empty=True),
    )


def _placement(value: Any, path: str) -> dict[str, tuple[int, ...]]:
    d = _obj(value, path)
    out = {}
    for name in sorted(d):
        _str(name, path)
        out[name] = _indices(d[name], f"{path}.{name}")
    return out


def _job_common(d: Mapping[str, Any], path: str, classes: Mapping[str, int]) -> dict[str, Any]:
    pclass = _str(_get(d, "priority_class", path), _join(path, "priority_class"))
    if pclass not in classes:
        raise SnapshotError(_join(path, "priority_class"), f"unknown priority class {pclass!r}")
    return {
        "id": _str(_get(d, "id", path), _join(path, "id")),
        "team": _str(_get(d, "team", path), _join(path, "team")),
        "priority_class": pclass,
        "gpu_model": _opt_str(_get(d, "gpu_model", path, None), _join(path, "gpu_model")),
        "workers": _int(
            _get(d, "workers", path, 1), _join(path, "workers"), minimum=1, maximum=MAX_JOB_WORKERS
        ),
        "gpus_per_worker": _int(
            _get(d, "gpus_per_worker", path, 1), _join(path, "gpus_per_worker"), minimum=1
        ),
        "preemptible": _bool(_get(d, "preemptible", path, False), _join(path, "preemptible")),
        "elastic": _elastic(_get(d, "elastic", path, None), _join(path, "elastic")),
    }


def _running(value: Any, path: str, classes: Mapping[str, int]) -> RunningJob:
    d = _obj(value, path)
    kw = _job_common(d, path, classes)
    placement = _placement(_get(d, "placement", path), _join(path, "placement"))
    held = sum(len(v) for v in placement.values())
    if held != kw["workers"] * kw["gpus_per_worker"]:
        raise SnapshotError(
            _join(path, "placement"),
            f"holds {held} GPUs, expected workers x gpus_per_worker = "
            f"{kw['workers'] * kw['gpus_per_worker']}",
        )
    return RunningJob(
        **kw,
        placement=placement,
        started_at=_num(_get(d, "started_at", path, 0.0), _join(path, "started_at")),
        expected_end=_opt_num(_get(d, "expected_end", path, None), _join(path, "expected_end")),
        last_checkpoint_at=_opt_num(
            _get(d, "last_checkpoint_at", path, None), _join(path, "last_checkpoint_at")
        ),
        checkpoint_interval_s=_opt_num(
            _get(d, "checkpoint_interval_s", path, None),
            _join(path, "checkpoint_interval_s"),
            minimum=0,
        ),
        releasing_at=_opt_num(_get(d, "releasing_at", path, None), _join(path, "releasing_at")),
        attained_service_s=_num(
            _get(d, "attained_service_s", path, 0.0), _join(path, "attained_service_s"), minimum=0
        ),
        submitted_at=_opt_num(_get(d, "submitted_at", path, None), _join(path, "submitted_at")),
    )


def _pending(value: Any, path: str, classes: Mapping[str, int]) -> PendingJob:
    d = _obj(value, path)
    kw = _job_common(d, path, classes)
    est = _opt_num(
        _get(d, "runtime_estimate_s", path, None), _join(path, "runtime_estimate_s"), minimum=0
    )
    return PendingJob(
        **kw,
        submitted_at=_num(_get(d, "submitted_at", path, 0.0), _join(path, "submitted_at")),
        runtime_estimate_s=est,
        dataset=_opt_str(_get(d, "dataset", path, None), _join(path, "dataset")),
        dataset_ready=_bool(_get(d, "dataset_ready", path, True), _join(path, "dataset_ready")),
        attained_service_s=_num(
            _get(d, "attained_service_s", path, 0.0), _join(path, "attained_service_s"), minimum=0
        ),
        requeued=_bool(_get(d, "requeued", path, False), _join(path, "requeued")),
        deadline=_opt_num(_get(d, "deadline", path, None), _join(path, "deadline")),
        routing=_routing(_get(d, "routing", path, None), _join(path, "routing")),
        dataset_size_gb=_opt_num(
            _get(d, "dataset_size_gb", path, None), _join(path, "dataset_size_gb"), minimum=0
        ),
    )


# Fast readers for the common shape of a job. A snapshot holds tens of thousands of jobs and the
# field-by-field validators above build a JSON path for every field they check, which made
# parsing cost more than deciding. These accept only plain JSON types (exact int / float / str /
# bool / dict / list) in their usual forms and raise _Unusual on anything else; the caller then
# runs the validator, which names the offending field or accepts the unusual form (an integral
# float for a count, a Mapping instead of a dict). So they change speed, never the result.


class _Unusual(Exception):
    pass


def _fast_count(value: Any) -> int:
    if type(value) is not int or value < 1 or value > MAX_JOB_WORKERS:
        raise _Unusual
    return value


def _fast_num(value: Any) -> float:
    kind = type(value)
    if kind is float:
        number: float = value
        if number - number == 0.0:  # finite: inf - inf and nan - nan are nan
            return number
    elif kind is int and -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT:
        return float(value)
    raise _Unusual


def _fast_opt_num(value: Any) -> float | None:
    return None if value is None else _fast_num(value)


def _fast_nonneg(value: Any) -> float:
    number = _fast_num(value)
    if number < 0:
        raise _Unusual
    return number


# Larger ints take the validator's path (float() of a huge int overflows).
_MAX_EXACT_INT = 2**53


def _fast_elastic(value: Any) -> Elastic | None:
    if value is None:
        return None
    if type(value) is not dict:
        raise _Unusual
    lo = _fast_count(value.get("min_workers"))
    hi = _fast_count(value.get("max_workers"))
    if hi < lo:
        raise _Unusual
    return Elastic(min_workers=lo, max_workers=hi)


def _fast_placement(value: Any) -> dict[str, tuple[int, ...]]:
    if type(value) is not dict:
        raise _Unusual
    out = {}
    for name in sorted(value):
        idxs = value[name]
        if type(name) is not str or not name or type(idxs) is not list:
            raise _Unusual
        for g in idxs:
            if type(g) is not int or g < 0:
                raise _Unusual
        t = tuple(sorted(idxs))
        if len(set(t)) != len(t):
            raise _Unusual
        out[name] = t
    return out


def _fast_running(d: Any, classes: Mapping[str, int]) -> RunningJob:
    if type(d) is not dict:
        raise _Unusual
    get = d.get
    job_id, team, pclass, model = get("id"), get("team"), get("priority_class"), get("gpu_model")
    workers, gpus_per_worker = get("workers", 1), get("gpus_per_worker", 1)
    preemptible, interval = get("preemptible", False), get("checkpoint_interval_s")
    if not (
        type(job_id) is str
        and job_id
        and type(team) is str
        and team
        and type(pclass) is str
        and pclass in classes
        and (model is None or (type(model) is str and model))
        and type(workers) is int
        and 1 <= workers <= MAX_JOB_WORKERS
        and type(gpus_per_worker) is int
        and gpus_per_worker >= 1
        and type(preemptible) is bool
    ):
        raise _Unusual
    placement = _fast_placement(get("placement"))
    if sum(map(len, placement.values())) != workers * gpus_per_worker:
        raise _Unusual
    return RunningJob(
        id=job_id,
        team=team,
        priority_class=pclass,
        gpu_model=model,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        preemptible=preemptible,
        elastic=_fast_elastic(get("elastic")),
        placement=placement,
        started_at=_fast_num(get("started_at", 0.0)),
        expected_end=_fast_opt_num(get("expected_end")),
        last_checkpoint_at=_fast_opt_num(get("last_checkpoint_at")),
        checkpoint_interval_s=None if interval is None else _fast_nonneg(interval),
        releasing_at=_fast_opt_num(get("releasing_at")),
        attained_service_s=_fast_nonneg(get("attained_service_s", 0.0)),
        submitted_at=_fast_opt_num(get("submitted_at")),
    )


def _fast_pending(d: Any, classes: Mapping[str, int]) -> PendingJob:
    if type(d) is not dict:
        raise _Unusual
    get = d.get
    job_id, team, pclass, model = get("id"), get("team"), get("priority_class"), get("gpu_model")
    workers, gpus_per_worker = get("workers", 1), get("gpus_per_worker", 1)
    preemptible, dataset = get("preemptible", False), get("dataset")
    ready, requeued = get("dataset_ready", True), get("requeued", False)
    if "routing" in d or "dataset_size_gb" in d:
        raise _Unusual  # routing fields (rule 3b) are read by the validator only
    if not (
        type(job_id) is str
        and job_id
        and type(team) is str
        and team
        and type(pclass) is str
        and pclass in classes
        and (model is None or (type(model) is str and model))
        and type(workers) is int
        and 1 <= workers <= MAX_JOB_WORKERS
        and type(gpus_per_worker) is int
        and gpus_per_worker >= 1
        and type(preemptible) is bool
        and (dataset is None or (type(dataset) is str and dataset))
        and type(ready) is bool
        and type(requeued) is bool
    ):
        raise _Unusual
    estimate = get("runtime_estimate_s")
    deadline = get("deadline")
    return PendingJob(
        id=job_id,
        team=team,
        priority_class=pclass,
        gpu_model=model,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        preemptible=preemptible,
        elastic=_fast_elastic(get("elastic")),
        submitted_at=_fast_num(get("submitted_at", 0.0)),
        runtime_estimate_s=None if estimate is None else _fast_nonneg(estimate),
        dataset=dataset,
        dataset_ready=ready,
        attained_service_s=_fast_nonneg(get("attained_service_s", 0.0)),
        requeued=requeued,
        deadline=None if deadline is None else _fast_num(deadline),
    )


def _read_running(value: Any, i: int, classes: Mapping[str, int]) -> RunningJob:
    try:
        return _fast_running(value, classes)
    except _Unusual:
        return _running(value, f"running[{i}]", classes)


def _read_pending(value: Any, i: int, classes: Mapping[str, int]) -> PendingJob:
    try:
        return _fast_pending(value, classes)
    except _Unusual:
        return _pending(value, f"pending[{i}]", classes)


def snapshot_from_dict(data: Any) -> Snapshot:
    """Build a validated :class:`Snapshot` from the contract's JSON shape.

    Raises :class:`SnapshotError` naming the first bad field. Besides per-field checks it
    rejects: duplicate team/node/job ids, a team whose parent is unknown or whose ancestry is a
    cycle, a running placement on an unknown node or on a GPU index the node does not have, and a
    GPU listed both free and held by a running job (or held by two running jobs).
    """
    d = _obj(data, "")
    now = _num(_get(d, "now", ""), "now")
    config = _config(_get(d, "config", "", {}), "config")
    classes_raw = _obj(_get(d, "priority_classes", "", {}), "priority_classes")
    classes = {}
    for name in sorted(classes_raw):
        classes[name] = _int(classes_raw[name], f"priority_classes.{name}")

    teams = tuple(
        _team(t, f"teams[{i}]") for i, t in enumerate(_list(_get(d, "teams", "", []), "teams"))
    )
    names = {}
    for i, t in enumerate(teams):
        if t.name in names:
            raise SnapshotError(f"teams[{i}].name", f"duplicate team {t.name!r}")
        names[t.name] = t
    for i, t in enumerate(teams):
        if t.parent is not None and t.parent not in names:
            raise SnapshotError(f"teams[{i}].parent", f"unknown team {t.parent!r}")
        seen = {t.name}
        p = t.parent
        while p is not None:
            if p in seen:
                raise SnapshotError(f"teams[{i}].parent", "team tree has a cycle")
            seen.add(p)
            p = names[p].parent

    clusters = tuple(
        _cluster(c, f"clusters[{i}]")
        for i, c in enumerate(_list(_get(d, "clusters", "", []), "clusters"))
    )
    cluster_names: set[str] = set()
    for i, c in enumerate(clusters):
        if c.name in cluster_names:
            raise SnapshotError(f"clusters[{i}].name", f"duplicate cluster {c.name!r}")
        cluster_names.add(c.name)
    datasets = tuple(
        _dataset(x, f"datasets[{i}]")
        for i, x in enumerate(_list(_get(d, "datasets", "", []), "datasets"))
    )
    dataset_names: set[str] = set()
    for i, x in enumerate(datasets):
        if x.name in dataset_names:
            raise SnapshotError(f"datasets[{i}].name", f"duplicate dataset {x.name!r}")
        dataset_names.add(x.name)

    nodes = tuple(
        _node(n, f"nodes[{i}]") for i, n in enumerate(_list(_get(d, "nodes", "", []), "nodes"))
    )
    by_name: dict[str, Node] = {}
    for i, n in enumerate(nodes):
        if n.name in by_name:
            raise SnapshotError(f"nodes[{i}].name", f"duplicate node {n.name!r}")
        by_name[n.name] = n
        if clusters and n.cluster not in cluster_names:
            raise SnapshotError(
                f"nodes[{i}].cluster",
                "is required when the snapshot lists clusters"
                if not n.cluster
                else f"unknown cluster {n.cluster!r}",
            )
        if not clusters and n.cluster:
            raise SnapshotError(
                f"nodes[{i}].cluster", f"unknown cluster {n.cluster!r} (the snapshot lists none)"
            )

    running = tuple(
        _read_running(r, i, classes)
        for i, r in enumerate(_list(_get(d, "running", "", []), "running"))
    )
    held: set[tuple[str, int]] = {(n.name, g) for n in nodes for g in n.free_gpus}
    ids: set[str] = set()
    for i, r in enumerate(running):
        if r.id in ids:
            raise SnapshotError(f"running[{i}].id", f"duplicate job {r.id!r}")
        ids.add(r.id)
        for name, idxs in r.placement.items():
            p = f"running[{i}].placement.{name}"
            node = by_name.get(name)
            if node is None:
                raise SnapshotError(p, f"unknown node {name!r}")
            for g in idxs:
                if g >= node.gpus:
                    raise SnapshotError(p, f"GPU index {g} out of range for {node.gpus} GPUs")
                if (name, g) in held:
                    raise SnapshotError(p, f"GPU {g} is free or held by another running job")
                held.add((name, g))

    pending = tuple(
        _read_pending(p, i, classes)
        for i, p in enumerate(_list(_get(d, "pending", "", []), "pending"))
    )
    for i, job in enumerate(pending):
        if job.id in ids:
            raise SnapshotError(f"pending[{i}].id", f"duplicate job {job.id!r}")
        ids.add(job.id)
    return Snapshot(
        now=now,
        config=config,
        priority_classes=classes,
        teams=teams,
        nodes=nodes,
        running=running,
        pending=pending,
        clusters=clusters,
        datasets=datasets,
    )


def _placement_out(placement: Mapping[str, tuple[int, ...]]) -> dict[str, list[int]]:
    return {name: list(placement[name]) for name in sorted(placement)}


def _elastic_out(e: Elastic | None) -> dict[str, int] | None:
    return None if e is None else {"min_workers": e.min_workers, "max_workers": e.max_workers}


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """The contract's JSON shape of ``snapshot`` (all fields, extensions included)."""
    c = snapshot.config
    out: dict[str, Any] = {
        "now": snapshot.now,
        "config": config_to_dict(c),
        "priority_classes": dict(snapshot.priority_classes),
        "teams": [
            {
                "name": t.name,
                "parent": t.parent,
                "weight": t.weight,
                "quota": {
                    m: {"guaranteed": q.guaranteed, "borrow_limit": q.borrow_limit}
                    for m, q in sorted(t.quota.items())
                },
                "usage_gpu_s": t.usage_gpu_s,
                **({"clusters": list(t.clusters)} if t.clusters is not None else {}),
            }
            for t in snapshot.teams
        ],
        "nodes": [
            {
                "name": n.name,
                "gpu_model": n.gpu_model,
                "gpus": n.gpus,
                "free_gpus": list(n.free_gpus),
                "zone": n.zone,
                "rack": n.rack,
                "nvlink_domain": n.nvlink_domain,
                "fabric": n.fabric,
                "spot": n.spot,
                "health": n.health,
                "state": n.state,
                "datasets": list(n.datasets),
                **({"cluster": n.cluster} if n.cluster else {}),
            }
            for n in snapshot.nodes
        ],
        "running": [
            {
                "id": r.id,
                "team": r.team,
                "priority_class": r.priority_class,
                "gpu_model": r.gpu_model,
                "workers": r.workers,
                "gpus_per_worker": r.gpus_per_worker,
                "placement": _placement_out(r.placement),
                "started_at": r.started_at,
                "expected_end": r.expected_end,
                "preemptible": r.preemptible,
                "last_checkpoint_at": r.last_checkpoint_at,
                "checkpoint_interval_s": r.checkpoint_interval_s,
                "elastic": _elastic_out(r.elastic),
                "releasing_at": r.releasing_at,
                "attained_service_s": r.attained_service_s,
                "submitted_at": r.submitted_at,
            }
            for r in snapshot.running
        ],
        "pending": [
            {
                "id": p.id,
                "team": p.team,
                "priority_class": p.priority_class,
                "gpu_model": p.gpu_model,
                "workers": p.workers,
                "gpus_per_worker": p.gpus_per_worker,
                "submitted_at": p.submitted_at,
                "runtime_estimate_s": p.runtime_estimate_s,
                "preemptible": p.preemptible,
                "dataset": p.dataset,
                "dataset_ready": p.dataset_ready,
                "elastic": _elastic_out(p.elastic),
                "attained_service_s": p.attained_service_s,
                "requeued": p.requeued,
                # only when set: snapshots without deadlines keep their shape
                **({"deadline": p.deadline} if p.deadline is not None else {}),
                **({"routing": _routing_out(p.routing)} if p.routing is not None else {}),
                **({"dataset_size_gb": p.dataset_size_gb} if p.dataset_size_gb is not None else {}),
            }
            for p in snapshot.pending
        ],
    }
    # routing (rule 3b), only when present: snapshots without clusters keep their shape
    if snapshot.clusters:
        out["clusters"] = [
            {
                "name": c.name,
                "region": c.region,
                "interconnect": c.interconnect,
                "prices": {m: dict(sorted(p.items())) for m, p in sorted(c.prices.items())},
                "datasets": dict(sorted(c.datasets.items())),
                "reachable": c.reachable,
                "spot_interruption_rate": c.spot_interruption_rate,
            }
            for c in snapshot.clusters
        ]
    if snapshot.datasets:
        out["datasets"] = [
            {"name": x.name, "regions": None if x.regions is None else list(x.regions)}
            for x in snapshot.datasets
        ]
    return out


def decisions_to_dict(decisions: Decisions) -> dict[str, Any]:
    """The contract's JSON shape of ``decisions`` (lists in decision order)."""
    starts = []
    for s in decisions.start:
        item: dict[str, Any] = {"job": s.job, "placement": _placement_out(s.placement)}
        if s.workers is not None:
            item["workers"] = s.workers
        starts.append(item)
    resizes = []
    for r in decisions.resize:
        item = {"job": r.job, "workers": r.workers}
        if r.placement is not None:
            item["placement"] = _placement_out(r.placement)
        resizes.append(item)
    pending = []
    for p in decisions.pending:
        item = {"job": p.job, "why": p.why}
        if p.estimated_start is not None:
            item["estimated_start"] = p.estimated_start
        pending.append(item)
    return {
        "start": starts,
        "preempt": [
            {"job": p.job, "reason": p.reason, "grace_s": p.grace_s} for p in decisions.preempt
        ],
        "reserve": [{"job": r.job, "at": r.at, "nodes": list(r.nodes)} for r in decisions.reserve],
        "resize": resizes,
        "pending": pending,
    }


def decisions_from_dict(data: Any) -> Decisions:
    """Inverse of :func:`decisions_to_dict`; raises :class:`SnapshotError` on a bad shape."""
    d = _obj(data, "")

    def items(key: str) -> list[Mapping[str, Any]]:
        return [_obj(x, f"{key}[{i}]") for i, x in enumerate(_list(_get(d, key, "", []), key))]

    start = []
    for i, s in enumerate(items("start")):
        p = f"start[{i}]"
        w = _get(s, "workers", p, None)
        start.append(
            Start(
                job=_str(_get(s, "job", p), f"{p}.job"),
                placement=_placement(_get(s, "placement", p), f"{p}.placement"),
                workers=None if w is None else _int(w, f"{p}.workers", minimum=1),
            )
        )
    preempt = [
        Preempt(
            job=_str(_get(x, "job", f"preempt[{i}]"), f"preempt[{i}].job"),
            reason=_str(_get(x, "reason", f"preempt[{i}]"), f"preempt[{i}].reason"),
            grace_s=_num(_get(x, "grace_s", f"preempt[{i}]"), f"preempt[{i}].grace_s", minimum=0),
        )
        for i, x in enumerate(items("preempt"))
    ]
    reserve = [
        Reserve(
            job=_str(_get(x, "job", f"reserve[{i}]"), f"reserve[{i}].job"),
            at=_num(_get(x, "at", f"reserve[{i}]"), f"reserve[{i}].at"),
            nodes=tuple(
                _str(n, f"reserve[{i}].nodes[{j}]")
                for j, n in enumerate(
                    _list(_get(x, "nodes", f"reserve[{i}]"), f"reserve[{i}].nodes")
                )
            ),
        )
        for i, x in enumerate(items("reserve"))
    ]
    resize = []
    for i, x in enumerate(items("resize")):
        p = f"resize[{i}]"
        pl = _get(x, "placement", p, None)
        resize.append(
            Resize(
                job=_str(_get(x, "job", p), f"{p}.job"),
                workers=_int(_get(x, "workers", p), f"{p}.workers", minimum=1),
                placement=None if pl is None else _placement(pl, f"{p}.placement"),
            )
        )
    pending = []
    for i, x in enumerate(items("pending")):
        p = f"pending[{i}]"
        pending.append(
            Pending(
                job=_str(_get(x, "job", p), f"{p}.job"),
                why=_str(_get(x, "why", p), f"{p}.why"),
                estimated_start=_opt_num(
                    _get(x, "estimated_start", p, None), f"{p}.estimated_start"
                ),
            )
        )
    return Decisions(
        start=tuple(start),
        preempt=tuple(preempt),
        reserve=tuple(reserve),
        resize=tuple(resize),
        pending=tuple(pending),
    )
