"""One team's webhooks must not hold up every team's notifications: a cap on hooks per team and
per person, a dispatcher that hands out due messages round-robin across owners with a bound on
each owner's messages at the worker, and a hook that keeps answering slowly flagged to its
owners. On real PostgreSQL and real local HTTP receivers."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from notifications import services, targets
from notifications.dispatch import notifications_dispatch
from notifications.models import Message, MessageStatus, Webhook
from tenants.models import AuditEntry

from .conftest import run_dispatch

pytestmark = pytest.mark.django_db


@pytest.fixture
def public_dns(monkeypatch):
    # Every host resolves to a public address: the URL checks pass without a real resolver.
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.216.34"])


def _hooks(user, count, *, team=None, start=0):
    return [
        services.webhook_create(
            user=user, team=team, name=f"hook-{i}", url=f"https://hooks.example.com/{i}"
        )
        for i in range(start, start + count)
    ]


def test_a_team_past_its_webhook_cap_gets_a_400_naming_team_and_nothing_is_added(
    platform, vera, public_dns, api_as, settings
):
    settings.NOTIFY_WEBHOOKS_PER_TEAM = 10
    _hooks(vera, 10, team="vision")
    response = api_as(vera).post(
        "/api/v1/notifications/webhooks/",
        {"name": "one-more", "url": "https://hooks.example.com/x", "team": "vision"},
        format="json",
    )
    assert response.status_code == 400
    assert list(response.json()) == ["team"]
    assert "team vision has 10 webhooks, the most allowed (10)" in response.json()["team"][0]
    assert Webhook.objects.filter(team__slug="vision").count() == 10
    assert AuditEntry.objects.filter(action="webhook.create").count() == 10
    # Another team's room is its own: nlp adds one as usual.
    admin = platform["admin"]
    services.webhook_create(user=admin, team="nlp", name="nlp", url="https://hooks.example.com/n")


def test_a_person_past_the_cap_gets_a_form_error_in_the_portal(platform, public_dns, settings):
    settings.NOTIFY_WEBHOOKS_PER_PERSON = 3
    alice = platform["alice"]
    _hooks(alice, 3)
    client = Client()
    client.force_login(alice)
    page = client.post(
        "/notifications/webhooks/",
        {"name": "fourth", "url": "https://hooks.example.com/4", "format": "generic", "team": ""},
    )
    assert page.status_code == 400
    assert "you have 3 webhooks, the most allowed (3)" in page.content.decode()
    assert Webhook.objects.filter(owner=alice).count() == 3


def test_hooks_made_before_a_lower_cap_keep_working(
    platform, vera, receiver, notify_settings, settings
):
    admin = platform["admin"]
    hooks = [
        services.webhook_create(
            user=admin,
            team="vision",
            name=f"local-{i}",
            url=receiver.url,
            allow_private_network=True,
        )
        for i in range(3)
    ]
    settings.NOTIFY_WEBHOOKS_PER_TEAM = 2
    services.webhook_update(user=vera, webhook_id=hooks[2].pk, name="renamed")
    for hook in hooks:
        services.webhook_send_test(user=vera, webhook_id=hook.pk)
    assert sorted(run_dispatch()) == ["delivered"] * 3


def _queued_tests(user, hook, count):
    return [services.webhook_send_test(user=user, webhook_id=hook.pk).pk for _ in range(count)]


def test_a_backlog_of_one_team_does_not_go_ahead_of_another_teams_message(
    platform, vera, public_dns, notify_settings
):
    """vision has 10 messages due, nlp one that came later: oldest-first handed out all of
    vision's first, and the worker (two at a time, up to 10 s each) sent nlp's last."""
    notify_settings.NOTIFY_IN_FLIGHT_PER_OWNER = 4
    admin = platform["admin"]
    [vision_hook] = _hooks(admin, 1, team="vision")
    [nlp_hook] = _hooks(admin, 1, team="nlp", start=1)
    vision = _queued_tests(admin, vision_hook, 10)
    [nlp] = _queued_tests(admin, nlp_hook, 1)

    first = notifications_dispatch(now=timezone.now()).claimed
    # Round-robin: each team's oldest first; vision no more than 4 at the worker.
    assert first == [vision[0], nlp, *vision[1:4]]

    # While vision's four are with the worker, a pass hands out none of vision's, and nlp's next
    # message goes out at once.
    [nlp_later] = _queued_tests(admin, nlp_hook, 1)
    assert notifications_dispatch(now=timezone.now()).claimed == [nlp_later]
    assert Message.objects.filter(pk__in=vision, status=MessageStatus.QUEUED).count() == 6


def test_a_person_is_one_owner_across_their_email_and_own_hooks(
    platform, public_dns, notify_settings
):
    notify_settings.NOTIFY_IN_FLIGHT_PER_OWNER = 2
    alice, bob = platform["alice"], platform["bob"]
    alice_hooks = _hooks(alice, 3)
    [bob_hook] = _hooks(bob, 1, start=3)
    for hook in alice_hooks:
        _queued_tests(alice, hook, 1)
    [bob_message] = _queued_tests(bob, bob_hook, 1)
    claimed = notifications_dispatch(now=timezone.now()).claimed
    assert len(claimed) == 3 and bob_message in claimed[:2]


def test_a_hook_answering_in_over_half_the_deadline_is_flagged_to_its_owners(
    platform, vera, receiver, notify_settings
):
    # Seconds, not tenths: a loaded machine adds its own delay to each answer, and the answer
    # must stay within the deadline (slow, not failed) with room to spare.
    notify_settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 3
    notify_settings.NOTIFY_WEBHOOK_SLOW_AFTER = 3
    admin = platform["admin"]
    hook = services.webhook_create(
        user=admin, team="vision", name="slow-bot", url=receiver.url, allow_private_network=True
    )
    receiver.delay = 1.7  # answers 200, over half the 3 s deadline: never a failure
    for delivery in range(1, 4):
        services.webhook_send_test(user=vera, webhook_id=hook.pk)
        assert run_dispatch() == ["delivered"]
        hook.refresh_from_db()
        assert hook.consecutive_slow == delivery and hook.consecutive_failures == 0
        assert bool(hook.slow_warning) == (delivery == 3), delivery
    assert hook.enabled
    assert hook.slow_warning.startswith(
        "slow: the last 3 deliveries each took over half the 3 s deadline (last 1."
    )
    assert AuditEntry.objects.filter(action="webhook.slow", target_id=str(hook.pk)).count() == 1

    # Its owners see it: on every page, on the webhooks page and in the API.
    client = Client()
    client.force_login(vera)
    home = client.get("/").content.decode()
    shown = escape(hook.slow_warning)
    assert 'id="disabled-hooks"' in home and shown in home
    assert shown in client.get("/notifications/webhooks/").content.decode()
    api = client.get(f"/api/v1/notifications/webhooks/{hook.pk}/").json()
    assert api["slow_warning"] == hook.slow_warning and api["slow_since"]
    other = Client()
    other.force_login(platform["bob"])
    assert 'id="disabled-hooks"' not in other.get("/").content.decode()

    # Within a round of the dispatcher, its messages go after other hooks'.
    quick = services.webhook_create(
        user=admin, team="nlp", name="quick", url=receiver.url, allow_private_network=True
    )
    slow_message = services.webhook_send_test(user=vera, webhook_id=hook.pk).pk
    quick_message = services.webhook_send_test(user=admin, webhook_id=quick.pk).pk
    assert notifications_dispatch(now=timezone.now()).claimed == [quick_message, slow_message]
    Message.objects.filter(pk__in=[slow_message, quick_message]).update(
        status=MessageStatus.DELIVERED
    )

    # Answering quickly again clears the flag.
    receiver.delay = 0
    services.webhook_send_test(user=vera, webhook_id=hook.pk)
    assert run_dispatch() == ["delivered"]
    hook.refresh_from_db()
    assert hook.consecutive_slow == 0 and hook.slow_warning == "" and hook.slow_since is None
