"""Validation of an agent's batch: pure Python (no Django, no clock), all-or-nothing.

``parse_batch`` either returns every sample of the batch as plain tuples ready for a bulk insert,
or raises :class:`BatchInvalid` with errors keyed by the offending field's path
(``samples[3].utilization: must be between 0 and 100``). It never returns part of a batch, so the
caller stores all of it or nothing.

Wire format (JSON)::

    {"agent": {"version": "1.0", "dropped": 0},          # optional
     "samples": [{"gpu": 0, "time": 1764680000.5,        # epoch seconds or ISO 8601 with zone
                  "utilization": 87.5,                   # percent, 0..100
                  "memory_used_mib": 40000, "memory_total_mib": 81559,
                  "temperature_c": 64, "power_w": 312.4, # power may be null
                  "ecc_sbe": 0, "ecc_dbe": 0,            # errors since the GPU's previous sample
                  "xid": [79],                           # XID codes seen since then
                  "throttle_thermal": false}, ...]}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

MAX_ERRORS_REPORTED = 20


class BatchInvalid(Exception):
    """The batch is refused as a whole; ``errors`` maps a field path to its messages."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(next(iter(errors.items())))
        self.errors = errors


# (gpu, epoch seconds, utilization %, memory used MiB, memory total MiB, temperature °C,
# power W or None, thermal throttle)
SampleRow = tuple[int, float, float, int, int, int, float | None, bool]
# GpuErrorKind's values (telemetry.models; its check constraint holds the table to them).
ErrorKind = Literal["ecc_sbe", "ecc_dbe", "xid"]
# (gpu, epoch seconds, kind, code or None, count)
ErrorRow = tuple[int, float, ErrorKind, int | None, int]


@dataclass(frozen=True, slots=True)
class ParsedBatch:
    samples: list[SampleRow]
    # ECC errors counted since the GPU's previous sample; each XID code of a sample once, with
    # how often the sample carried it
    errors: list[ErrorRow]
    agent_version: str
    agent_dropped: int | None
    latest: dict[int, tuple[float, float]]  # gpu -> (epoch seconds, utilization) of its newest


# Exact type checks (JSON gives plain int/float/bool): fast, and they keep booleans out of
# numeric fields (bool is an int subclass). The validation loop runs for every sample.
_NUMBER = frozenset((int, float))


def _is_int(value: object) -> bool:
    return type(value) is int


# Samples an agent may say it dropped, in all: a 63-bit column holds any count an agent reaches.
MAX_DROPPED = 10**15
# What one sample may say (the API's schema declares the same: telemetry/api.py).
MAX_AGENT_VERSION_CHARS = 64
MAX_MEMORY_MIB = 10_000_000
TEMPERATURE_C_MIN, TEMPERATURE_C_MAX = -40, 150
MAX_POWER_W = 5000
MAX_ECC_ERRORS = 1_000_000_000
MAX_XIDS_PER_SAMPLE = 100
MAX_XID_CODE = 99_999


def _epoch(value: int | float) -> float | None:
    """Epoch seconds from a JSON number; None for one beyond the float range (an integer of
    more than 308 digits), which the time window then refuses."""
    try:
        return float(value)
    except OverflowError:
        return None


def _time(value: object) -> float | None:
    if type(value) is int or type(value) is float:
        return float(value)
    if isinstance(value, str) and len(value) <= 40:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            return None
        return parsed.timestamp()
    return None


