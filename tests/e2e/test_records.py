"""The reproducibility record in a real browser: a job bob submits (nlp has A100 quota free) through the form (with a
code reference and a dataset version) shows its record once it has started, links its JSON
export, and "Resubmit exactly this" creates a new job with the same spec, under a clean
Content-Security-Policy (the session fixture fails the test on any violation)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import shot
from .test_portal import _submit_form

pytestmark = pytest.mark.e2e


def test_bob_sees_the_record_exports_it_and_resubmits_exactly_this(session_as):
    bob = session_as("bob")
    page = bob.login()
    page.goto("/jobs/new/")
    _submit_form(
        page,
        name="nlp-repro",
        team="nlp",
        image="registry.example.com/nlp/train:1.4",
        code_ref="git:4f2c9e1",
        dataset="imagenet-1k",
        dataset_version="2012-v2",
        workers="1",
        gpus_per_worker="1",
        gpu_model="a100-40gb",
        simulated_duration_s="600",
    )
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    first_url = page.url
    # The record is written when the attempt starts; the page shows it on the next load.
    try:
        expect(page.locator("#job-state")).to_have_text(
            re.compile("Running|Succeeded"), timeout=20_000
        )
    except AssertionError:
        print("page text:", page.locator("main").inner_text()[:2000])
        raise
    page.reload()
    record = page.locator("#record")
    expect(record.get_by_role("heading")).to_contain_text("attempt 1")
    expect(record.locator("[data-field=code-ref]")).to_have_text("git:4f2c9e1")
    expect(record.locator("[data-field=digest-note]")).to_contain_text("simulated cluster")
    expect(record).to_contain_text("2012-v2")
    shot(page, "records-01-job-record")

    export = record.get_by_role("link", name="Export JSON")
    with page.expect_download() as download_info:
        export.click()
    exported = json.loads(Path(download_info.value.path()).read_text())
    assert exported["attempt"] == 1 and exported["code_ref"] == "git:4f2c9e1"
    assert exported["dataset"] == {"name": "imagenet-1k", "version": "2012-v2"}

    record.get_by_role("button", name="Resubmit exactly this").click()
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    assert page.url != first_url
    expect(page.locator(".messages")).to_contain_text("Resubmitted as job")
    expect(page.locator("h1")).to_contain_text("nlp-repro")
    expect(page.locator("#timeline li[data-kind=resubmitted]")).to_have_count(1)
    # the request's details: the "Where and why" card comes first once the job is placed
    details = page.locator("#request-details")
    expect(details).to_contain_text("git:4f2c9e1")
    expect(details).to_contain_text("registry.example.com/nlp/train:1.4")
    expect(details).to_contain_text("a100-40gb")
    shot(page, "records-02-resubmitted")


def test_outcomes_page_draws_its_chart_and_the_form_shows_checkpoint_advice(session_as):
    alice = session_as("alice")
    page = alice.login()
    page.get_by_role("link", name="Outcomes").click()
    expect(page.locator("h1")).to_contain_text("Outcomes of my teams")
    expect(page.locator(".chart .main-svg").first).to_be_visible()
    expect(page.locator("#outcome-totals")).to_contain_text("Success rate")
    shot(page, "records-03-outcomes")
    page.goto("/jobs/new/")
    expect(page.locator("#pool-advice")).to_contain_text("Checkpoint advice")
    expect(page.get_by_label("Checkpoint on the advised schedule")).to_be_visible()
    shot(page, "records-04-submit-advice")
