"""Users with team roles beyond the basic fixtures: team admins and owners of both teams, and
an emptied cache (rate limits live there). Shared by the tenancy and security tests."""

from __future__ import annotations

import pytest


def clear_cache() -> None:
    from django.core.cache import cache

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
