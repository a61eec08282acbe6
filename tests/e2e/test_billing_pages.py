"""Billing pages in a real browser against the live e2e server: the team cost dashboard and the
admin overview draw their Plotly charts with the locally served plotly.js (no other host is ever
contacted), screenshots are saved, and bob gets a 404 for vision's costs.

The e2e server has no price book and no meter schedule of its own, so the test adds rates and
runs the meter once against the server's database, in a separate process (the same database the
running server reads)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ARTIFACTS, PASSWORD, ROOT, _server_env, shot

pytestmark = pytest.mark.e2e

SEED_BILLING = """
import django
django.setup()
from datetime import UTC, datetime
from decimal import Decimal
from billing.models import PriceRate
from billing.meter import meter_run
from catalogue.models import GpuModel
for model in GpuModel.objects.all():
    for capacity, rate in (("on_demand", "3.00"), ("spot", "1.20")):
        PriceRate.objects.get_or_create(
            gpu_model=model, capacity=capacity, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
            defaults={"rate_per_gpu_hour": Decimal(rate)},
        )
import time
from django.utils import timezone
from scheduler.models import Allocation
# The loop starts the seed jobs within a few cycles of the server coming up: wait for them.
deadline = time.monotonic() + 60
rows = 0
while rows == 0 and time.monotonic() < deadline:
    time.sleep(0.5)
    # Meter a little ahead so even an allocation started this instant has metered time.
    rows = meter_run(now=timezone.now() + timezone.timedelta(minutes=5)).usage_rows
print(Allocation.objects.count(), rows)
"""


@pytest.fixture(scope="module")
def metered(live_server_url):
    env = _server_env(ARTIFACTS / "e2e-server" / "e2e.sqlite3")
    done = subprocess.run(
        [sys.executable, "-c", SEED_BILLING],
        cwd=ROOT,
        env={**env, "GPUPLATFORM_NO_LOOP": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    allocations, rows = map(int, done.stdout.strip().splitlines()[-1].split())
    assert rows > 0, f"nothing metered ({allocations} allocations)"
    return live_server_url


def _login(session):
    """Sign in by filling the form (keyboard-only login is the portal suite's own test)."""
    page = session.page("/login/")
    page.fill("#id_username", session.username)
    page.fill("#id_password", PASSWORD)
    page.locator("form button[type=submit]").first.click()
    page.wait_for_url(session.base_url + "/")
    return page


def _only_local(session) -> None:
    foreign = [
        u for u in session.requests if not u.startswith((session.base_url, "data:", "blob:"))
    ]
    assert foreign == [], foreign


def test_team_dashboard_draws_its_charts(metered, session_as):
    alice = session_as("alice")
    page = _login(alice)
    page.goto("/billing/")
    page.wait_for_url("**/billing/teams/vision/")
    for figure in ("fig-spend", "fig-budget", "fig-top-jobs", "fig-waste"):
        page.wait_for_selector(f"#{figure}-chart .main-svg")
    assert page.locator("[data-kpi=idle]").inner_text() == "no telemetry"
    assert "vision-secret-bigrun" in page.locator("table.top-jobs").inner_text()
    shot(page, "billing-team-dashboard")
    _only_local(alice)


def test_admin_overview_and_isolation(metered, session_as):
    admin = session_as("admin")
    page = _login(admin)
    page.goto("/billing/overview/")
    page.wait_for_selector("#fig-spend-chart .main-svg")
    # bob named a job with an HTML link: the top-jobs chart shows it as text, no link anywhere.
    page.wait_for_selector("#fig-top-jobs-chart .main-svg")
    chart = page.locator("#fig-top-jobs-chart")
    assert '<a href="https://evil.example/">click</a>' in chart.inner_text()
    assert page.locator("svg a").count() == 0
    page.get_by_role("link", name="Team", exact=True).click()
    page.wait_for_url("**sort=team**")
    shot(page, "billing-admin-overview")
    _only_local(admin)

    bob = session_as("bob")
    bob_page = _login(bob)
    response = bob_page.goto("/billing/teams/vision/")
    assert response.status == 404
