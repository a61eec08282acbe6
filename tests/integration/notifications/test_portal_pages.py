"""The notification pages: a team admin adds a team webhook (a refused URL is shown next to its
field, nothing written), sends a test (queued, never sent in the request), sees the delivery
log; members do not see team webhooks; a person's own webhook is theirs alone."""

from __future__ import annotations

import pytest
from django.test import Client

from notifications.models import Message, Webhook

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_team_admin_adds_a_webhook_and_sends_a_test(platform, vera, receiver, monkeypatch):
    from notifications import targets

    vera_c = _client(vera)
    page = vera_c.get("/notifications/webhooks/").content.decode()
    assert '<option value="vision">vision</option>' in page
    assert "allow_private_network" not in page  # platform admins only
    refused = vera_c.post(
        "/notifications/webhooks/",
        {"name": "chat", "url": receiver.url, "format": "slack", "team": "vision"},
    )
    assert refused.status_code == 400
    assert 'data-errors-for="url"' in refused.content.decode()
    assert "a loopback address" in refused.content.decode()
    assert not Webhook.objects.exists()

    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.216.34"])
    made = vera_c.post(
        "/notifications/webhooks/",
        {
            "name": "chat",
            "url": "https://hooks.example.com/T000/B000",
            "format": "slack",
            "team": "vision",
            "events": ["job.failed", "budget.hard_stop"],
        },
    )
    assert made.status_code == 200 and 'id="hook-created"' in made.content.decode()
    hook = Webhook.objects.get()
    assert (hook.team.slug, hook.events, hook.format) == (
        "vision",
        ["job.failed", "budget.hard_stop"],
        "slack",
    )
    assert made["Cache-Control"] == "no-store"

    sent = vera_c.post(f"/notifications/webhooks/{hook.pk}/test/")
    assert sent.status_code == 302 and sent["Location"].endswith(f"?webhook={hook.pk}")
    message = Message.objects.get()
    assert message.status == "queued" and message.attempts == 0  # a worker sends it
    log = vera_c.get(sent["Location"]).content.decode()
    assert "Test message for webhook chat" in log

    # A member of the team does not see (or touch) team webhooks; bob neither.
    for user in (platform["alice"], platform["bob"]):
        client = _client(user)
        assert "hooks.example.com" not in client.get("/notifications/webhooks/").content.decode()
        assert client.post(f"/notifications/webhooks/{hook.pk}/delete/").status_code == 404
        assert client.post(f"/notifications/webhooks/{hook.pk}/test/").status_code == 404
    assert vera_c.post(f"/notifications/webhooks/{hook.pk}/delete/").status_code == 302
    assert not Webhook.objects.exists()


def test_a_personal_webhook_is_its_owners_alone(platform, monkeypatch):
    from notifications import targets

    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.216.34"])
    alice = _client(platform["alice"])
    made = alice.post(
        "/notifications/webhooks/",
        {"name": "my dm", "url": "https://hooks.example.com/me", "format": "generic", "team": ""},
    )
    assert made.status_code == 200
    hook = Webhook.objects.get()
    assert hook.owner == platform["alice"] and hook.team is None
    for other in (platform["bob"], platform["charlie"], platform["admin"]):
        client = _client(other)
        assert "my dm" not in client.get("/notifications/webhooks/").content.decode()
        assert client.get(f"/api/v1/notifications/webhooks/{hook.pk}/").status_code == 404
