"""Ids from URLs and query strings: whole numbers within a 64-bit database key, or nothing.

A path (``<id:job_id>``), a REST detail route and a list such as ``?ids=1,2,3`` all go through
:func:`parse_id`, so an id of thirty digits, a negative one or a Unicode digit ("²") is "not
found" (a 404 or simply left out), never a database overflow (SQLite refuses integers beyond
64 bits with a 500).
"""

from __future__ import annotations

MAX_ID = 2**63 - 1
# At most 19 ASCII digits: every 64-bit key fits, and the URL resolver rejects longer ones.
ID_REGEX = r"[0-9]{1,19}"


def parse_id(value: object) -> int | None:
    """``value`` as a database id (1 .. 2**63-1), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 19):
            return None
        number = int(text)
    return number if 1 <= number <= MAX_ID else None


def parse_id_list(text: str, *, limit: int) -> list[int]:
    """The valid ids of a comma-separated list, in order, at most ``limit`` of them; the rest
    (not numbers, out of range) are left out."""
    ids: list[int] = []
    for part in text.split(",", limit * 4)[: limit * 4]:
        number = parse_id(part)
        if number is not None:
            ids.append(number)
            if len(ids) == limit:
                break
    return ids


class IdConverter:
    """The ``<id:name>`` path converter: like ``<int:...>``, bounded to a database key."""

    regex = ID_REGEX

    def to_python(self, value: str) -> int:
        number = parse_id(value)
        if number is None:
            raise ValueError(value)  # the resolver then tries the next pattern (a 404)
        return number

    def to_url(self, value: int) -> str:
        return str(value)
