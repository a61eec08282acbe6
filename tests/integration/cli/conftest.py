"""Fixtures for driving ``gpuctl`` against a live test server (pytest-django's ``live_server``).

``gpuctl`` runs in-process through ``gpuctl.main.main`` (the console script's entry point) with
its config file under the test's tmp_path, so every test starts logged out and nothing touches the
real ~/.config. It speaks real HTTP to the live server; only the process boundary is skipped, and
one test in test_gpuctl.py crosses that too."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest

from gpuctl.main import main


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli_config(tmp_path, monkeypatch):
    """An isolated gpuctl config location; GPUCTL_URL/GPUCTL_TOKEN from the outer env are dropped."""
    path = tmp_path / "gpuctl" / "config.json"
    monkeypatch.setenv("GPUCTL_CONFIG", str(path))
    monkeypatch.delenv("GPUCTL_URL", raising=False)
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)
    return path


@pytest.fixture
def gpuctl(cli_config, capsys, monkeypatch):
    """Run ``gpuctl *args`` (optionally with ``stdin`` text); returns exit code, stdout, stderr."""

    def run(*args: str, stdin: str = "") -> Result:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def as_alice(platform, live_server, gpuctl):
    """Logged in to the live server as alice (team vision)."""
    result = gpuctl(
        "login",
        "--url",
        live_server.url,
        "--username",
        "alice",
        "--password-stdin",
        stdin="pw-alice\n",
    )
    assert result.code == 0, result.err
    return gpuctl


@pytest.fixture
def as_admin(platform, live_server, gpuctl):
    """Logged in to the live server as root (a platform admin)."""
    result = gpuctl(
        "login", "--url", live_server.url, "--username", "root", "--password-stdin",
        stdin="pw-root\n",
    )  # fmt: skip
    assert result.code == 0, result.err
    return gpuctl
