"""The platform as the production image installs it: the runtime part of the lock
(docker/requirements.txt, hash-checked), then the platform's wheel without dependencies, in a
clean virtualenv, run from outside the checkout. The wheel carries the templates and static files;
``check --deploy`` passes with production settings; pages link content-hashed static names."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.clean_venv import PIP_TIMEOUT_S, ROOT, CleanVenv

pytestmark = pytest.mark.slow

HASHED = r"\.[0-9a-f]{12}\."
# Left to the TLS terminator in front of the proxy (docs/deploy.md, "TLS and host names"), and
# the domain owner's HSTS choices: subdomains and preloading (DJANGO_HSTS_INCLUDE_SUBDOMAINS,
# DJANGO_HSTS_PRELOAD).
TLS_WARNINGS = {"security.W004", "security.W005", "security.W008", "security.W021"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w"]
        + [str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    (path,) = out.glob("gpuplatform-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> CleanVenv:
    venv = CleanVenv(tmp_path_factory.mktemp("platform") / "venv")
    venv.pip("install", "--require-hashes", "-r", ROOT / "docker" / "requirements.txt")
    venv.pip("install", "--no-deps", wheel)
    return venv


@pytest.fixture(scope="module")
def production(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("production")
    return {
        "DJANGO_SETTINGS_MODULE": "gpuplatform.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "gpu.example.com,testserver",
        # Named, never connected to: neither check --deploy nor collectstatic opens them.
        "DATABASE_URL": f"sqlite:///{base / 'unused.sqlite3'}",
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "DJANGO_STATIC_ROOT": str(base / "static"),
    }


def test_the_wheel_carries_the_templates_and_every_apps_static_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {
        "gpuplatform/templates/" + p.relative_to(ROOT / "templates").as_posix()
        for p in (ROOT / "templates").rglob("*")
        if p.is_file()
    }
    static = {
        p.relative_to(ROOT).as_posix()
        for app in ("tenants", "scheduler", "billing", "frontend")
        for p in (ROOT / app).glob("static/**/*")
        if p.is_file()
    }
    assert "gpuplatform/templates/base.html" in templates
    assert "frontend/static/frontend/app.css" in static
    assert templates | static <= names
    assert not {n for n in names if n.split("/")[0] in ("tests", "gpuctl", "gpuagent", "docs")}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_locked_runtime_set_satisfies_the_wheel_without_development_tools(venv):
    checked = venv.pip("check")
    assert "No broken requirements found" in checked.stdout
    installed = venv.distributions()
    assert {"gpuplatform", "django", "uvicorn", "celery"} <= installed
    assert not installed & {"daphne", "twisted", "pytest", "ruff", "mypy", "playwright"}
    where = venv.run("python", "-c", "import gpuplatform; print(gpuplatform.__file__)")
    assert str(venv.path) in where.stdout, "imported from the checkout, not the wheel"


def test_check_deploy_passes_with_production_settings(venv, production):
    checked = venv.run("python", "-m", "django", "check", "--deploy", env=production)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    reported = set(re.findall(r"\((\w+\.[A-Z]\d+)\)", checked.stdout + checked.stderr))
    assert not [c for c in reported if ".E" in c], reported
    assert reported <= TLS_WARNINGS, reported


def test_production_pages_link_content_hashed_static_files(venv, production):
    collected = venv.run(
        "python", "-m", "django", "collectstatic", "--noinput", "-v0", env=production, timeout=300
    )
    assert collected.returncode == 0, collected.stderr
    root = Path(production["DJANGO_STATIC_ROOT"])
    manifest = json.loads((root / "staticfiles.json").read_text())["paths"]
    for name in ("frontend/app.css", "frontend/jobs.js", "tenants/tenants.css"):
        assert re.search(HASHED, manifest[name]), manifest[name]
        assert (root / manifest[name]).read_bytes() == (root / name).read_bytes()

    render = (
        "import django; django.setup();"
        "from django.test import Client;"
        "r = Client().get('/login/'); print(r.status_code); print(r.content.decode())"
    )
    page = venv.run("python", "-c", render, env=production)
    status, _, html = page.stdout.partition("\n")
    assert status == "200", page.stdout + page.stderr
    css = re.search(r'href="/static/(frontend/app' + HASHED + r'css)"', html)
    assert css, html
    assert css.group(1) == manifest["frontend/app.css"]