def parse_batch(
    body: Any,
    *,
    gpu_count: int,
    now: float,
    max_samples: int,
    max_future_s: float,
    max_age_s: float,
) -> ParsedBatch:
    """Validate ``body`` (decoded JSON) for a node with ``gpu_count`` GPUs at epoch ``now``.

    Sample times must lie within ``[now - max_age_s, now + max_future_s]`` (agent clocks drift,
    and data older than the raw retention would be pruned at once).
    """
    errors: dict[str, list[str]] = {}

    def err(path: str, message: str) -> None:
        if len(errors) < MAX_ERRORS_REPORTED:
            errors.setdefault(path, []).append(message)

    if not isinstance(body, dict):
        raise BatchInvalid({"non_field_errors": ["expected a JSON object"]})
    agent = body.get("agent") or {}
    version, dropped = "", None
    if not isinstance(agent, dict):
        err("agent", "must be an object")
    else:
        version = agent.get("version", "")
        if not isinstance(version, str) or len(version) > MAX_AGENT_VERSION_CHARS:
            err(
                "agent.version", f"must be a string of at most {MAX_AGENT_VERSION_CHARS} characters"
            )
            version = ""
        dropped = agent.get("dropped")
        if dropped is not None and (not _is_int(dropped) or not 0 <= dropped <= MAX_DROPPED):
            err("agent.dropped", f"must be an integer from 0 to {MAX_DROPPED:,}")
    samples = body.get("samples")
    if not isinstance(samples, list) or not samples:
        raise BatchInvalid({"samples": ["must be a non-empty list"]})
    if len(samples) > max_samples:
        raise BatchInvalid({"samples": [f"at most {max_samples} samples per batch"]})

    rows: list[SampleRow] = []
    gpu_errors: list[ErrorRow] = []
    latest: dict[int, tuple[float, float]] = {}
    oldest, newest = now - max_age_s, now + max_future_s
    for i, s in enumerate(samples):
        p = f"samples[{i}]"
        if not isinstance(s, dict):
            err(p, "must be an object")
            continue
        ok = True
        # Decoded JSON: any value, until the checks below say what it is.
        get: Callable[..., Any] = s.get
        gpu = get("gpu")
        if type(gpu) is not int or not 0 <= gpu < gpu_count:
            err(f"{p}.gpu", f"must be an integer between 0 and {gpu_count - 1}")
            ok = False
        when = get("time")
        ts = _epoch(when) if type(when) in _NUMBER else _time(when)
        if ts is None:
            err(f"{p}.time", "must be epoch seconds or an ISO 8601 time with a zone")
            ok = False
        elif not oldest <= ts <= newest:
            err(f"{p}.time", "is too far in the past or the future (check the node's clock)")
            ok = False
        util = get("utilization")
        if type(util) not in _NUMBER or not 0 <= util <= 100:
            err(f"{p}.utilization", "must be between 0 and 100")
            ok = False
        used, total = get("memory_used_mib"), get("memory_total_mib")
        total_ok = type(total) is int and 1 <= total <= MAX_MEMORY_MIB
        if not total_ok:
            err(f"{p}.memory_total_mib", f"must be an integer between 1 and {MAX_MEMORY_MIB}")
            ok = False
        if type(used) is not int or used < 0:
            err(f"{p}.memory_used_mib", "must be an integer >= 0")
            ok = False
        elif total_ok and used > total:
            err(f"{p}.memory_used_mib", "must not exceed memory_total_mib")
            ok = False
        temp = get("temperature_c")
        if type(temp) not in _NUMBER or not TEMPERATURE_C_MIN <= temp <= TEMPERATURE_C_MAX:
            err(
                f"{p}.temperature_c", f"must be between {TEMPERATURE_C_MIN} and {TEMPERATURE_C_MAX}"
            )
            ok = False
        power = get("power_w")
        if power is not None and (type(power) not in _NUMBER or not 0 <= power <= MAX_POWER_W):
            err(f"{p}.power_w", f"must be null or between 0 and {MAX_POWER_W}")
            ok = False
        throttle = get("throttle_thermal", False)
        if type(throttle) is not bool:
            err(f"{p}.throttle_thermal", "must be true or false")
            ok = False
        sbe, dbe = get("ecc_sbe", 0), get("ecc_dbe", 0)
        for name, value in (("ecc_sbe", sbe), ("ecc_dbe", dbe)):
            if type(value) is not int or not 0 <= value <= MAX_ECC_ERRORS:
                err(f"{p}.{name}", "must be an integer >= 0")
                ok = False
        xids = get("xid", ())
        if xids != ():
            if type(xids) is not list or len(xids) > MAX_XIDS_PER_SAMPLE:
                err(f"{p}.xid", f"must be a list of at most {MAX_XIDS_PER_SAMPLE} XID codes")
                ok = False
            elif not all(type(c) is int and 0 < c <= MAX_XID_CODE for c in xids):
                err(f"{p}.xid", "each XID code must be a positive integer")
                ok = False
        if not ok or errors or ts is None:  # (ts is None only where ok is False)
            continue  # keep validating (to report), stop building rows
        rows.append((gpu, ts, float(util), used, total, round(temp), power, throttle))
        if sbe:
            gpu_errors.append((gpu, ts, "ecc_sbe", None, sbe))
        if dbe:
            gpu_errors.append((gpu, ts, "ecc_dbe", None, dbe))
        # A storm repeats one code up to 100 times a sample: one row with its count, not 100
        # rows (kept 30 days, read by every health check).
        for code, repeats in Counter(xids).items():
            gpu_errors.append((gpu, ts, "xid", code, repeats))
        if gpu not in latest or latest[gpu][0] <= ts:
            latest[gpu] = (ts, float(util))
    if errors:
        raise BatchInvalid(errors)
    return ParsedBatch(rows, gpu_errors, version, dropped, latest)
