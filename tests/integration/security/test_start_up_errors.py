"""A start with a configuration error (settings refuse to load: DJANGO_DEBUG off without
DJANGO_SECRET_KEY, DATABASE_URL, REDIS_URL, or a malformed setting) prints its one message and
exits 2, from manage.py, the ASGI and WSGI entry points and the container entrypoint's roles: a
new site's first start used to end in a 40-line traceback with the message on its last line, and
uvicorn's worker supervisor restarted the failing workers forever. Every other exception keeps
its traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ALL_MISSING = (
    "gpuplatform: configuration error: DJANGO_SECRET_KEY, DATABASE_URL and REDIS_URL must be set "
    'when DJANGO_DEBUG is off (docs/deploy.md, "First start")'
)


def _unset_env(**env: str) -> dict[str, str]:
    """The test process's environment without the platform's settings, plus ``env``."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DJANGO_") and k not in ("DATABASE_URL", "REDIS_URL")
    }
    return {**clean, **env}


def _run(argv: list[str], timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=ROOT, env=_unset_env(**env), capture_output=True, text=True, timeout=timeout
    )


def _one_line_and_exit_2(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [message]


def test_manage_py_names_every_missing_setting_in_one_line_and_exits_2():
    done = _run([sys.executable, "manage.py", "check"], DJANGO_DEBUG="false")
    _one_line_and_exit_2(done, ALL_MISSING)
    assert done.stdout == ""


def test_a_command_of_ours_and_a_malformed_setting_are_configuration_errors_too():
    # One of ours is only found once settings load (Django's own commands are found without).
    ours = _run([sys.executable, "manage.py", "import_nodes", "x"], DJANGO_DEBUG="false")
    _one_line_and_exit_2(ours, ALL_MISSING)
    malformed = _run(
        [sys.executable, "manage.py", "check"], TRUSTED_PROXIES="10.0.0.0/8,not-an-address"
    )
    _one_line_and_exit_2(
        malformed,
        "gpuplatform: configuration error: TRUSTED_PROXIES: 'not-an-address' is not an IP "
        "address or network",
    )
    # django-environ's own cast was a ValueError traceback (gpuplatform/envreader.py).
    not_a_number = _run([sys.executable, "manage.py", "check"], OIDC_TIMEOUT_SECONDS="abc")
    _one_line_and_exit_2(
        not_a_number,
        "gpuplatform: configuration error: OIDC_TIMEOUT_SECONDS: 'abc' is not a whole number",
    )


def test_manage_py_keeps_the_traceback_of_every_other_error():
    crash = 'raise RuntimeError("not a configuration error")'
    done = _run([sys.executable, "manage.py", "shell", "-c", crash])
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "RuntimeError: not a configuration error"
    # Settings loaded, so an ImproperlyConfigured is a bug in code: its traceback is the help.
    raised = (
        "from django.core.exceptions import ImproperlyConfigured; "
        'raise ImproperlyConfigured("a model misconfigured")'
    )
    bug = _run([sys.executable, "manage.py", "shell", "-c", raised])
    assert bug.returncode == 1 and "Traceback (most recent call last)" in bug.stderr


@pytest.mark.parametrize("module", ["gpuplatform.asgi", "gpuplatform.wsgi"])
def test_the_server_entry_points_print_one_line_and_exit_2(module):
    """Imported the way a server imports them (DEBUG off unless set)."""
    done = _run([sys.executable, "-c", f"import {module}"])
    _one_line_and_exit_2(done, ALL_MISSING)
    only_redis = _run(
        [sys.executable, "-c", f"import {module}"],
        DJANGO_SECRET_KEY="x" * 50,
        DATABASE_URL="sqlite:////tmp/gp-probe.sqlite3",
    )
    _one_line_and_exit_2(
        only_redis,
        "gpuplatform: configuration error: REDIS_URL must be set when DJANGO_DEBUG is off "
        '(docs/deploy.md, "First start")',
    )


@pytest.mark.parametrize("role", ["web", "worker", "beat"])
def test_the_container_roles_stop_before_starting_their_server(role):
    """docker/entrypoint.sh checks the settings before uvicorn or Celery start: uvicorn with
    several workers restarts a worker that cannot import the app for ever (the container never
    stops, a traceback every few seconds), and Celery prints a traceback."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = _run(["sh", "docker/entrypoint.sh", role], timeout=30, PATH=path, PORT="18933")
    _one_line_and_exit_2(done, ALL_MISSING)


def test_the_entrypoints_check_passes_a_complete_configuration_silently():
    done = _run(
        [sys.executable, "-m", "gpuplatform.startup"],
        DJANGO_SECRET_KEY="x" * 50,
        DATABASE_URL="sqlite:////tmp/gp-probe.sqlite3",
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
