"""Parsing the YAML files users hand to gpuctl (job specs, policies, what-if candidates).

Guarantees: every way a file can fail to parse (a syntax error, a value PyYAML cannot build such
as the date ``2030-13-45``, nesting deeper than 1,000 levels) raises one
``YamlTextError`` whose message is a single line, naming the line and column when PyYAML knows
them; nothing else escapes, so each loader turns it into its own exit-2 error. A document whose
aliases make a value that holds itself, or one that spelled out would have more than
``MAX_VALUES`` values, is refused the same way.

Numbers are read as YAML 1.2 reads them, everything else as PyYAML's YAML 1.1 does. YAML 1.1
reads ``1e3`` and ``1e300`` (no dot, or no sign in the exponent) as text, so a bound the server
would name came back as "must be a number"; it also reads ``010`` as 8 and ``1:30`` as 90.
YAML 1.2's numbers: decimal integers (``010`` is 10), ``0o17`` and ``0x1F``, and floats with an
optional dot and exponent (``1e3``, ``1.5E-2``, ``.5``, ``.inf``, ``.nan``); ``1_000``, ``0b101``
and ``1:30`` are text. Booleans stay YAML 1.1's (``yes``/``no``/``on``/``off`` as well as
``true``/``false``): specs written with ``preemptible: yes`` keep working, and where a boolean
is not wanted (an env value) the loaders refuse it by name rather than guess its text.

A key written twice in one mapping is refused, naming both lines (PyYAML kept the last);
one brought in by a merge (``<<: *defaults``) may be given again."""

from __future__ import annotations

import re
from typing import Any

import yaml

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.2 core schema, section 10.3.2.
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


_MERGE_TAG = "tag:yaml.org,2002:merge"


# libyaml's parser when PyYAML was built with it (its wheels are): PyYAML's own, in pure Python,
# made a big array spec wait seconds (docs/benchmarks.md, "gpuctl's YAML reading"), and libyaml
# refuses nesting deeper than 1,000 levels itself. The constructor, building the values, is
# Python's in both.
_SafeBase: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeBase):  # type: ignore[misc,valid-type]  # a variable base: mypy cannot follow it
    """A safe loader with YAML 1.2's integers and floats (see the module's docstring), refusing
    a mapping that gives a key twice."""

    yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # YAML says a mapping's keys are unique; PyYAML keeps the last of a repeated one, so a
        # second `workers:` or `env:` block replaced the first in silence. Keys a merge
        # (`<<: *defaults`) brings in may be overridden: that is what a merge is for, and
        # flatten_mapping (in the super call) adds them after this check of the written ones.
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _value in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            written = (key_node.tag, key_node.value)
            if written in first_line:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key_node.value!r} given twice (first on line {first_line[written]})",
                    key_node.start_mark,
                )
            first_line[written] = key_node.start_mark.line + 1
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


class YamlInt(int):
    """An integer read from YAML that keeps its text as written (``yaml_text``)."""

    yaml_text: str


class YamlFloat(float):
    """A float read from YAML that keeps its text as written (``yaml_text``)."""

    yaml_text: str


def as_written(value: Any) -> str:
    """A scalar as text: a number as the file wrote it (an env value ``3e-4`` stays ``3e-4``,
    ``010`` stays ``010``, not ``0.0003`` and ``10``), anything else as ``str()`` makes it."""
    text = getattr(value, "yaml_text", None)
    return text if isinstance(text, str) else str(value)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> YamlInt:
    # PyYAML's own reads a leading 0 as octal (YAML 1.1); YAML 1.2 writes octal 0o17.
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        number = YamlInt(int(text[2:], 8))
    elif text.startswith("0x"):
        number = YamlInt(int(text[2:], 16))
    else:
        number = YamlInt(int(text, 10))
    number.yaml_text = text
    return number


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> YamlFloat:
    number = YamlFloat(loader.construct_yaml_float(node))
    number.yaml_text = str(loader.construct_scalar(node))
    return number


# Integers first: the float pattern matches "10" too.
_Loader.add_implicit_resolver(_INT_TAG, _INT_12, list("-+0123456789"))
_Loader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_12, list("-+.0123456789"))
_Loader.add_constructor(_INT_TAG, _construct_int)
_Loader.add_constructor(_FLOAT_TAG, _construct_float)


class YamlTextError(ValueError):
    """The text is not YAML gpuctl can use; ``str()`` is a one-line reason."""


# Far more values than any job spec, policy or candidate holds.
MAX_VALUES = 1_000_000


def load_all(text: str) -> list[Any]:
    """Every document of ``text`` (``None`` for an empty one), or ``YamlTextError``."""
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))  # _Loader is a SafeLoader
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
