"""The preferences endpoint: a list of ``{event, channel, enabled}`` choices."""

from __future__ import annotations

import pytest

from notifications import services
from notifications.models import Preference

pytestmark = pytest.mark.django_db

URL = "/api/v1/notifications/preferences"


@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_pair_chosen_twice_is_a_400_naming_it_and_nothing_is_stored(platform, api_as, method):
    alice = platform["alice"]
    before = services.preferences_of(alice)
    body = [
        {"event": "job.succeeded", "channel": "email", "enabled": False},
        {"event": "job.failed", "channel": "email", "enabled": False},
        {"event": "job.failed", "channel": "email", "enabled": True},
    ]
    response = getattr(api_as(alice), method)(URL, body, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "2": ["repeats item 1 (event 'job.failed', channel 'email'): state each pair once"]
    }
    assert not Preference.objects.filter(user=alice).exists()
    assert services.preferences_of(alice) == before


def test_distinct_pairs_are_stored(platform, api_as):
    alice = platform["alice"]
    body = [
        {"event": "job.failed", "channel": "email", "enabled": False},
        {"event": "job.failed", "channel": "webhook", "enabled": True},
    ]
    response = api_as(alice).put(URL, body, format="json")
    assert response.status_code == 200, response.json()
    chosen = services.preferences_of(alice)
    assert chosen[("job.failed", "email")] is False and chosen[("job.failed", "webhook")] is True
