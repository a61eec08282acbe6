"""``pip install ./gpuctl`` on its own: a clean virtualenv gets the client and its two
dependencies, nothing of the platform, and a ``gpuctl`` that logs in to a live server."""

from __future__ import annotations

import json
import stat

import pytest

from tenants.models import ApiToken
from tests.clean_venv import CleanVenv, pristine_copy

pytestmark = pytest.mark.slow

PLATFORM_ONLY = {"gpuplatform", "django", "djangorestframework", "celery", "channels", "gpuagent"}


def test_gpuctl_installs_alone_and_logs_in(platform, live_server, tmp_path):
    venv = CleanVenv(tmp_path / "venv")
    venv.pip("install", pristine_copy("gpuctl", tmp_path))

    installed = venv.distributions()
    assert "gpuctl" in installed
    assert not installed & PLATFORM_ONLY, installed
    requires = venv.run(
        "python",
        "-c",
        "import importlib.metadata as m; print('\\n'.join(m.requires('gpuctl')))",
    )
    assert {line.split(">")[0].lower() for line in requires.stdout.split()} == {"httpx", "pyyaml"}

    shown = venv.run("gpuctl", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "login" in shown.stdout and "submit" in shown.stdout

    config = tmp_path / "gpuctl-config.json"
    env = {"GPUCTL_CONFIG": str(config)}
    login = venv.run(
        "gpuctl",
        "login",
        "--url",
        live_server.url,
        "-u",
        "alice",
        "--password-stdin",
        stdin="pw-alice\n",
        env=env,
    )
    assert login.returncode == 0, login.stderr
    saved = json.loads(config.read_text())
    assert saved["url"] == live_server.url and saved["token"].startswith(ApiToken.PREFIX)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert ApiToken.objects.filter(user=platform["alice"], name="gpuctl").count() == 1

    listed = venv.run("gpuctl", "ls", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []

    refused = venv.run(
        "gpuctl",
        "login",
        "--url",
        live_server.url,
        "-u",
        "alice",
        "--password-stdin",
        stdin="wrong\n",
        env={"GPUCTL_CONFIG": str(tmp_path / "other.json")},
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error:")
