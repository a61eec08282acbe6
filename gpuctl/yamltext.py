"""Parsing the YAML files users hand to gpuctl (job specs, policies, what-if candidates).

Guarantees: every way a file can fail to parse (a syntax error, a value PyYAML cannot build such
as the date ``2030-13-45``, nesting deep enough to exhaust the interpreter's stack) raises one
``YamlTextError`` whose message is a single line, naming the line and column when PyYAML knows
them; nothing else escapes, so each loader turns it into its own exit-2 error."""

from __future__ import annotations

from typing import Any

import yaml


class YamlTextError(ValueError):
    """The text is not YAML gpuctl can use; ``str()`` is a one-line reason."""


def load_all(text: str) -> list[Any]:
    """Every document of ``text`` (``None`` for an empty one), or ``YamlTextError``."""
    try:
        return list(yaml.safe_load_all(text))
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


def load_one(text: str) -> Any:
    """The single document of ``text`` (``None`` when empty), or ``YamlTextError``."""
    documents = [d for d in load_all(text) if d is not None]
    if len(documents) > 1:
        raise YamlTextError("holds several YAML documents; give one per file")
    return documents[0] if documents else None


def _one_line(text: str) -> str:
    return " ".join(text.split())
