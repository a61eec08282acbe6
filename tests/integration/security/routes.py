"""Walk the URL configuration: every route as a concrete path, filled from a table of values.

Used by the isolation tests so that a route added later is exercised automatically. A route whose
URL keyword cannot be filled fails loudly (teach ``fill_values`` the new keyword) rather than
being skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver, resolve


@dataclass(frozen=True)
class Route:
    regex: str  # the full regex, for messages
    name: str | None
    callback: object
    kwargs: tuple[str, ...]
    groups: dict[str, str]  # kwarg -> its sub-pattern

    @property
    def view_class(self):
        return getattr(self.callback, "cls", None) or getattr(self.callback, "view_class", None)

    @property
    def is_api(self) -> bool:
        return self.regex.startswith("api/")

    @property
    def is_admin_site(self) -> bool:
        return self.regex.startswith("admin/")

    @property
    def is_format_variant(self) -> bool:
        return "format" in self.kwargs


def _groups(regex: str) -> dict[str, str]:
    """Named groups of ``regex`` with their (possibly nested) sub-patterns."""
    out = {}
    for match in re.finditer(r"\(\?P<(\w+)>", regex):
        depth, i = 1, match.end()
        while depth and i < len(regex):
            if regex[i] == "\\":
                i += 2
                continue
            depth += {"(": 1, ")": -1}.get(regex[i], 0)
            i += 1
        out[match.group(1)] = regex[match.end() : i - 1]
    return out


def iter_routes() -> Iterator[Route]:
    def walk(resolver, prefix):
        for pattern in resolver.url_patterns:
            regex = prefix + pattern.pattern.regex.pattern.lstrip("^")
            if isinstance(pattern, URLResolver):
                yield from walk(pattern, regex)
            elif isinstance(pattern, URLPattern):
                groups = _groups(regex)
                yield Route(regex, pattern.name, pattern.callback, tuple(groups), groups)

    yield from walk(get_resolver(), "")


def concrete_path(route: Route, values: dict[str, str]) -> str:
    """The route as a path with each keyword replaced by ``values[kw]``. The path is checked to
    resolve back to the same view."""
    out, i, regex = [], 0, route.regex
    while i < len(regex):
        if regex.startswith("(?P<", i):
            name = regex[i + 4 : regex.index(">", i)]
            sub = route.groups[name]
            out.append(values[name])
            i = regex.index(">", i) + 1 + len(sub) + 1
            continue
        if regex.startswith("\\Z", i):
            i += 2
            continue
        if regex.startswith("/?", i):
            out.append("/")
            i += 2
            continue
        ch = regex[i]
        if ch == "\\":
            out.append(regex[i + 1])
            i += 2
            continue
        if ch in "^$":
            i += 1
            continue
        out.append(ch)
        i += 1
    path = "/" + "".join(out).replace("//", "/")
    match = resolve(path)
    assert match.func is route.callback, f"{path} does not resolve to {route.regex}"
    return path


def fill_values(route: Route, table: dict[str, str]) -> dict[str, str]:
    """Values for every keyword of ``route``: from ``table``, or for an alternation of literals
    (Django admin's app labels) its first literal. Anything else is an error naming the route."""
    values = {}
    for name in route.kwargs:
        sub = route.groups[name]
        if name == "format":
            values[name] = ".json" if sub.startswith("\\.") else "json"
        elif name in table:
            values[name] = table[name]
        elif re.fullmatch(r"[\w|]+", sub):
            values[name] = sub.split("|")[0]
        else:
            raise AssertionError(
                f"route {route.regex!r}: the isolation test does not know what to put in "
                f"<{name}>; add it to the value table in tests/integration/security"
            )
    return values
