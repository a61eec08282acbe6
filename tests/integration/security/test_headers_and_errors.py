"""Response headers and errors (issue 26, finding 14 and the DEBUG rule): a Content-Security-
Policy on every page (its reports logged), HSTS over HTTPS, DEBUG off for a production start,
and never a traceback to a client."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]


def _signed_in(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", ["/", "/jobs/", "/cluster/", "/billing/", "/api/v1/jobs/"])
def test_every_response_carries_the_content_security_policy(platform, path):
    response = _signed_in(platform["alice"]).get(path, follow=True)
    policy = response["Content-Security-Policy"]
    for directive in (
        "default-src 'self'",
        "script-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "report-uri /csp-report/",
    ):
        assert directive in policy, (path, policy)
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"


def test_the_login_page_carries_it_too():
    assert "default-src 'self'" in Client().get("/login/")["Content-Security-Policy"]


def test_violation_reports_are_logged_and_bounded(caplog):
    report = {
        "csp-report": {
            "document-uri": "https://gpu.example.com/jobs/",
            "violated-directive": "script-src-elem",
            "blocked-uri": "https://evil.example/x.js",
        }
    }
    with caplog.at_level(logging.WARNING, logger="gpuplatform.csp"):
        response = Client().post(
            "/csp-report/", json.dumps(report), content_type="application/csp-report"
        )
    assert response.status_code == 204
    assert "script-src-elem blocked https://evil.example/x.js" in caplog.text
    assert (
        Client().post("/csp-report/", "[" * 5000, content_type="application/csp-report").status_code
        == 400
    )
    assert Client().get("/csp-report/").status_code == 405


def test_hsts_only_over_https(settings):
    settings.SECURE_HSTS_SECONDS = 31_536_000
    assert "Strict-Transport-Security" not in Client().get("/login/")
    secure = Client().get("/login/", secure=True)
    assert secure["Strict-Transport-Security"] == "max-age=31536000"


def _start(code: str, **env) -> subprocess.CompletedProcess:
    """A fresh interpreter importing the ASGI entry point the way uvicorn does."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    clean.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_production_start_runs_with_debug_off():
    probe = (
        "import gpuplatform.asgi; from django.conf import settings; "
        "print(settings.DEBUG, settings.SECURE_HSTS_SECONDS, settings.SESSION_COOKIE_SECURE)"
    )
    refused = _start(probe)  # no DJANGO_DEBUG, no secret: DEBUG is off, so it refuses
    assert refused.returncode != 0
    assert "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off" in refused.stderr
    started = _start(
        probe,
        DJANGO_SECRET_KEY="x" * 50,
        DATABASE_URL=os.environ.get("DATABASE_URL", "sqlite:////tmp/gp-probe.sqlite3"),
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    assert started.returncode == 0, started.stderr[-2000:]
    assert started.stdout.split() == ["False", "31536000", "True"]
    # Asked for explicitly, a developer still gets it.
    debug = _start(probe, DJANGO_DEBUG="true")
    assert debug.returncode == 0 and debug.stdout.split()[0] == "True"


@pytest.fixture
def broken_job_list(monkeypatch):
    from scheduler import selectors

    def explode(**kwargs):
        raise RuntimeError("internal detail /srv/secret/path")

    monkeypatch.setattr(selectors, "job_list", explode)


def test_no_traceback_reaches_an_api_client(platform, broken_job_list, settings):
    assert settings.DEBUG is False
    response = _signed_in(platform["alice"]).get("/api/v1/jobs/")
    assert response.status_code == 500
    assert response.json() == {
        "detail": "internal error; it has been logged for the platform admins"
    }
    assert b"Traceback" not in response.content and b"secret" not in response.content


def test_no_traceback_reaches_a_portal_page(platform, broken_job_list):
    response = _signed_in(platform["alice"]).get("/jobs/")
    assert response.status_code == 500
    body = response.content.decode()
    assert "Something went wrong" in body
    assert "Traceback" not in body and "secret" not in body and "RuntimeError" not in body


def test_api_404s_and_page_400s_say_what_happened(platform):
    client = _signed_in(platform["alice"])
    missing = client.get("/api/v1/jobs/" + "9" * 30 + "/")
    assert missing.status_code == 404 and missing.json() == {"detail": "not found"}
    bad_month = client.get("/billing/teams/vision/?month=9999-12")
    assert bad_month.status_code == 400
    assert "must be a month from 2000-01 to 2199-12" in bad_month.content.decode()
