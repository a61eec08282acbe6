"""CSV cells a spreadsheet will not run: the one rule of every CSV export (the audit log,
statements).

A cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to
Excel, LibreOffice and Google Sheets (``=HYPERLINK(...)`` in a job name or an adjustment's reason
would run on an admin's machine); such a cell gets a leading ``'`` so it stays text. Numbers
(``-12.50``) are left as they are, so amounts still add up.
"""

from __future__ import annotations

from collections.abc import Iterable

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text and text.lower() not in ("nan", "inf", "-inf", "+inf")


def safe_cell(value: object) -> str:
    text = "" if value is None else str(value)
    if text.startswith(_FORMULA_START) and not _is_number(text):
        return "'" + text
    return text


def safe_rows(rows: Iterable[Iterable[object]]) -> list[list[str]]:
    return [[safe_cell(cell) for cell in row] for row in rows]
