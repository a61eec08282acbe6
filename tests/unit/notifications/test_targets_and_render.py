"""Pure parts of notifications: which addresses a webhook may reach, what a grouped message says,
and that our signature is what the Standard Webhooks reference library expects."""

from __future__ import annotations

import json

import pytest
from standardwebhooks import Webhook as ReferenceVerifier
from standardwebhooks import WebhookVerificationError

from notifications import render, targets
from notifications.models import new_webhook_secret


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "a loopback address"),
        ("127.8.9.10", "a loopback address"),
        ("::1", "a loopback address"),
        ("169.254.169.254", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("10.0.0.1", "a private address"),
        ("172.16.5.4", "a private address"),
        ("192.168.1.1", "a private address"),
        ("fd00::1", "a private address"),
        ("100.64.0.1", "a carrier-grade NAT address"),
        ("0.0.0.0", "an unspecified address"),
        ("224.0.0.1", "a multicast address"),
        ("::ffff:10.0.0.1", "a private address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("240.0.0.1", "a reserved address"),
    ],
)
def test_internal_addresses_are_refused(address, reason):
    assert targets.address_problem(address) == reason


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700::6810:85e5", "8.8.8.8"])
def test_public_addresses_are_allowed(address):
    assert targets.address_problem(address) is None


def test_any_internal_answer_refuses_the_name():
    resolver = lambda host, port: ["93.184.216.34", "10.0.0.7"]  # noqa: E731
    with pytest.raises(targets.TargetRefused, match="resolves to 10.0.0.7, a private address"):
        targets.check_url("https://hooks.example.com/x", allow_private=False, resolver=resolver)
    target = targets.check_url("https://hooks.example.com/x", allow_private=True, resolver=resolver)
    assert target.port == 443 and target.addresses == ("93.184.216.34", "10.0.0.7")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "must not be blank"),
        ("gopher://example.com/", "must be an http:// or https:// URL"),
        ("http:///path", "has no host name"),
        ("http://example.com:99999/", "has an invalid port"),
        ("http://a:b@example.com/", "must not carry a user name or password"),
        ("http://example.com/" + "x" * 500, "must be at most 500 characters"),
    ],
)
def test_malformed_urls_are_refused(url, reason):
    with pytest.raises(targets.TargetRefused, match=reason):
        targets.check_url(url, allow_private=False, resolver=lambda h, p: ["93.184.216.34"])


def _line(kind="job.succeeded", n=1):
    return render.Line(
        kind=kind,
        title=f"Job j{n} (#{n}) finished",
        detail="exit code 0",
        url=f"https://p/jobs/{n}/",
        team="vision",
        time="2026-12-01T00:00:00+00:00",
        job=n,
    )


def test_subjects():
    assert render.subject([_line()]) == "Job j1 (#1) finished"
    mixed = [_line("job.failed", 1), _line("job.succeeded", 2), _line("job.succeeded", 3)]
    assert render.subject(mixed) == "3 notifications: 2 jobs finished, 1 jobs failed"
    assert render.subject(mixed, array_name="sweep") == (
        "Job array sweep: 2 jobs finished, 1 jobs failed"
    )


def test_long_messages_list_fifty_and_count_the_rest():
    lines = [_line(n=n) for n in range(120)]
    text = render.email_text(lines, heading="h", settings_url="https://p/s/")
    assert text.count("- Job") == 50 and "… and 70 more" in text
    body = render.generic_body(lines, message_id="msg_1", heading="h", sent_at="t")
    assert body["count"] == 120 and len(body["events"]) == 50 and body["truncated"]
    slack = render.slack_body(lines, heading="h")
    assert all(len(b["text"]["text"]) <= 3000 for b in slack["blocks"])
    assert "… and 70 more" in slack["blocks"][-1]["text"]["text"]


def test_slack_text_is_escaped():
    line = render.Line("job.failed", "Job <b>&x (#1) failed", "", "", "vision", "t")
    block = render.slack_body([line], heading="h")["blocks"][1]["text"]["text"]
    assert "&lt;b&gt;&amp;x" in block


def test_signature_matches_the_standard_webhooks_reference():
    secret = new_webhook_secret()
    content = render.encode({"hello": "wörld"})
    headers = render.signed_headers(
        secret=secret, message_id="msg_42", timestamp=1_900_000_000, content=content
    )
    verifier = ReferenceVerifier(secret)
    # The reference checks the timestamp against its clock: sign "now" for the positive case.
    import time

    now = int(time.time())
    fresh = render.signed_headers(
        secret=secret, message_id="msg_42", timestamp=now, content=content
    )
    assert verifier.verify(content, fresh) == json.loads(content)
    with pytest.raises(WebhookVerificationError):
        verifier.verify(content + b" ", fresh)
    with pytest.raises(WebhookVerificationError):
        ReferenceVerifier(new_webhook_secret()).verify(content, fresh)
    assert headers["webhook-signature"].startswith("v1,")
