"""Writes of the notifications app a person makes: their preferences, and the webhooks they own
or manage (create, change, delete, enable, send a test). Every webhook change is audited; a URL
is resolved and checked before it is saved (``targets``). A test message is only queued here: a
worker delivers it (``delivery``), never the request.

The dispatcher is ``notifications.dispatch``; one delivery attempt is ``notifications.delivery``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import DomainError, FieldErrors, NotFound
from core.ids import parse_id
from core.names import name_errors
from tenants.audit import audit_record
from tenants.models import MANAGE_ROLES, Membership, Team
from tenants.permissions import Caller, can_manage_team, can_view_team, is_platform_admin

from . import targets
from .describe import portal_url
from .events import (
    DEFAULT_ON,
    TEAM_HOOK_EVENTS,
    Channel,
    EventKind,
    events_for,
)
from .models import (
    Event,
    Message,
    MessageStatus,
    Preference,
    Webhook,
    WebhookFormat,
)

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------ preferences


def preferences_of(user: User) -> dict[tuple[str, str], bool]:
    """(event, channel) -> on/off for every event ``user`` may hear, defaults filled in."""
    chosen = {
        (p.event, p.channel): p.enabled
        for p in Preference.objects.filter(user=user).only("event", "channel", "enabled")
    }
    out = {}
    for event in events_for(is_platform_admin=is_platform_admin(user)):
        for channel in Channel:
            out[(event, channel.value)] = chosen.get(
                (event, channel.value), event in DEFAULT_ON[channel]
            )
    return out


@transaction.atomic
# choices: what the request sent, each value checked here (the API passes JSON as it came).
def preferences_set(
    *, user: User, choices: dict[tuple[str, str], object]
) -> dict[tuple[str, str], bool]:
    """Store ``user``'s choices (only the pairs given; others keep theirs). An unknown event or
    channel, or an admin-only event chosen by someone else, is a FieldErrors naming it."""
    allowed = set(events_for(is_platform_admin=is_platform_admin(user)))
    errors: dict[str, list[str]] = {}
    checked: dict[tuple[str, str], bool] = {}
    for (event, channel), enabled in choices.items():
        key = f"{event}.{channel}"
        if event not in allowed:
            errors.setdefault(key, []).append(f"unknown event '{event}'")
        elif channel not in Channel.values:
            errors.setdefault(key, []).append(f"unknown channel '{channel}'")
        elif not isinstance(enabled, bool):
            errors.setdefault(key, []).append("must be true or false")
        else:
            checked[(event, channel)] = enabled
    if errors:
        raise FieldErrors(errors)
    for (event, channel), enabled in checked.items():
        Preference.objects.update_or_create(
            user=user, event=event, channel=channel, defaults={"enabled": enabled}
        )
    return preferences_of(user)


# ------------------------------------------------------------------------------ webhooks


def can_manage_webhook(user: Caller, hook: Webhook) -> bool:
    if hook.owner_id is not None:
        return hook.owner_id == getattr(user, "pk", None)
    team = hook.team
    assert team is not None  # notif_webhook_team_xor_owner: a hook with no owner has a team
    return can_manage_team(user, team)


def webhooks_visible_q(user: Caller) -> Q:
    """Hooks ``user`` may see and manage: their own, their managed teams' (every team's for a
    platform admin). Nobody sees another person's own hooks."""
    if not user or not user.is_authenticated:
        return Q(pk__in=[])
    mine = Q(owner=user)
    if is_platform_admin(user):
        return mine | Q(team__isnull=False)
    managed = Membership.objects.filter(user=user, role__in=MANAGE_ROLES).values("team_id")
    return mine | Q(team_id__in=managed)


def webhook_get(*, user: Caller, webhook_id: object) -> Webhook:
    """A webhook the caller may see (and so manage); any other, or none, is NotFound. The id is
    an int or ASCII digits (``parse_id``): ``str.isdigit`` also takes "²", which ``int()``
    refuses, and "٣", which it reads as 3; a bool is no id."""
    hook = None
    pk = parse_id(webhook_id)
    if pk is not None:
        hook = (
            Webhook.objects.filter(webhooks_visible_q(user))
            .select_related("team", "owner")
            .filter(pk=pk)
            .first()
        )
    if hook is None:
        raise NotFound("no such webhook", field="id")
    return hook


