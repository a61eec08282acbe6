"""The portal passes its Content-Security-Policy (issue 26, finding 14): a real browser walks
every page linked from the portal, as a platform admin and as a member, plus the API docs and
Django admin, and the session fixture fails the test on any violation (console or
``/csp-report/``). Each page must also carry the policy, and no page may load anything from
another host."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from .conftest import PASSWORD

pytestmark = pytest.mark.e2e

SKIP_PREFIXES = ("/logout/", "/static/", "/assets/", "/api/schema/", "/csp-report/")
EXTRA_PAGES = ["/api/docs/", "/api/redoc/", "/admin/", "/admin/scheduler/job/", "/teams/manage/"]
MAX_PAGES = 60


def _login(session):
    page = session.page("/login/")
    page.fill("#id_username", session.username)
    page.fill("#id_password", PASSWORD)
    page.locator("form button[type=submit]").first.click()
    page.wait_for_url(session.base_url + "/")
    return page


def _crawl(session, page, extra=()) -> list[str]:
    """Visit every same-site page linked from the pages visited (breadth first), and ``extra``."""
    seen: list[str] = []
    queue = ["/", *extra]
    while queue and len(seen) < MAX_PAGES:
        path = queue.pop(0)
        if (
            path in seen
            or path.startswith(SKIP_PREFIXES)
            or path.endswith((".csv", "/csv", ".json"))
        ):
            continue
        response = page.goto(path)
        seen.append(path)
        assert response is not None and response.status < 500, (path, response and response.status)
        if response.status < 400:
            policy = response.header_value("content-security-policy") or ""
            assert "default-src 'self'" in policy, (path, policy)
        page.wait_for_load_state("load")
        if page.locator("[data-figure]").count():
            # Charts draw after the load event, once plotly.js arrives (charts.js marks it).
            page.wait_for_selector("html[data-charts=drawn]", state="attached")
        else:
            page.wait_for_timeout(100)  # what scripts do just after the load (the stream's socket)
        for href in page.eval_on_selector_all(
            "a[href]", "els => els.map(e => e.getAttribute('href'))"
        ):
            parts = urlsplit(href)
            if parts.netloc or not parts.path.startswith("/"):
                continue
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            if target not in seen and target not in queue:
                queue.append(target)
    return seen


def test_every_page_an_admin_reaches_passes_the_policy(session_as, live_server_url):
    session = session_as("admin")
    page = _login(session)
    seen = _crawl(session, page, EXTRA_PAGES)
    assert len(seen) >= 20, seen
    foreign = [u for u in session.requests if not u.startswith((live_server_url, "data:", "blob:"))]
    assert foreign == [], foreign


def test_every_page_a_member_reaches_passes_the_policy(session_as):
    session = session_as("alice")
    page = _login(session)
    seen = _crawl(session, page)
    assert len(seen) >= 10, seen


def test_the_login_page_passes_the_policy_signed_out(session_as):
    session = session_as("nobody")
    page = session.page("/login/")
    page.fill("#id_username", "nobody")
    page.fill("#id_password", "wrong")
    page.locator("form button[type=submit]").first.click()
    page.wait_for_load_state("load")
    assert "Wrong username or password" in page.content()
