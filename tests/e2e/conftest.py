"""Browser end-to-end fixtures: a real ASGI server (Daphne, through ``manage.py runserver``, the
same serving path as ``make demo``) on a free port against its own SQLite database, with the
in-process scheduling loop on a fast simulated clock, and Debian's Chromium driven by Playwright.

The server runs in a subprocess with the embedded defaults (no Redis: in-memory channel layer,
in-process loop), so the loop, the web requests and the websockets share one process as in the
demo. Screenshots go to test-artifacts/screenshots/ (gitignored).

Chromium: /usr/bin/chromium (scripts/install-chromium). Missing, it skips these tests with a
reason, except under CI=true where it fails them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
PASSWORD = "demo"  # seed_demo's demo password


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_env(db_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="gpuplatform.settings",
        DJANGO_DEBUG="1",
        DATABASE_URL=f"sqlite:///{db_path}",
        # One real second is ten simulated minutes: a 30-minute job runs for 3 s.
        SIMULATED_TIME_SCALE="600",
        SIMULATED_FAILURE_RATE_PER_NODE_HOUR="0",
        SCHEDULER_CYCLE_SECONDS="0.5",
        PYTHONUNBUFFERED="1",
        LOG_LEVEL="WARNING",
    )
    return env


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not os.access(CHROMIUM, os.X_OK):
        message = f"{CHROMIUM} is missing (run scripts/install-chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; required in CI")
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture(scope="session")
def live_server_url(chromium_path) -> str:
    """Base URL of a Daphne server with the scheduling loop on, over a freshly seeded database.

    Its database and log live in test-artifacts/e2e-server/ (server.log is kept for failures).
    Two pytest runs on one checkout take turns (a file lock) instead of sharing that directory.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    lock = (ARTIFACTS / "e2e-server.lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    workdir = ARTIFACTS / "e2e-server"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    db_path = workdir / "e2e.sqlite3"
    env = _server_env(db_path)
    seeded = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "e2e" / "seed_e2e.py")],
        cwd=ROOT,
        env={**env, "GPUPLATFORM_NO_LOOP": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert seeded.returncode == 0, seeded.stderr[-3000:]

    port = _free_port()
    log_path = workdir / "server.log"
    log = log_path.open("w")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**env, "SCHEDULER_IN_PROCESS_LOOP": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                pytest.fail("the e2e server exited:\n" + log_path.read_text()[-3000:])
            try:
                with urllib.request.urlopen(url + "/login/", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the e2e server did not answer:\n" + log_path.read_text()[-3000:])
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        log.close()
        if "Traceback" in log_path.read_text():
            print(f"the e2e server logged tracebacks; see {log_path}")
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


@pytest.fixture(scope="module")
def browser(chromium_path):
    # Module scope, not session: Playwright's sync API keeps an event loop in this thread while
    # it is open, and Django refuses ORM calls from a thread with a running loop, so it must be
    # closed before the database tests of the same pytest run.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()


class Session:
    """One signed-in browser context: its pages, the websocket frames it received, the URLs it
    requested (to prove no asset comes from elsewhere)."""

    def __init__(self, browser, base_url: str, username: str, viewport=None):
        self.base_url = base_url
        self.username = username
        self.context = browser.new_context(
            base_url=base_url, viewport=viewport or {"width": 1280, "height": 900}
        )
        self.context.set_default_timeout(15_000)
        self.frames: list[str] = []
        self.requests: list[str] = []
        self.console: list[str] = []
        self.context.on("request", lambda request: self.requests.append(request.url))

    def page(self, path: str | None = None):
        page = self.context.new_page()
        page.on("websocket", self._watch)
        page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        if path is not None:
            page.goto(path)
        return page

    def _watch(self, websocket) -> None:
        websocket.on("framereceived", lambda payload: self.frames.append(str(payload)))

    def payloads(self) -> list[dict]:
        return [json.loads(frame) for frame in self.frames]

    def login(self, page=None):
        """Log in through the login form, typing with the keyboard (Tab to the password, Enter to
        submit)."""
        page = page or self.page()
        page.goto("/login/")
        # The field has autofocus, but a page of a fresh headless context may not hold the
        # focus yet; focusing it explicitly keeps the test about the form, not the window.
        page.focus("#id_username")
        page.keyboard.type(self.username)
        page.keyboard.press("Tab")
        page.keyboard.type(PASSWORD)
        page.keyboard.press("Enter")
        page.wait_for_url(self.base_url + "/")
        return page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def session_as(browser, live_server_url):
    """``session_as("alice")`` -> a signed-in :class:`Session`; closed after the test."""
    opened: list[Session] = []

    def make(username: str, viewport=None) -> Session:
        session = Session(browser, live_server_url, username, viewport)
        opened.append(session)
        return session

    yield make
    for session in opened:
        session.close()


def shot(page, name: str) -> None:
    """Save a full-page screenshot as a test artifact."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def wait_live(page) -> None:
    """Wait until the page's websocket has said hello."""
    page.wait_for_selector("html[data-stream=open]")
