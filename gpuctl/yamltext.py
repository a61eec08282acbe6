"""Parsing the YAML files users hand to gpuctl (job specs, policies, what-if candidates).

Guarantees: every way a file can fail to parse (a syntax error, a value PyYAML cannot build such
as the date ``2030-13-45``, nesting deep enough to exhaust the interpreter's stack) raises one
``YamlTextError`` whose message is a single line, naming the line and column when PyYAML knows
them; nothing else escapes, so each loader turns it into its own exit-2 error. A document whose
aliases make a value that holds itself, or one that spelled out would have more than
``MAX_VALUES`` values, is refused the same way."""

from __future__ import annotations

from typing import Any

import yaml


class YamlTextError(ValueError):
    """The text is not YAML gpuctl can use; ``str()`` is a one-line reason."""


# Far more values than any job spec, policy or candidate holds.
MAX_VALUES = 1_000_000


def load_all(text: str) -> list[Any]:
    """Every document of ``text`` (``None`` for an empty one), or ``YamlTextError``."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = _one_line(exc.problem or exc.context or "syntax error")
        raise YamlTextError(f"not valid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise YamlTextError(f"not valid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise YamlTextError("not valid YAML: nested too deeply") from None
    except ValueError as exc:
        # PyYAML builds dates and numbers with Python's constructors, which raise ValueError on
        # a well-formed but impossible value (month 13), without saying where.
        raise YamlTextError(f"not valid YAML: a value cannot be read ({exc})") from None
    for document in documents:
        _check_expansion(document)
    return documents


def _check_expansion(document: Any) -> None:
    """Refuse a document whose aliases make a value that holds itself (``a: &a [*a]``) or one
    that, spelled out, has more than MAX_VALUES values (aliases of aliases: a few lines can stand
    for billions). Both parse in a moment, as shared objects; the walks that check and encode a
    request body spell them out: without end for the first (``gpuctl whatif run --candidate``
    spun until killed), for as long as the expansion takes for the second. Linear in the
    distinct values."""
    sizes: dict[int, int] = {}  # values spelled out under each container already walked
    open_: set[int] = set()  # containers whose walk has begun and not ended: the current path
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        value, walked = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        children = list(value.values()) if isinstance(value, dict) else value
        key = id(value)
        if walked:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(child), 1) for child in children)
            if sizes[key] > MAX_VALUES:
                raise YamlTextError(
                    f"not usable: its aliases spell out more than {MAX_VALUES:,} values"
                )
            continue
        if key in sizes:
            continue
        if key in open_:
            raise YamlTextError("not usable: an alias makes a value that holds itself")
        open_.add(key)
        stack.append((value, True))
        stack.extend((child, False) for child in children)


def load_one(text: str) -> Any:
    """The single document of ``text`` (``None`` when empty), or ``YamlTextError``."""
    documents = [d for d in load_all(text) if d is not None]
    if len(documents) > 1:
        raise YamlTextError("holds several YAML documents; give one per file")
    return documents[0] if documents else None


def _one_line(text: str) -> str:
    return " ".join(text.split())
