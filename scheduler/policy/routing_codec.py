"""The routing part of the policy contract (docs/routing.md): clusters, datasets and a job's
routing constraints, read with field-level errors and written back."""

from __future__ import annotations

from typing import Any

from scheduler.policy.jsonread import (
    SnapshotError,
    _bool,
    _get,
    _join,
    _list,
    _num,
    _obj,
    _opt_num,
    _str,
)
from scheduler.policy.model import CAPACITY_TYPES, INTERCONNECTS, Cluster, Dataset, JobRouting


def _names(value: Any, path: str) -> tuple[str, ...]:
    """A list of distinct non-empty strings (cluster or region names)."""
    items = _list(value, path)
    out = []
    # A set, not the list itself: a submission's list is as long as its sender makes it, and a
    # search of the list for each name took 2 minutes of a web worker at 100,000 names.
    seen: set[str] = set()
    for i, x in enumerate(items):
        name = _str(x, f"{path}[{i}]")
        if name in seen:
            raise SnapshotError(f"{path}[{i}]", f"{name!r} listed twice")
        seen.add(name)
        out.append(name)
    return tuple(out)


def _opt_names(value: Any, path: str) -> tuple[str, ...] | None:
    return None if value is None else _names(value, path)


def _cluster(value: Any, path: str) -> Cluster:
    d = _obj(value, path)
    interconnect = _str(_get(d, "interconnect", path, "ethernet"), _join(path, "interconnect"))
    if interconnect not in INTERCONNECTS:
        raise SnapshotError(
            _join(path, "interconnect"), f"must be one of {', '.join(INTERCONNECTS)}"
        )
    pp = _join(path, "prices")
    prices_raw = _obj(_get(d, "prices", path, {}), pp)
    prices: dict[str, dict[str, float]] = {}
    for model in sorted(prices_raw):
        mp = f"{pp}.{model}"
        by_type = _obj(prices_raw[model], mp)
        prices[model] = {}
        for kind in sorted(by_type):
            if kind not in CAPACITY_TYPES:
                raise SnapshotError(
                    f"{mp}.{kind}", f"unknown capacity type (one of {', '.join(CAPACITY_TYPES)})"
                )
            prices[model][kind] = _num(by_type[kind], f"{mp}.{kind}", minimum=0)
    dp = _join(path, "datasets")
    ds_raw = _obj(_get(d, "datasets", path, {}), dp)
    datasets = {}
    for name in sorted(ds_raw):
        _str(name, dp)
        datasets[name] = _num(ds_raw[name], f"{dp}.{name}", minimum=0)
    rate_path = _join(path, "spot_interruption_rate")
    rate = _num(_get(d, "spot_interruption_rate", path, 0.0), rate_path, minimum=0)
    if rate >= 1:
        raise SnapshotError(rate_path, "must be < 1 (the fraction of spot run time lost)")
    return Cluster(
        name=_str(_get(d, "name", path), _join(path, "name")),
        region=_str(_get(d, "region", path, ""), _join(path, "region"), allow_empty=True),
        interconnect=interconnect,
        prices=prices,
        datasets=datasets,
        reachable=_bool(_get(d, "reachable", path, True), _join(path, "reachable")),
        spot_interruption_rate=rate,
    )


def _dataset(value: Any, path: str) -> Dataset:
    d = _obj(value, path)
    return Dataset(
        name=_str(_get(d, "name", path), _join(path, "name")),
        regions=_opt_names(_get(d, "regions", path, None), _join(path, "regions")),
    )


_ROUTING_KEYS = (
    "clusters",
    "regions",
    "prefer_clusters",
    "prefer_regions",
    "max_price_per_gpu_h",
    "spot",
    "comm_heavy",
)


def _routing(value: Any, path: str) -> JobRouting | None:
    if value is None:
        return None
    d = _obj(value, path)
    # Unlike elsewhere, unknown keys are refused: a misspelt constraint must not vanish.
    for key in sorted(d):
        if key not in _ROUTING_KEYS:
            raise SnapshotError(_join(path, key), "unknown routing field")

    def opt_bool(key: str) -> bool | None:
        v = d.get(key)
        return None if v is None else _bool(v, _join(path, key))

    return JobRouting(
        clusters=_opt_names(d.get("clusters"), _join(path, "clusters")),
        regions=_opt_names(d.get("regions"), _join(path, "regions")),
        prefer_clusters=_names(d.get("prefer_clusters", []), _join(path, "prefer_clusters")),
        prefer_regions=_names(d.get("prefer_regions", []), _join(path, "prefer_regions")),
        max_price_per_gpu_h=_opt_num(
            d.get("max_price_per_gpu_h"), _join(path, "max_price_per_gpu_h"), minimum=0
        ),
        spot=opt_bool("spot"),
        comm_heavy=opt_bool("comm_heavy"),
    )


def _routing_out(r: JobRouting) -> dict[str, Any]:
    return {
        "clusters": None if r.clusters is None else list(r.clusters),
        "regions": None if r.regions is None else list(r.regions),
        "prefer_clusters": list(r.prefer_clusters),
        "prefer_regions": list(r.prefer_regions),
        "max_price_per_gpu_h": r.max_price_per_gpu_h,
        "spot": r.spot,
        "comm_heavy": r.comm_heavy,
    }


def routing_from_dict(value: Any, path: str = "routing") -> JobRouting | None:
    """A job's ``routing`` object (``None`` for none), with ``field: reason`` errors: the one
    reader for the snapshot, the API, the portal and ``gpuctl``."""
    return _routing(value, path)


def routing_to_dict(routing: JobRouting) -> dict[str, Any]:
    """``routing`` as the contract's JSON object (every key, defaults included)."""
    return _routing_out(routing)
