"""Rendering: aligned plain-text tables for people, JSON for scripts, and relative times.

Guarantees: tables never wrap or colour (they pipe cleanly into ``grep``/``awk``; columns are
separated by at least two spaces and empty cells print ``-``); JSON output is the API's own
objects, sorted keys, one document per command (a command that follows a stream writes JSON Lines:
one compact document per line).

Nothing the server sends reaches the terminal as a control sequence: job names, reasons and
messages are other people's text (a member names a job, an admin lists every team's jobs), so
every control character, including escape sequences and bidirectional overrides, is printed as
its escape (``\x1b``, ``\u202e``) by :func:`terminal_safe`, in table cells and in everything
``gpuctl`` writes (:class:`TerminalWriter`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode marks that reorder text.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character written as its escape, so it is shown, never
    interpreted by the terminal."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class TerminalWriter:
    """A text stream that writes through :func:`terminal_safe` (newlines and tabs pass)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(terminal_safe(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def print_json(data: Any, out: TextIO) -> None:
    """One JSON document, indented, with a trailing newline."""
    json.dump(data, out, indent=2, sort_keys=True, default=str)
    out.write("\n")


def json_line(data: Any) -> str:
    """One JSON document on one line (JSON Lines: a stream of them, as ``logs -f --json``)."""
    return json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return terminal_safe(str(value).replace("\n", " ").replace("\t", " "))


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO, *, max_width: int = 60
) -> None:
    """Left-aligned columns; a cell longer than ``max_width`` is cut with an ellipsis."""
    text_rows = [[_clip(cell(v), max_width) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    for row in [list(headers), *text_rows]:
        line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        out.write(line.rstrip() + "\n")


def key_values(pairs: Iterable[tuple[str, Any]], out: TextIO) -> None:
    """``Key:  value`` lines with the values aligned."""
    pairs = list(pairs)
    width = max((len(k) for k, _v in pairs), default=0) + 1
    for key, value in pairs:
        out.write(f"{(key + ':').ljust(width)}  {cell(value)}\n")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 timestamp from the API (``Z`` or an offset), or None."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def human_duration(seconds: float) -> str:
    """``3725`` → ``1h2m``; ``45`` → ``45s``; ``90061`` → ``1d1h``. Two units at most."""
    seconds = int(abs(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return "".join(p for p in parts if not p.startswith("0") or len(parts) == 1)


def when(value: str | None, now: datetime) -> str:
    """``2026-12-02 15:04 UTC (in 25m)`` / ``(3h ago)``; ``-`` when unknown."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    delta = (moment - now).total_seconds()
    relative = f"in {human_duration(delta)}" if delta >= 0 else f"{human_duration(delta)} ago"
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({relative})"


def age(value: str | None, now: datetime) -> str:
    """How long ago ``value`` was (``5m``), ``-`` when unknown."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return human_duration(max(0.0, (now - moment).total_seconds()))
