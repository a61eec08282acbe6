"""What-if in a real browser, over a server seeded with the demo's 30 days of history: an admin
opens the policy page from the navigation, goes to What-if, edits a candidate (its engine
configuration and a team's weight), runs it over the last 30 days, watches the progress bar move (progress frames over the websocket), sees both
policies side by side with the per-team table and four charts, applies the candidate after
seeing its diff, sees the new version in the history and rolls back; a second run is cancelled
from its page and says so; alice gets a 404 on the what-if pages. The same server gives the
demo screenshots of the README (alice's cost page for last month, the cluster's utilization
history). No CSP violation anywhere.

The replay runs in the server's own thread (no broker, as in ``make demo``)."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, Session, _free_port, _server_env, seeded_server, shot

pytestmark = pytest.mark.e2e

HISTORY_DAYS = 30


@pytest.fixture(scope="module")
def history_server(chromium_path):
    """A server of this module's own, over the demo seeded with 30 days of history."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="e2e-whatif-", dir=ARTIFACTS))
    from demo.seed import default_history_days

    # As make demo seeds it: back to the first day of last month (at least 30 days).
    days = max(HISTORY_DAYS, default_history_days(datetime.now(UTC)))
    env = {**_server_env(workdir / "e2e.sqlite3"), "E2E_HISTORY_DAYS": str(days)}
    try:
        with seeded_server(env, workdir, _free_port()) as url:
            yield url, workdir / "server.log"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def sign_in(browser, history_server):
    url, log_path = history_server
    opened: list[Session] = []
    start = log_path.stat().st_size

    def make(username: str, viewport=None) -> Session:
        session = Session(browser, url, username, viewport)
        opened.append(session)
        return session

    yield make
    violations = [v for s in opened for v in s.csp_violations()]
    for session in opened:
        session.close()
    time.sleep(0.2)
    with log_path.open(errors="replace") as log:
        log.seek(start)
        reported = [line.strip() for line in log if "CSP violation" in line]
    assert not violations and not reported, "\n".join(violations + reported)


