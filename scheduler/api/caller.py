"""Who calls a scheduler API view, as the services' signatures need it."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from rest_framework.request import Request


def signed_in(request: Request) -> User:
    """The caller of a view behind IsAuthenticated (the default permission): a User. DRF's
    stubs type ``request.user`` as any user, the anonymous one included."""
    return cast(User, request.user)
