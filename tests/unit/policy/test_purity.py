"""The policy engine stays pure: no Django/Celery/Channels, no clock, no randomness, no I/O.

Walks the imports of every module in scheduler/policy (the CLI in __main__.py may read files and
use argparse/json/sys; nothing else may)."""

import ast
from pathlib import Path

import scheduler.policy

PACKAGE = Path(scheduler.policy.__file__).parent
FORBIDDEN = {
    "django",
    "rest_framework",
    "celery",
    "channels",
    "time",
    "datetime",
    "random",
    "os",
    "socket",
    "subprocess",
    "threading",
    "asyncio",
}
CLI_ONLY = {"sys", "json", "argparse", "io", "pathlib"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_policy_modules_import_nothing_impure():
    modules = sorted(PACKAGE.glob("*.py"))
    assert len(modules) >= 6
    for path in modules:
        found = imports(path)
        assert not found & FORBIDDEN, f"{path.name} imports {found & FORBIDDEN}"
        if path.name != "__main__.py":
            assert not found & CLI_ONLY, f"{path.name} imports {found & CLI_ONLY}"


def test_engine_modules_do_no_io():
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name == "__main__.py":
            continue
        calls = {
            n.func.id
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert not calls & {"open", "print", "input", "exec", "eval"}, path.name
