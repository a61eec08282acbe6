"""One JSON reader for everything a client sends: REST bodies and websocket frames.

``loads_bounded`` refuses, with :class:`JsonRefused` (a ``ValueError``), a document larger than
its byte limit, nested deeper than ``MAX_DEPTH``, not valid strict JSON, with a number that is
not finite, with a number of more than Python's 4,300 digits, or with a string
(a key or a value) holding a NUL character or half of a UTF-16 surrogate pair: PostgreSQL
stores neither, and a lone surrogate cannot even be written back in an error message, so
either ended as a 500 wherever a field did not check it (form fields and query strings get the
same NUL check from ``gpuplatform.middleware.RejectNulBytesMiddleware``). Python's own
``json.loads`` raised ``RecursionError`` on ``'[' * 5000``, which is not a ``ValueError``, so a
five-kilobyte body ended as a 500 and a websocket frame killed its consumer. The API answers a
refusal with a 400 (``gpuplatform.api.BoundedJSONParser``); the websocket closes cleanly.

Non-finite numbers: Python reads the tokens ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON),
and reads ``1e400`` (valid JSON) as infinity, which then reached the views: typed fields
refused it each in its own words (none saying where), and an action that ignores its body (a
node's drain) acted on one holding it; PostgreSQL's jsonb stores neither NaN nor infinity.
Every one is refused here, the message naming where it sits (``the number at
items[2].workers is 1e400, ...``).
"""

from __future__ import annotations

import json
import math
from typing import Any

# No document the platform accepts nests deeper than a handful of levels (an array's items'
# environments are four); 32 leaves room and keeps every later walk of the value shallow.
MAX_DEPTH = 32

# Where a value sits in a document: its keys and list indices from the top.
_Path = tuple[str | int, ...]


class JsonRefused(ValueError):
    """The document is refused; ``reason`` is "size", "depth", "syntax", "number" or "text"."""

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


class _NonFinite:
    """Stands in for a non-finite number while the document is read, so that the refusal can
    say where it was (the decoder's hooks do not know)."""

    __slots__ = ("spelling",)

    def __init__(self, spelling: str):
        self.spelling = spelling


def _first_non_finite(value: Any) -> tuple[_Path, str] | None:
    """The path and spelling of the first non-finite number of ``value``, in document order."""
    stack: list[tuple[Any, _Path]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _NonFinite):
            return path, item.spelling
        if isinstance(item, dict):
            stack.extend((child, (*path, key)) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((item[i], (*path, i)) for i in range(len(item) - 1, -1, -1))
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def _unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored or written back, or None."""
    if "\x00" in text:
        return "a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "half of a UTF-16 surrogate pair"
    return None


def _where(path: _Path) -> str:
    """``items[1].env["A\\u0000B"]``: keys that are not plain names are shown escaped."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier() and part.isascii():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "the body"


def _bad_text(value: Any, root: _Path = ()) -> str | None:
    """Where the first unstorable string of ``value`` (at ``root``) is, and why, or None."""
    stack: list[tuple[Any, _Path]] = [(value, root)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            why = _unstorable(item)
            if why:
                return f"the string at {_where(path)} holds {why}"
        elif isinstance(item, dict):
            for key, child in item.items():
                why = _unstorable(key)
                if why:
                    return f"the key {_where((*path, key))} holds {why}"
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            stack.extend((child, (*path, i)) for i, child in enumerate(item))
    return None


def loads_bounded(
    data: bytes | str, *, max_bytes: int, max_depth: int = MAX_DEPTH, root: _Path = ()
) -> Any:
    """The value of the JSON document ``data``, or :class:`JsonRefused` saying why not.

    ``root``: where ``data`` sits in the API's body when it is typed on its own (a portal form's
    engine configuration is the body's ``engine_config``): a refusal names the path the API
    names for the same value, and the document nests ``len(root)`` levels less (the refusal
    then says "nested deeper than ...": the caller names its field)."""
    max_depth -= len(root)
    nested = "nested" if root else "JSON nested"
    try:
        size = len(data.encode() if isinstance(data, str) else data)
    except UnicodeEncodeError:
        # An unescaped lone surrogate: no UTF-8 decodes to one, so only a caller handing over a
        # str can (a test harness's websocket frame), and the backslash-u walk below misses it.
        raise JsonRefused(
            "the document holds half of a UTF-16 surrogate pair", reason="text"
        ) from None
    if size > max_bytes:
        raise JsonRefused(f"JSON larger than {max_bytes:,} bytes", reason="size")
    non_finite: list[_NonFinite] = []

    def constant(spelling: str) -> _NonFinite:  # NaN, Infinity, -Infinity
        non_finite.append(_NonFinite(spelling))
        return non_finite[-1]

    def number(spelling: str) -> float | _NonFinite:
        parsed = float(spelling)
        return parsed if math.isfinite(parsed) else constant(spelling)

    try:
        value = json.loads(data, parse_constant=constant, parse_float=number)
    except RecursionError:
        raise JsonRefused(f"{nested} deeper than {max_depth} levels", reason="depth") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonRefused(f"not valid JSON: {exc}", reason="syntax") from None
    if isinstance(value, dict | list) and _deeper_than(value, max_depth):
        raise JsonRefused(f"{nested} deeper than {max_depth} levels", reason="depth")
    if non_finite:
        found = _first_non_finite(value)  # None if a repeated key dropped it
        path, spelling = found if found else ((), non_finite[0].spelling)
        path = (*root, *path)
        where = f"the number at {_where(path)}" if path else "the body"
        if not found:
            where = f"a number of {_where(root)}"
        why = (
            "too large: it reads as infinity"
            if spelling[-1].isdigit()
            else "NaN and Infinity are not JSON"
        )
        raise JsonRefused(
            f"{where} is {spelling}, which is not a finite number ({why}); numbers must be finite",
            reason="number",
        )
    # Both can only come from a backslash-u escape (strict JSON has no raw control characters,
    # and the bytes were decoded as UTF-8), so documents without one skip the walk.
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    if "\\u" in text:
        bad = _bad_text(value, root)
        if bad:
            raise JsonRefused(f"{bad}, which the platform cannot store", reason="text")
    return value
