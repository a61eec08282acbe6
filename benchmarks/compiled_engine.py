"""The policy engine compiled with mypyc, against the engine as it runs: same decisions? faster?

    nice .venv/bin/python benchmarks/compiled_engine.py [--dir /tmp/compiled-engine]
        [--cases a,b] [--seeds 0] [--rounds 3] [--check-only]

Copies ``scheduler/`` and ``benchmarks/`` into ``--dir``, marks the rule mixins and their shared
``_CycleState`` as mypyc traits there (a compiled class may inherit from several classes only if
all but one are traits; the source tree stays plain Python, so nothing here needs a compiler to
run), compiles the engine's modules with mypyc (about 35 s on the development VM; needs a C
compiler and the Python headers) and runs ``benchmarks/engine_ab.py`` with this tree as the base
and the compiled copy as the new engine: the digest of every call's decisions must agree, and
the table gives both engines' replay times against ``tiresias``'. Results in docs/benchmarks.md
("The engine compiled with mypyc").
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# The engine's modules (what decide() runs); the codec, the CLI and routing's explanations stay
# interpreted.
COMPILED = (
    "engine",
    "preemption",
    "backfill",
    "placement",
    "victims",
    "elastic",
    "cycle_state",
    "capacity",
    "state",
    "ranking",
    "memo",
    "running",
    "fairshare",
    "model",
)
TRAITS = {
    "cycle_state": "_CycleState",
    "backfill": "_Backfill",
    "placement": "_Placement",
    "victims": "_Victims",
    "preemption": "_Preemption",
    "elastic": "_Elastic",
}

_SETUP = """
from setuptools import setup
from mypyc.build import mypycify
mods = {mods!r}
setup(
    name="compiled-engine",
    packages=[],
    ext_modules=mypycify(["--ignore-missing-imports", "--follow-imports=silent"] + mods),
    script_args=["build_ext", "--inplace"],
)
"""


def prepare(out: Path) -> None:
    """A copy of the tree's ``scheduler`` and ``benchmarks`` with the mixins as traits."""
    if out.exists():
        shutil.rmtree(out)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "build")
    for name in ("scheduler", "benchmarks"):
        shutil.copytree(HERE / name, out / name, ignore=ignore)
    policy = out / "scheduler" / "policy"
    for module, cls in TRAITS.items():
        path = policy / f"{module}.py"
        src = path.read_text()
        src, n = re.subn(rf"^class {cls}\b", f"@trait\nclass {cls}", src, count=1, flags=re.M)
        if n != 1:
            raise SystemExit(f"{path}: class {cls} not found")
        src = src.replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n\nfrom mypy_extensions import trait\n",
            1,
        )
        path.write_text(src)


def compile_engine(out: Path) -> None:
    mods = [f"scheduler/policy/{m}.py" for m in COMPILED]
    script = out / "setup_compiled_engine.py"
    script.write_text(_SETUP.format(mods=mods))
    run = subprocess.run(
        [sys.executable, script.name], cwd=out, capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
        raise SystemExit("mypyc failed (above)")
    built = sorted(p.name for p in (out / "scheduler" / "policy").glob("*.so"))
    if len(built) != len(COMPILED):
        raise SystemExit(f"expected {len(COMPILED)} compiled modules, got {built}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", type=Path, help="where to build (default: a new temporary dir)")
    ap.add_argument("--cases", help="comma-separated suite case names (default: all)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "var/benchmarks/compiled_engine.json")
    args = ap.parse_args(argv)
    out = (args.dir or Path(tempfile.mkdtemp(prefix="compiled-engine-"))).resolve()
    prepare(out)
    compile_engine(out)
    ab = [sys.executable, str(HERE / "benchmarks" / "engine_ab.py"), "--base", str(HERE)]
    ab += ["--new", str(out), "--seeds", args.seeds, "--rounds", str(args.rounds)]
    ab += ["--out", str(args.out)]
    if args.cases:
        ab += ["--cases", args.cases]
    if args.check_only:
        ab.append("--check-only")
    return subprocess.run(ab, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
