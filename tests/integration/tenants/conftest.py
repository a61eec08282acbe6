"""Fixtures of the tenants tests: the role fixtures of ``tests.integration.roles`` and an emptied
cache around every test (rate limits live there)."""

import pytest

from tests.integration.roles import clear_cache, make_user, nick, olga, vera  # noqa: F401


@pytest.fixture(autouse=True)
def _clean_cache():
    clear_cache()
    yield
    clear_cache()
