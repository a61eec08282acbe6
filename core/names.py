"""The one rule for the names people give things others see (jobs, arrays, teams, datasets,
webhooks, API tokens): one line of printable text. A name is shown to the team, to platform
admins, in e-mail subjects and by gpuctl in a terminal: a line break, an escape sequence or a
bidirectional override in it would break an e-mail header, forge table rows or recolour and
reorder what an admin's terminal shows. Ordinary text of any script, spaces and punctuation are
names.

Services check names with :func:`name_errors` (the REST API, the portal's forms and gpuctl all
reach them, and refuse alike); the model fields carry :func:`validate_name` too, so Django admin
and ``full_clean`` refuse the same names. A NUL is refused everywhere before it (the JSON
parser and ``gpuplatform.middleware``).

Free text others see (a priority class's description, a price's note, the reason of a policy
version or a quota request, an admin's decision comment) is checked by :func:`text_errors`: it
may span lines, so line breaks and tabs are text there, but the other control characters and
the bidirectional controls are refused for the reasons names refuse them. The text is shown to
every team (descriptions, prices), in the audit log and its CSV export, and by gpuctl; gpuctl
escapes what it prints, but a browser, a spreadsheet or another API client does not."""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError

# Explicit bidirectional embeddings, overrides and isolates: they reorder the text around them
# ("Trojan Source"); right-to-left scripts need none of them.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def name_errors(name: object) -> list[str]:
    """What is wrong with ``name`` as a name others see (empty: nothing). Not a string: nothing
    here (the caller checks types)."""
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


# What multi-line text is made of, besides printable characters.
_TEXT_CONTROLS = frozenset("\n\r\t")


def text_errors(text: object) -> list[str]:
    """What is wrong with ``text`` as free text others see (empty: nothing). Line breaks and tabs
    are allowed; escape sequences and other control characters, and bidirectional controls, are
    not. Not a string: nothing here (the caller checks types)."""
    if not isinstance(text, str):
        return []
    for char in text:
        if unicodedata.category(char) == "Cc" and char not in _TEXT_CONTROLS:
            return [
                f"the text holds a control character (U+{ord(char):04X}: an escape or other "
                "non-printing character); line breaks and tabs are the only ones allowed"
            ]
        if char in _BIDI_CONTROLS:
            return [
                f"the text holds a bidirectional control character (U+{ord(char):04X}), which "
                "reorders how the text around it is shown"
            ]
    return []


def validate_name(value: object) -> None:
    """A model field validator: :func:`name_errors` as a ValidationError."""
    errors = name_errors(value)
    if errors:
        raise ValidationError(errors, code="invalid_name")
