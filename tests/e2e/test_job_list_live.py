"""The job list in a real browser: a pending job's "est. start" note, which the page renders
(templates/frontend/_job_rows.html), must survive what the stream does to the row: the row a
``job.status`` push adds or repaints, and the resync every page makes when its socket says hello
(``/jobs/states/``). Both painted the "why pending" cell from the reason alone and dropped the
note.

A server of this module's own (the shared one's cluster is other tests' business): bob fills the
H100 GPUs vision's big run leaves free with a job that has a runtime limit, so his next H100 job
waits for capacity with an estimated start (the end of that limit).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import ARTIFACTS, Session, _free_port, _server_env, seeded_server, shot, wait_live

pytestmark = pytest.mark.e2e

# Simulated seconds (the server runs 600 of them a second): the filler outlives the test.
FILL_LIMIT_S = 7 * 86400


@pytest.fixture(scope="module")
def own_server(chromium_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="e2e-joblist-", dir=ARTIFACTS))
    try:
        with seeded_server(_server_env(workdir / "e2e.sqlite3"), workdir, _free_port()) as url:
            yield url
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def bob(browser, own_server):
    session = Session(browser, own_server, "bob")
    yield session
    violations = session.csp_violations()
    session.close()
    assert not violations, violations


def _wait_js(session, page, expression: str, timeout_s: float = 30) -> None:
    """Poll ``expression`` from here (the portal's CSP refuses wait_for_function's eval)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            print("frames:", session.frames[-20:])
            print("console:", session.console)
            raise TimeoutError(f"still false after {timeout_s} s: {expression}")
        page.wait_for_timeout(100)


def _submit(page, **values) -> int:
    page.goto("/jobs/new/")
    for field, value in values.items():
        locator = page.locator(f"#id_{field}")
        if locator.evaluate("el => el.tagName") == "SELECT":
            locator.select_option(value)
        else:
            locator.fill(value)
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


H100_JOB = {"team": "nlp", "gpu_model": "h100-80gb", "priority_class": "best-effort"}


def _note(job_id: int) -> str:
    return f"document.querySelector('tr[data-job=\"{job_id}\"] [data-field=why] time[datetime]')"


def _shown_why(page, job_id: int) -> str:
    """The why cell of ``job_id``'s row as the page shows it now, as text."""
    return " ".join(page.locator(f'tr[data-job="{job_id}"] [data-field=why]').inner_text().split())


def _rendered_why(session, job_id: int) -> str:
    """The why cell of ``job_id``'s row as the server renders it, as text."""
    html = session.context.request.get("/jobs/").text()
    row = re.search(rf'<tr data-job="{job_id}">.*?</tr>', html, re.S)
    assert row, html[-2000:]
    cell = re.search(r'data-field="why"[^>]*>(.*?)</td>', row.group(0), re.S)
    assert cell
    return " ".join(re.sub(r"<[^>]+>", "", cell.group(1)).split())


def test_the_est_start_note_survives_live_updates_and_the_resync(bob):
    page = bob.login()
    filler = _submit(
        page,
        name="nlp-fill",
        workers="4",
        gpus_per_worker="8",
        runtime_limit_s=str(FILL_LIMIT_S),
        # Its run lasts as long: without it the simulated run took the default half hour, three
        # real seconds, and on a loaded machine the filler had ended before the waiting job's
        # note could be read.
        simulated_duration_s=str(FILL_LIMIT_S),
        **H100_JOB,
    )
    wait_live(page)
    _wait_js(bob, page, "document.getElementById('job-state').textContent === 'Running'")

    jobs = bob.page("/jobs/")
    wait_live(jobs)
    waiting = _submit(bob.page(), name="nlp-wait", workers="1", gpus_per_worker="8", **H100_JOB)
    assert waiting != filler

    # The row arrives by the stream (the list was open before the job existed), note and all.
    _wait_js(bob, jobs, f"!!{_note(waiting)}")
    live = _shown_why(jobs, waiting)
    assert re.search(r"est\. start [A-Z][a-z]{2} \d{1,2}, \d\d:\d\d UTC$", live), live
    assert live == _rendered_why(bob, waiting)
    shot(jobs, "job-list-est-start-live")

    # A fresh page: the note it renders is still there once the hello's resync has painted.
    with jobs.expect_response(lambda response: "/jobs/states/" in response.url):
        jobs.reload()
    # Polled, not read once: under load a cycle may re-plan the estimate between the page's
    # render and the resync, and the row then shows the new one; without the fix the resync
    # wipes the note for good. The page must show what the server renders, note and all; on a
    # slow machine the demo's churn may even free an H100 node and start the job meanwhile,
    # and then both show no note (the row is running).
    deadline = time.monotonic() + 30
    while True:
        shown, rendered = _shown_why(jobs, waiting), _rendered_why(bob, waiting)
        has_note = jobs.evaluate(f"!!{_note(waiting)}")
        if shown == rendered and has_note == ("est. start" in rendered):
            break
        assert time.monotonic() < deadline, f"the resync left {shown!r}, the server {rendered!r}"
        jobs.wait_for_timeout(300)
