"""The webhook endpoint's writes: PUT replaces a hook (every required field stated, the others
back to their defaults), PATCH changes only the fields it names."""

from __future__ import annotations

import pytest

from notifications import services, targets
from notifications.events import TEAM_HOOK_EVENTS
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def hook(platform, vera, monkeypatch):
    # A public address for every host: the URL checks pass without a resolver.
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.216.34"])
    return services.webhook_create(
        user=vera,
        team="vision",
        name="vision-alerts",
        url="https://hooks.example.com/a",
        format="slack",
        events=["job.failed"],
    )


def _url(hook) -> str:
    return f"/api/v1/notifications/webhooks/{hook.pk}/"


def test_a_put_missing_a_required_field_is_a_400_naming_it_and_changes_nothing(hook, vera, api_as):
    before = api_as(vera).get(_url(hook)).json()
    response = api_as(vera).put(_url(hook), {"name": "renamed"}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["url"] and "required" in response.json()["url"][0]
    assert api_as(vera).get(_url(hook)).json() == before
    assert not AuditEntry.objects.filter(action="webhook.update").exists()


def test_a_put_replaces_the_hook_and_unstated_fields_take_their_defaults(hook, vera, api_as):
    response = api_as(vera).put(
        _url(hook), {"name": "renamed", "url": "https://hooks.example.com/b"}, format="json"
    )
    assert response.status_code == 200, response.json()
    hook.refresh_from_db()
    assert (hook.name, hook.url) == ("renamed", "https://hooks.example.com/b")
    assert hook.format == "generic"
    assert hook.events == list(TEAM_HOOK_EVENTS)


def test_a_put_of_what_get_answered_keeps_the_hook(hook, vera, api_as):
    body = api_as(vera).get(_url(hook)).json()
    response = api_as(vera).put(_url(hook), {**body, "name": "renamed"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {**body, "name": "renamed"}


def test_a_put_cannot_move_a_hook_to_another_team(hook, vera, api_as):
    response = api_as(vera).put(
        _url(hook),
        {"name": "x", "url": "https://hooks.example.com/b", "team": "nlp"},
        format="json",
    )
    assert response.status_code == 400 and "team" in response.json()
    hook.refresh_from_db()
    assert hook.name == "vision-alerts"


def test_a_patch_changes_only_the_fields_it_names(hook, vera, api_as):
    response = api_as(vera).patch(_url(hook), {"name": "renamed"}, format="json")
    assert response.status_code == 200, response.json()
    hook.refresh_from_db()
    assert hook.name == "renamed"
    assert (hook.url, hook.format, hook.events) == (
        "https://hooks.example.com/a",
        "slack",
        ["job.failed"],
    )


def test_a_put_of_what_get_answered_keeps_a_personal_hook(platform, api_as, monkeypatch):
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.216.34"])
    alice = platform["alice"]
    hook = services.webhook_create(user=alice, name="mine", url="https://hooks.example.com/a")
    body = api_as(alice).get(_url(hook)).json()
    assert body["events"] == []
    response = api_as(alice).put(_url(hook), {**body, "name": "renamed"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {**body, "name": "renamed"}
    events = api_as(alice).patch(_url(hook), {"events": ["job.failed"]}, format="json")
    assert events.status_code == 400 and "leave events out" in events.json()["events"][0]


@pytest.mark.parametrize(
    "webhook_id",
    ["²", "３", "٣", "1e3", "0x3", "", " ", "-3", "0", "9" * 30, 2**63, -1, 0, 3.0, None],
)
def test_a_webhook_id_is_only_ascii_digits_within_a_database_key(hook, vera, webhook_id):
    """``webhook_get`` took anything ``str.isdigit`` calls digits: "²" is one, and ``int()``
    then raised a ValueError (a 500 for any caller passing the id through) instead of the
    NotFound any id naming no hook gets; "٣" and "３" (Arabic-Indic and full-width 3) found
    hook 3."""
    from core.errors import NotFound
    from notifications.models import Webhook

    Webhook.objects.filter(pk=hook.pk).update(id=3)
    assert services.webhook_get(user=vera, webhook_id="3").name == "vision-alerts"
    with pytest.raises(NotFound):
        services.webhook_get(user=vera, webhook_id=webhook_id)


def test_a_boolean_is_not_webhook_id_1(hook, vera):
    """``True`` is an int to Python and was looked up as id 1."""
    from core.errors import NotFound
    from notifications.models import Webhook

    Webhook.objects.filter(pk=hook.pk).update(id=1)
    assert services.webhook_get(user=vera, webhook_id=1).name == "vision-alerts"
    with pytest.raises(NotFound):
        services.webhook_get(user=vera, webhook_id=True)
