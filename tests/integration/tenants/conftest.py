"""Fixtures for tenancy tests: a fast password hasher, team admins of both teams, an emptied
cache (rate limits live there)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fast_hasher_and_clean_cache(settings):
    # Real hashing costs ~0.3 s per user; these tests are about permissions, not hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


def make_user(username: str, team=None, role: str = "member", **extra):
    from django.contrib.auth import get_user_model

    from tenants.models import Membership

    user = get_user_model().objects.create_user(
        username=username, password="pw-" + username, **extra
    )
    if team is not None:
        Membership.objects.create(user=user, team=team, role=role)
    return user


@pytest.fixture
def vera(teams):
    """An admin of vision."""
    return make_user("vera", teams["vision"], "admin")


@pytest.fixture
def olga(teams):
    """The owner of vision."""
    return make_user("olga", teams["vision"], "owner")


@pytest.fixture
def nick(teams):
    """An admin of nlp."""
    return make_user("nick", teams["nlp"], "admin")
