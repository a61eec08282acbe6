"""The policy history in a real browser: an admin opens the policy page from the navigation,
changes a team's weight and the engine configuration, sees a bad field refused with
``field: reason``, applies, sees the new version and its changes, rolls back to v1 and sees the
rollback in the history; alice has no Policy link and gets a 404. No CSP violation anywhere (the
session fixture fails the test on one)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import shot

pytestmark = pytest.mark.e2e


def test_an_admin_applies_a_policy_change_and_rolls_it_back(session_as):
    admin = session_as("admin")
    page = admin.login()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Policy").click()
    expect(page.get_by_role("heading", name="Scheduling policy")).to_be_visible()
    expect(page.locator("#policy-history tbody tr")).to_have_count(1)

    page.fill("#id_engine_config", '{"queue_aging_s": -1}')
    page.fill("#id_weight__nlp", "3")
    page.fill("#id_reason", "give nlp a larger share")
    page.click("#policy-apply")
    expect(page.locator("[data-errors-for=engine_config]")).to_contain_text(
        "engine_config.queue_aging_s: "
    )

    page.fill("#id_engine_config", '{"queue_aging_s": 7200}')
    page.click("#policy-apply")
    expect(page).to_have_url(re.compile(r"/policy/versions/2/$"))
    expect(page.locator("#in-force")).to_be_visible()
    expect(page.locator("#policy-diff tr[data-key=nlp]")).to_contain_text("3.0")
    expect(page.locator("#policy-diff tr[data-key=queue_aging_s]")).to_contain_text("7200")
    shot(page, "policy-version-2")

    page.goto("/policy/versions/1/")
    page.fill("#rollback-reason", "nlp's share hurt vision's deadlines")
    page.click("#rollback")
    expect(page).to_have_url(re.compile(r"/policy/versions/3/$"))
    expect(page.locator("#policy-diff tr[data-key=nlp]")).to_contain_text("1.0")

    page.goto("/policy/")
    rows = page.locator("#policy-history tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("Rollback of v1")
    page.goto("/policy/diff/?a=1&b=3")
    expect(page.locator("#policy-diff")).to_contain_text("No difference.")
    shot(page, "policy-history")


def test_a_member_has_no_policy_pages(session_as):
    alice = session_as("alice")
    page = alice.login()
    expect(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Policy")
    ).to_have_count(0)
    response = page.goto("/policy/")
    assert response is not None and response.status == 404


def test_the_policy_pages_fit_a_phone(session_as):
    """The engine settings, priority classes and version history are wide tables: they scroll in
    their own box, the page does not."""
    page = session_as("admin", viewport={"width": 390, "height": 844}).login()
    for path in ("/policy/", "/policy/whatif/", "/policy/versions/1/"):
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} overflows a phone screen by {overflow}px"
