"""No import cycle between the project's modules, counting imports inside functions too.

A function-level import that only dodges a cycle hides a tangle that import-linter (which does
see it) and the reader meet later; this test fails on any cycle in the graph of every first-party
module's imports, wherever in the file they are. ``from package import name`` depends on
``package.name`` when that is a module, else on the package (import-linter's reading), so a
package's ``__init__`` that loads a submodule lazily is not a cycle with that submodule.
Migrations and tests are left out."""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = (
    "gpuplatform", "demo", "frontend", "billing", "notifications", "telemetry", "policyversions",
    "scheduler", "tenants", "catalogue", "core", "gpuctl", "gpuagent",
)  # fmt: skip

# Imports left out of the graph, each a known cycle to untangle (docs/layers.md, "What is left"),
# by (importer, imported) pattern so that nothing else may join them. None is left.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def known(importer: str, imported: str) -> bool:
    return any(fnmatch(importer, a) and fnmatch(imported, b) for a, b in KNOWN_CYCLE_EDGES)


def modules() -> dict[str, Path]:
    """Every first-party module by dotted name (gpuctl and gpuagent: their inner packages)."""
    found = {}
    for package in PACKAGES:
        base = REPO / package
        if (base / package / "__init__.py").exists():  # a standalone distribution's layout
            base = base / package
        for path in base.rglob("*.py"):
            parts = path.relative_to(base.parent).with_suffix("").parts
            if {"migrations", "tests", "build"} & set(parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module → {imported first-party module: line of the first such import}."""

    def first_party(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    child = f"{source}.{alias.name}"
                    targets.append(child if child in mods else source)
            for target in targets:
                dep = first_party(target)
                if dep is not None and dep != mod and not known(mod, dep):
                    deps.setdefault(dep, node.lineno)
        graph[mod] = deps
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_function_level_imports():
    graph = import_graph(modules())
    # scheduler/apps.py starts the demo's loop from ready(), inside a function.
    assert "scheduler.loop.inprocess" in graph["scheduler.apps"]


def test_no_import_cycle_between_modules():
    graph = import_graph(modules())
    report = [
        "\n".join(
            f"  {mod}:{line} imports {dep}"
            for mod in component
            for dep, line in sorted(graph[mod].items())
            if dep in component
        )
        for component in cycles(graph)
    ]
    if report:
        pytest.fail("import cycles (function-level imports included):\n" + "\n\n".join(report))


def test_a_cycle_is_found():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert cycles(graph) == [["a", "b", "c"]]
