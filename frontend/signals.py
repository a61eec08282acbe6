"""Sessions follow membership: infrastructure hooks that ask a user's open websockets to check
their session and teams again (``core.streams.recheck_sessions``, after commit).

Signals rather than calls from the services, because a membership or a user changes through
more doors than the services (Django admin, a shell, a logout in another tab), and the sockets
must hear of every one. Nothing here changes domain state.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save
from django.http import HttpRequest

from core import streams
from tenants.models import Membership


def _membership_changed(sender: type[Membership], instance: Membership, **kwargs: Any) -> None:
    streams.recheck_sessions(instance.user_id)


def _user_changed(sender: type[User], instance: User, created: bool = False, **kwargs: Any) -> None:
    # A deactivation or a new password ends the user's sessions: their sockets must close too.
    # (Saving last_login at each login is not worth a check.)
    update_fields = kwargs.get("update_fields")
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    streams.recheck_sessions(instance.pk)


def _logged_out(
    sender: type[User],
    request: HttpRequest,
    # Django's logout sends None for a request whose user was not signed in.
    user: User | None,
    **kwargs: Any,
) -> None:
    if user is not None:
        streams.recheck_sessions(user.pk)


def connect() -> None:
    post_save.connect(_membership_changed, sender=Membership, dispatch_uid="ws-membership-saved")
    post_delete.connect(
        _membership_changed, sender=Membership, dispatch_uid="ws-membership-deleted"
    )
    post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="ws-user-saved")
    user_logged_out.connect(_logged_out, dispatch_uid="ws-logged-out")