def _check_fields(
    errors: dict[str, list[str]],
    *,
    name: object,
    url: object,
    format: object,
    events: object,
    team: Team | None,
    allow_private: bool,
) -> None:
    if not isinstance(name, str) or not name.strip():
        errors.setdefault("name", []).append("must not be blank")
    elif len(name.strip()) > 100:
        errors.setdefault("name", []).append("must be at most 100 characters")
    elif problems := name_errors(name):
        errors.setdefault("name", []).extend(problems)
    if format not in WebhookFormat.values:
        errors.setdefault("format", []).append(f"must be one of {', '.join(WebhookFormat.values)}")
    # An empty list is what a personal hook holds (and what a GET shows, so a PUT may send it
    # back): only events stated for one are refused.
    if events is not None and events != []:
        if team is None:
            errors.setdefault("events", []).append(
                "a personal webhook follows your notification settings; leave events out"
            )
        elif not isinstance(events, list) or not all(isinstance(e, str) for e in events):
            errors.setdefault("events", []).append("must be a list of event names")
        else:
            unknown = [e for e in events if e not in TEAM_HOOK_EVENTS]
            if unknown:
                errors.setdefault("events", []).append(
                    f"unknown event {unknown[0]!r} (known: {', '.join(TEAM_HOOK_EVENTS)})"
                )
    try:
        targets.check_url(url, allow_private=allow_private)
    except targets.TargetRefused as exc:
        errors.setdefault("url", []).append(str(exc))


def _hook_state(hook: Webhook) -> dict[str, Any]:
    return {
        "name": hook.name,
        "url": hook.url,
        "format": hook.format,
        "events": list(hook.events),
        "enabled": hook.enabled,
        "allow_private_network": hook.allow_private_network,
    }


