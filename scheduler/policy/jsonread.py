"""Reading JSON values by path for the policy contract: each reader returns the typed value or
raises :class:`SnapshotError` whose ``str`` is ``"field: reason"`` (the codec's guarantee)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class SnapshotError(ValueError):
    """A snapshot (or decisions) document is malformed; ``str(e)`` is ``"field: reason"``."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


_MISSING = object()


def _get(obj: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> Any:
    if key in obj:
        return obj[key]
    if default is _MISSING:
        raise SnapshotError(_join(path, key), "is required")
    return default


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SnapshotError(path or "snapshot", "must be an object")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise SnapshotError(path, "must be a list")
    return list(value)


def _str(value: Any, path: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise SnapshotError(path, "must be a string")
    if not allow_empty and not value:
        raise SnapshotError(path, "must not be empty")
    return value


def _opt_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(path, "must be true or false")
    return value


def _num(value: Any, path: str, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SnapshotError(path, "must be a number")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range (JSON allows any length)
        raise SnapshotError(path, "must be finite") from None
    if not math.isfinite(number):
        raise SnapshotError(path, "must be finite")
    if minimum is not None and number < minimum:
        raise SnapshotError(path, f"must be >= {_fmt(minimum)}")
    return number


def _opt_num(value: Any, path: str, *, minimum: float | None = None) -> float | None:
    return None if value is None else _num(value, path, minimum=minimum)


def _int(value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool):
        raise SnapshotError(path, "must be an integer")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise SnapshotError(path, "must be an integer")
    if minimum is not None and value < minimum:
        raise SnapshotError(path, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise SnapshotError(path, f"must be <= {maximum}")
    return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _indices(value: Any, path: str, gpus: int | None = None) -> tuple[int, ...]:
    items = _list(value, path)
    out = []
    seen = set()
    for i, item in enumerate(items):
        idx = _int(item, f"{path}[{i}]", minimum=0)
        if gpus is not None and idx >= gpus:
            raise SnapshotError(f"{path}[{i}]", f"GPU index {idx} out of range for {gpus} GPUs")
        if idx in seen:
            raise SnapshotError(f"{path}[{i}]", f"GPU index {idx} listed twice")
        seen.add(idx)
        out.append(idx)
    return tuple(sorted(out))
