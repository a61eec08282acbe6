"""One JSON reader for everything a client sends: REST bodies and websocket frames.

``loads_bounded`` refuses, with :class:`JsonRefused` (a ``ValueError``), a document larger than
its byte limit, nested deeper than ``MAX_DEPTH``, not valid strict JSON (``NaN`` and
``Infinity`` are not JSON), or with a number of more than Python's 4,300 digits. Python's own
``json.loads`` raised ``RecursionError`` on ``'[' * 5000``, which is not a ``ValueError``, so a
five-kilobyte body ended as a 500 and a websocket frame killed its consumer. The API answers a
refusal with a 400 (``gpuplatform.api.BoundedJSONParser``); the websocket closes cleanly.
"""

from __future__ import annotations

import json
from typing import Any

# No document the platform accepts nests deeper than a handful of levels (an array's items'
# environments are four); 32 leaves room and keeps every later walk of the value shallow.
MAX_DEPTH = 32


class JsonRefused(ValueError):
    """The document is refused; ``reason`` is "size", "depth" or "syntax"."""

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def _no_constants(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def loads_bounded(data: bytes | str, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The value of the JSON document ``data``, or :class:`JsonRefused` saying why not."""
    size = len(data.encode() if isinstance(data, str) else data)
    if size > max_bytes:
        raise JsonRefused(f"JSON larger than {max_bytes:,} bytes", reason="size")
    try:
        value = json.loads(data, parse_constant=_no_constants)
    except RecursionError:
        raise JsonRefused(f"JSON nested deeper than {max_depth} levels", reason="depth") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonRefused(f"not valid JSON: {exc}", reason="syntax") from None
    if isinstance(value, dict | list) and _deeper_than(value, max_depth):
        raise JsonRefused(f"JSON nested deeper than {max_depth} levels", reason="depth")
    return value