def _audit_hook(
    user: User,
    hook: Webhook,
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    audit_record(
        actor=user,
        action=action,
        target=hook,
        team=hook.team,
        before=before,
        after=after,
    )


def webhook_create(
    *,
    user: User,
    name: str,
    url: str,
    # object: a team slug, checked here (isinstance) whatever the caller passed.
    team: object = None,
    format: str = WebhookFormat.GENERIC,
    events: list[str] | None = None,
    allow_private_network: bool = False,
) -> Webhook:
    """A team webhook (``team`` given: its owners and admins only) or a personal one. The URL
    is resolved and checked now (and again at each delivery). Only platform admins may allow
    private networks. Audited. Raises FieldErrors naming each bad field."""
    errors: dict[str, list[str]] = {}
    team_row = None
    if team not in (None, ""):
        team_row = Team.objects.filter(slug=team).first() if isinstance(team, str) else None
        if team_row is None or not can_view_team(user, team_row):
            raise FieldErrors({"team": [f"you are not a member of a team '{team}'"]})
        if not can_manage_team(user, team_row):
            raise FieldErrors({"team": ["only the team's owners and admins add team webhooks"]})
    if allow_private_network and not is_platform_admin(user):
        errors.setdefault("allow_private_network", []).append("only platform admins may set it")
    _check_fields(
        errors,
        name=name,
        url=url,
        format=format,
        events=events,
        team=team_row,
        allow_private=bool(allow_private_network) and is_platform_admin(user),
    )
    if errors:
        raise FieldErrors(errors)
    with transaction.atomic():
        _check_room(user=user, team=team_row)
        hook = Webhook.objects.create(
            team=team_row,
            owner=None if team_row else user,
            name=name.strip(),
            url=url.strip(),
            format=format,
            events=list(events)
            if events is not None
            else list(TEAM_HOOK_EVENTS if team_row else []),
            allow_private_network=bool(allow_private_network),
            created_by=user,
        )
        _audit_hook(user, hook, "webhook.create", None, _hook_state(hook))
    return hook


def _check_room(*, user: User, team: Team | None) -> None:
    """Refuse a webhook past the cap of its team or person (``NOTIFY_WEBHOOKS_PER_TEAM`` /
    ``_PER_PERSON``), disabled ones included: every hook shares the one delivery worker. Hooks
    made before the cap keep working; only adding is refused. The team's (or person's) row is
    locked first, so two requests at once cannot both take the last place."""
    from django.contrib.auth import get_user_model

    if team is not None:
        Team.objects.select_for_update().filter(pk=team.pk).exists()
        have, cap = Webhook.objects.filter(team=team).count(), settings.NOTIFY_WEBHOOKS_PER_TEAM
        whose = f"team {team.slug} has"
    else:
        get_user_model().objects.select_for_update().filter(pk=user.pk).exists()
        have, cap = Webhook.objects.filter(owner=user).count(), settings.NOTIFY_WEBHOOKS_PER_PERSON
        whose = "you have"
    if have >= cap:
        raise FieldErrors(
            {
                "team": [
                    f"{whose} {have} webhooks, the most allowed ({cap}); delete one first (one "
                    "webhook can hear several events)"
                ]
            }
        )


_UNSET = object()


def webhook_update(
    *,
    user: User,
    webhook_id: object,
    name: object = _UNSET,
    url: object = _UNSET,
    format: object = _UNSET,
    events: object = _UNSET,
    allow_private_network: object = _UNSET,
) -> Webhook:
    """Change a hook the caller manages; fields not given keep their value. Audited.

    Only the fields an edit owns are written, over the row locked as it is then: the delivery
    worker changes ``enabled``, ``disabled_reason`` and ``consecutive_failures`` meanwhile, and
    a save of the whole row read earlier undid a disabling (the hook came back on, unaudited)."""
    hook = webhook_get(user=user, webhook_id=webhook_id)
    # Any: each value is checked by _check_fields before it is written.
    new: dict[str, Any] = {
        "name": hook.name if name is _UNSET else name,
        "url": hook.url if url is _UNSET else url,
        "format": hook.format if format is _UNSET else format,
        "events": None if events is _UNSET else events,
    }
    errors: dict[str, list[str]] = {}
    allow = hook.allow_private_network
    if allow_private_network is not _UNSET:
        if not is_platform_admin(user):
            if bool(allow_private_network) != hook.allow_private_network:
                errors.setdefault("allow_private_network", []).append(
                    "only platform admins may set it"
                )
        else:
            allow = bool(allow_private_network)
    _check_fields(errors, team=hook.team, allow_private=allow, **new)
    if errors:
        raise FieldErrors(errors)
    with transaction.atomic():
        locked = (
            Webhook.objects.select_for_update(of=("self",))
            .select_related("team")
            .filter(pk=hook.pk)
            .first()
        )
        if locked is None:
            raise NotFound("no such webhook", field="id")
        hook = locked
        before = _hook_state(hook)
        hook.name = new["name"].strip()
        hook.url = new["url"].strip()
        hook.format = new["format"]
        if new["events"] is not None:
            hook.events = list(new["events"])
        hook.allow_private_network = allow
        hook.save(update_fields=["name", "url", "format", "events", "allow_private_network"])
        _audit_hook(user, hook, "webhook.update", before, _hook_state(hook))
    return hook


def webhook_delete(*, user: User, webhook_id: object) -> None:
    hook = webhook_get(user=user, webhook_id=webhook_id)
    with transaction.atomic():
        # Locked before its messages are collected: a delivery recording an attempt holds the
        # lock, and its new attempt row is then collected too (else it kept the message alive
        # and the delete failed on its foreign key).
        if not Webhook.objects.select_for_update().filter(pk=hook.pk).exists():
            raise NotFound("no such webhook", field="id")
        _audit_hook(user, hook, "webhook.delete", _hook_state(hook), None)
        hook.delete()


def webhook_enable(*, user: User, webhook_id: object) -> Webhook:
    """Turn a disabled hook back on (its failure count starts again). Audited."""
    hook = webhook_get(user=user, webhook_id=webhook_id)
    with transaction.atomic():
        before = {**_hook_state(hook), "disabled_reason": hook.disabled_reason}
        Webhook.objects.filter(pk=hook.pk).update(
            enabled=True, disabled_reason="", disabled_at=None, consecutive_failures=0
        )
        hook.refresh_from_db()
        _audit_hook(user, hook, "webhook.enable", before, _hook_state(hook))
    return hook


def webhook_send_test(*, user: User, webhook_id: object, now: datetime | None = None) -> Message:
    """Queue a test message to the hook; a worker delivers it (never this request). The
    delivery log shows the outcome."""
    hook = webhook_get(user=user, webhook_id=webhook_id)
    if not hook.enabled:
        raise DomainError("the webhook is disabled; enable it first", field="enabled")
    now = now or timezone.now()
    with transaction.atomic():
        event = Event.objects.create(
            kind=EventKind.TEST,
            team=hook.team,
            created_at=now,
            fanned_out_at=now,
            title=f"Test message for webhook {hook.name}",
            detail=f"sent by {user.get_username()} from the portal",
            link=portal_url("/notifications/webhooks/"),
        )
        message = Message.objects.create(
            channel=Channel.WEBHOOK,
            webhook=hook,
            target=f"webhook:{hook.pk}",
            group_key=f"test:{event.pk}",
            status=MessageStatus.QUEUED,
            created_at=now,
            send_after=now,
            next_attempt_at=now,
            event_count=1,
            subject=event.title,
        )
        message.events.add(event)
    return message


# ------------------------------------------------------------------------------ dispatch
