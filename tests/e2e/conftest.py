"""Browser end-to-end fixtures: a real ASGI server (Daphne, through ``manage.py runserver``, the
same serving path as ``make demo``) on a free port against its own SQLite database, with the
in-process scheduling loop on a fast simulated clock, and Debian's Chromium driven by Playwright.

The server runs in a subprocess with the embedded defaults (no Redis: in-memory channel layer,
in-process loop), so the loop, the web requests and the websockets share one process as in the
demo. Screenshots go to test-artifacts/screenshots/ (gitignored).

Chromium: /usr/bin/chromium (scripts/install-chromium). Missing, it skips these tests with a
reason, except under CI=true where it fails them.

Every browser session fails its test on a Content-Security-Policy violation: one the browser
reports to the page (the console's "Refused to …", a ``securitypolicyviolation`` event) or to
the server's ``/csp-report/`` (logged in server.log while the test ran).
"""

from __future__ import annotations

import contextlib
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


def wait_http(url: str, proc: subprocess.Popen, log_path: Path, what: str) -> None:
    """Wait until ``url`` answers 200; fail with ``log_path``'s tail if ``proc`` exits or a
    minute passes."""
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited:\n" + log_path.read_text()[-3000:])
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not answer:\n" + log_path.read_text()[-3000:])
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def seeded_server(env: dict[str, str], workdir: Path, port: int | None = None):
    """Seed a fresh database (``env`` names it) and serve it with the scheduling loop on; yields
    the base URL. The server's log is ``workdir/server.log``."""
    seeded = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "e2e" / "seed_e2e.py")],
        cwd=ROOT,
        env={**env, "GPUPLATFORM_NO_LOOP": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    port = port or _free_port()
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
        wait_http(url + "/login/", server, log_path, "the e2e server")
        yield url
    finally:
        stop(server)
        log.close()
        if "Traceback" in log_path.read_text():
            print(f"the e2e server logged tracebacks; see {log_path}")


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
    try:
        with seeded_server(_server_env(workdir / "e2e.sqlite3"), workdir) as url:
            yield url
    finally:
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
        # The event, besides the console line: it names the directive and what was blocked.
        self.context.add_init_script(
            "document.addEventListener('securitypolicyviolation', function (e) {"
            " console.error('CSP violation: ' + e.violatedDirective + ' blocked ' +"
            " (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber); });"
        )

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

    def csp_violations(self) -> list[str]:
        return [
            line
            for line in self.console
            if "Content Security Policy" in line or "CSP violation" in line
        ]

    def close(self) -> None:
        self.context.close()


def _server_log() -> Path:
    return ARTIFACTS / "e2e-server" / "server.log"


@pytest.fixture
def session_as(browser, live_server_url):
    """``session_as("alice")`` -> a signed-in :class:`Session`; closed after the test, which
    fails if a page broke the Content-Security-Policy (in the browser or reported to the
    server)."""
    opened: list[Session] = []
    log_start = _server_log().stat().st_size if _server_log().exists() else 0

    def make(username: str, viewport=None) -> Session:
        session = Session(browser, live_server_url, username, viewport)
        opened.append(session)
        return session

    yield make
    violations = [v for session in opened for v in session.csp_violations()]
    for session in opened:
        session.close()
    time.sleep(0.2)  # reports are sent asynchronously
    with _server_log().open(errors="replace") as log:
        log.seek(log_start)
        reported = [line.strip() for line in log if "CSP violation" in line]
    assert not violations and not reported, "Content-Security-Policy violations:\n" + "\n".join(
        violations + reported
    )


def shot(page, name: str) -> None:
    """Save a full-page screenshot as a test artifact."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def wait_live(page) -> None:
    """Wait until the page's websocket has said hello."""
    page.wait_for_selector("html[data-stream=open]")
