"""Fixtures of the simulator's unit tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scheduler.simulation.traces import default_traces_dir


@pytest.fixture
def traces_dir() -> Path:
    """The shared real traces; skipped only where they are absent outside CI (a failure in CI)."""
    path = default_traces_dir()
    if not path.is_dir():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"real traces missing at {path} (required in CI)")
        pytest.skip(f"real traces not present at {path}")
    return path
