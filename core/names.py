"""The one rule for the names people give jobs and arrays: one line of printable text. A name is
shown to the team, to platform admins and by gpuctl in a terminal: a line break, an escape
sequence or a bidirectional override in it would break an e-mail header, forge table rows or
recolour and reorder what an admin's terminal shows. The API, the portal and arrays check it
alike (``scheduler.services``)."""

from __future__ import annotations

import unicodedata

# Explicit bidirectional embeddings, overrides and isolates: they reorder the text around them
# ("Trojan Source"); right-to-left scripts need none of them.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def name_errors(name: object) -> list[str]:
    """What is wrong with ``name`` as a job or array name (empty: nothing)."""
    if not isinstance(name, str):
        return []
    for char in name:
        # Cc: C0 and C1 controls; Zl, Zp: the line and paragraph separators, line breaks too
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return [
                f"the name holds a control character (U+{ord(char):04X}: a line break, tab or "
                "escape); use one line of printable text"
            ]
        if char in _BIDI_CONTROLS:
            return [
                f"the name holds a bidirectional control character (U+{ord(char):04X}), which "
                "reorders how the text around it is shown"
            ]
    return []