def test_an_admin_tries_a_candidate_applies_it_and_rolls_back(sign_in):
    admin = sign_in("admin")
    page = admin.login()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Policy").click()
    expect(page.get_by_role("heading", name="Scheduling policy")).to_be_visible()
    page.get_by_role("navigation", name="Policy").get_by_role("link", name="What-if").click()
    expect(page).to_have_url(re.compile(r"/policy/whatif/$"))
    expect(page.locator("#id_window_days")).to_have_value("30")

    page.fill("#id_candidate_name", "patient")
    page.fill("#id_candidate_config", '{"queue_aging_s": -5}')
    page.click("#whatif-run")
    expect(page.locator("[data-errors-for=candidate_config]")).to_contain_text(
        "candidates.patient.engine_config.queue_aging_s: "
    )
    # A whole policy: the engine configuration and a team's weight (from what the loop reads).
    expect(page.locator("#id_weight__nlp")).to_have_value("1.0")
    page.fill("#id_candidate_config", '{"queue_aging_s": 86400}')
    page.fill("#id_weight__nlp", "3")
    page.click("#whatif-run")
    expect(page).to_have_url(re.compile(r"/policy/whatif/\d+/$"))
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])

    # The progress bar moves while the replay runs (frames from the server), then the page
    # turns into the result by itself. The first frame comes after the export of the history,
    # which shares the server's process with its loop and can take a minute on a loaded
    # machine: it has the same bound as the result.
    expect(page.locator("#whatif-status")).to_have_attribute(
        "data-fraction", re.compile(r"^0\.\d+$"), timeout=180_000
    )
    shot(page, "whatif-progress")
    expect(page.locator("#whatif-results")).to_be_visible(timeout=180_000)
    progress = [
        p for p in admin.payloads() if p.get("type") == "whatif.progress" and p.get("run") == run_id
    ]
    running = [p["fraction"] for p in progress if p["status"] == "running"]
    # The claim and the replay's first step report 0.0; whether the page's socket hears them
    # depends on when it connected, so the test asks only that the bar moves forward.
    assert len(running) >= 10 and running == sorted(running)
    assert 0 <= running[0] < running[-1] <= 1
    assert progress[-1]["status"] == "succeeded"

    headers = page.locator("#whatif-results thead th").all_inner_texts()
    assert headers[1:] == ["gpuplatform (in force)", "patient"]
    for metric in ("avg_queue_s", "p95_queue_s", "p99_jct_s", "preemptions", "gpu_utilization"):
        expect(page.locator(f"#whatif-results tr[data-metric={metric}] td")).to_have_count(2)
    expect(page.locator("#whatif-teams tr[data-team=vision]")).to_be_visible()
    # nlp's fair share under the candidate's weights is its own, larger than in force.
    shares = page.locator("#whatif-teams tr[data-team=nlp] td[data-cell=fair_share]")
    expect(shares).to_have_count(2)
    in_force, candidate = (float(t.rstrip(" %")) for t in shares.all_inner_texts())
    assert candidate > in_force, (in_force, candidate)
    expect(page.locator("#whatif-candidates [data-team-weight=nlp]")).to_have_text("nlp: 3.0")
    for figure in ("whatif-wait", "whatif-team-wait", "whatif-team-share", "whatif-utilization"):
        page.wait_for_selector(f"#{figure}-chart .main-svg")
    shot(page, "whatif-result")

    page.locator("#whatif-apply a[data-candidate=patient]").click()
    expect(page.locator("#whatif-apply-diff tr[data-key=queue_aging_s]")).to_contain_text("86400")
    expect(page.locator("#whatif-apply-diff tr[data-key=nlp]")).to_contain_text("3.0")
    page.fill("#whatif-apply-reason", "the replay waits less for vision")
    page.click("#whatif-apply-confirm")
    expect(page).to_have_url(re.compile(r"/policy/versions/2/$"))
    expect(page.locator("#in-force")).to_be_visible()
    expect(page.locator("#policy-diff tr[data-key=queue_aging_s]")).to_contain_text("86400")
    expect(page.locator("#policy-diff tr[data-key=nlp]")).to_contain_text("3.0")

    page.goto("/policy/")
    rows = page.locator("#policy-history tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("the replay waits less for vision")
    page.goto("/policy/versions/1/")
    page.fill("#rollback-reason", "back to the seeded policy")
    page.click("#rollback")
    expect(page).to_have_url(re.compile(r"/policy/versions/3/$"))
    page.goto("/policy/")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("Rollback of v1")


def test_a_cancelled_replay_stops_and_says_so(sign_in):
    admin = sign_in("admin")
    page = admin.login()
    page.goto("/policy/whatif/")
    page.fill("#id_candidate_name", "never")
    page.fill("#id_candidate_config", '{"queue_aging_s": 60}')
    page.click("#whatif-run")
    expect(page).to_have_url(re.compile(r"/policy/whatif/\d+/$"))
    page.click("#whatif-cancel")
    expect(page.locator("#whatif-status")).to_have_attribute(
        "data-status", "cancelled", timeout=60_000
    )
    expect(page.locator("#whatif-cancelled")).to_contain_text("Cancelled")
    expect(page.locator("#whatif-results")).to_have_count(0)
    page.goto("/policy/whatif/")
    expect(page.locator("#whatif-runs tbody tr").first.locator("[data-status]")).to_have_text(
        "Cancelled"
    )


def test_a_member_gets_404_on_the_whatif_pages(sign_in):
    alice = sign_in("alice")
    page = alice.login()
    for path in ("/policy/whatif/", "/policy/whatif/1/", "/policy/whatif/1/apply/?candidate=x"):
        response = page.goto(path)
        assert response is not None and response.status == 404, path


def test_the_demo_has_a_past(sign_in):
    """After seeding, alice's cost page shows last month spent day by day per GPU model, and the
    cluster page a utilization history: the README's screenshots."""
    alice = sign_in("alice", viewport={"width": 1280, "height": 1000})
    page = alice.login()
    last_month = (datetime.now(UTC).replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    page.goto(f"/billing/teams/vision/?month={last_month}")
    page.wait_for_selector("#fig-spend-chart .main-svg")
    # Bars for many days of the month, one trace per GPU model.
    days = page.evaluate(
        "(() => { const el = document.getElementById('fig-spend-chart');"
        " return el.data.map(t => t.x.length); })()"
    )
    assert days and max(days) >= 20, days
    shot(page, "demo-cost-last-month")
    page.goto("/cluster/")
    page.wait_for_selector("#usage-chart .main-svg")
    points = page.evaluate(
        "(() => Math.max(...document.getElementById('usage-chart').data.map(t => t.x.length)))()"
    )
    assert points >= 24 * 7, points
    shot(page, "demo-cluster-history")


def test_the_submit_form_with_checkpoint_advice_fits_a_phone(sign_in):
    """The history's interruptions give alice advice rows: their table scrolls inside its box
    instead of widening the page."""
    phone = sign_in("alice", viewport={"width": 390, "height": 844})
    page = phone.login()
    page.goto("/jobs/new/")
    page.wait_for_selector("#pool-advice table")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the submit form overflows a phone screen by {overflow}px"
