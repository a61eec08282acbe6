"""Portal pages of notifications: the caller's settings (event × channel), the webhooks they own
or manage (add, send a test, enable, delete) and the delivery log of those targets.

Views call selectors and services only. Another person's or another team's webhook is a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import BadRequest
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.errors import DomainError, NotFound
from core.ids import parse_id
from tenants.forms import add_domain_error
from tenants.models import MANAGE_ROLES, Team
from tenants.permissions import is_platform_admin, signed_in

from . import selectors, services
from .events import Channel, EventKind, events_for
from .forms import WebhookForm
from .models import Webhook


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """Which events reach the caller, by channel. A POST stores the whole matrix as ticked."""
    user = signed_in(request)
    events = events_for(is_platform_admin=is_platform_admin(user))
    if request.method == "POST":
        ticked = set(request.POST.getlist("on"))
        choices: dict[tuple[str, str], object] = {
            (e, c.value): f"{e}|{c.value}" in ticked for e in events for c in Channel
        }
        services.preferences_set(user=user, choices=choices)
        messages.success(request, "Notification settings saved.")
        return redirect("notifications:settings")
    current = services.preferences_of(user)
    rows = [
        {
            "event": e,
            "label": EventKind(e).label,
            "cells": [
                {"channel": c.value, "key": f"{e}|{c.value}", "on": current[(e, c.value)]}
                for c in Channel
            ],
        }
        for e in events
    ]
    context = {
        "rows": rows,
        "channels": list(Channel),
        "email": user.email,
        "page": "notifications",
    }
    return render(request, "notifications/settings.html", context)


def _managed_teams(user: User) -> QuerySet[Team]:
    if is_platform_admin(user):
        return Team.objects.order_by("slug")
    return Team.objects.filter(memberships__user=user, memberships__role__in=MANAGE_ROLES).order_by(
        "slug"
    )


@login_required
def webhooks(request: HttpRequest) -> HttpResponse:
    """The caller's own webhooks and their managed teams' webhooks; a POST adds one."""
    user = signed_in(request)
    admin = is_platform_admin(user)
    teams = list(_managed_teams(user))
    form = WebhookForm(request.POST or None, teams=teams, is_admin=admin)
    created: Webhook | None = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                created = services.webhook_create(
                    user=user,
                    name=data["name"],
                    url=data["url"],
                    team=data["team"] or None,
                    format=data["format"],
                    events=(data["events"] or None) if data["team"] else None,
                    allow_private_network=data.get("allow_private_network", False),
                )
                form = WebhookForm(teams=teams, is_admin=admin)
            except DomainError as exc:
                add_domain_error(form, exc)
                status = 400
        else:
            status = 400
    response = render(
        request,
        "notifications/webhooks.html",
        {
            "hooks": selectors.webhook_list(user=user).order_by("team__slug", "name"),
            "form": form,
            "created": created,
            "page": "notifications",
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"  # the page shows signing secrets
    return response


_T = TypeVar("_T")


def _hook_action(request: HttpRequest, webhook_id: int, action: Callable[..., _T]) -> _T:
    try:
        return action(user=signed_in(request), webhook_id=webhook_id)
    except NotFound as exc:
        raise Http404("no such webhook") from exc


@login_required
@require_POST
def webhook_test(request: HttpRequest, webhook_id: int) -> HttpResponse:
    try:
        _hook_action(request, webhook_id, services.webhook_send_test)
    except DomainError as exc:  # disabled: say so on the webhooks page
        messages.error(request, exc.message)
        return redirect("notifications:webhooks")
    messages.success(request, "Test message queued: its delivery shows in the log below.")
    return redirect(f"/notifications/deliveries/?webhook={webhook_id}")


@login_required
@require_POST
def webhook_enable(request: HttpRequest, webhook_id: int) -> HttpResponse:
    hook = _hook_action(request, webhook_id, services.webhook_enable)
    messages.success(request, f"Webhook {hook.name} enabled.")
    return redirect("notifications:webhooks")


@login_required
@require_POST
def webhook_delete(request: HttpRequest, webhook_id: int) -> HttpResponse:
    _hook_action(request, webhook_id, services.webhook_delete)
    messages.success(request, "Webhook deleted.")
    return redirect("notifications:webhooks")


@login_required
def deliveries(request: HttpRequest) -> HttpResponse:
    """Every message sent to the caller's email or to webhooks they may see, with each attempt."""
    queryset = selectors.message_list(user=request.user)
    hook = request.GET.get("webhook", "")
    if hook:
        # As the API's filter: "²" passes str.isdigit() and int() refuses it, and a filter that
        # is not an id is said to be wrong rather than ignored (the page said "one webhook").
        webhook_id = parse_id(hook)
        if webhook_id is None:
            raise BadRequest("webhook: must be a webhook id (a whole number)")
        # Another person's or team's hook reads as a missing one (docs/tenancy.md).
        if not selectors.webhook_list(user=request.user).filter(pk=webhook_id).exists():
            raise Http404("no such webhook")
        queryset = queryset.filter(webhook_id=webhook_id)
    page = Paginator(queryset, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "notifications/deliveries.html",
        {"page_obj": page, "webhook_filter": hook, "page": "notifications"},
    )
