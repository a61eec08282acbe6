"""Clean virtualenvs for the install tests: what a user gets from ``pip install`` of one of the
project's distributions on a machine that has nothing else of it.

Each venv is new, installs through pip with the machine's own configuration (as a user's would),
and runs its commands from a directory outside the checkout, so nothing is imported from here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Installing a handful of packages takes seconds; resolving the platform's runtime set can take a
# minute on a busy machine.
PIP_TIMEOUT_S = 900


def pristine_copy(name: str, into: Path) -> Path:
    """A copy of the distribution directory ``name`` (``gpuctl``, ``gpuagent``) without build
    leftovers, so pip's in-tree build writes into the copy and never into the checkout."""
    target = into / "src" / name
    shutil.copytree(
        ROOT / name,
        target,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    return target


class CleanVenv:
    """A new virtualenv at ``path`` (the interpreter running the tests, its bundled pip)."""

    def __init__(self, path: Path):
        self.path = path
        self.workdir = path.parent / "workdir"
        self.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def env(self, **extra: str) -> dict[str, str]:
        """The test process's environment without anything that points into the checkout."""
        drop = {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.update(extra)
        return env

    def pip(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        words = [str(a) for a in args]
        if words[:1] == ["install"]:
            # Byte-compiling what it installs is about half of pip's time for the runtime set;
            # the commands run afterwards import and compile what they use, so every test still
            # proves the same.
            words.insert(1, "--no-compile")
        done = subprocess.run(
            [self.bin("python"), "-m", "pip", "--disable-pip-version-check", *words],
            cwd=self.workdir,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
        )
        assert done.returncode == 0, f"pip {' '.join(map(str, args))}:\n{done.stderr[-4000:]}"
        return done

    def run(
        self, *args: str, stdin: str = "", env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """A command of the venv (``gpuctl``, ``python``…) run outside the checkout."""
        return subprocess.run(
            [self.bin(args[0]), *args[1:]],
            cwd=self.workdir,
            env=self.env(**(env or {})),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def distributions(self) -> set[str]:
        """Normalised names of the distributions installed, less the venv's own pip/setuptools."""
        listed = json.loads(self.pip("list", "--format", "json").stdout)
        names = {item["name"].lower().replace("_", "-") for item in listed}
        return names - {"pip", "setuptools"}
