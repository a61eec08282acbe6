"""Cycle triggers are debounced across processes: one per window, not one per submission."""

from __future__ import annotations

import time

import pytest

from scheduler import triggers


@pytest.fixture
def debounce_redis(settings):
    if not settings.REDIS_URL:
        pytest.skip("needs Redis (REDIS_URL); CI sets it")
    triggers._redis = None  # connect to this test's REDIS_URL
    client = __import__("redis").Redis.from_url(settings.REDIS_URL)
    client.delete(triggers.DEBOUNCE_KEY)
    yield
    client.delete(triggers.DEBOUNCE_KEY)
    triggers._redis = None


def test_only_the_first_caller_of_a_window_enqueues(debounce_redis):
    # A sub-second window: Django's cache API would round it to 0 s, i.e. no debounce at all.
    first = [triggers._first_in_window(0.5) for _ in range(50)]
    assert first == [True] + [False] * 49
    time.sleep(0.6)
    assert triggers._first_in_window(0.5) is True
    assert triggers._first_in_window(0.5) is False
