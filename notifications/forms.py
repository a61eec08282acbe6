"""Portal forms of notifications: types and shape only; the services check the rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from django import forms

from tenants.models import Team

from .events import TEAM_HOOK_EVENTS, EventKind
from .models import WebhookFormat


class WebhookForm(forms.Form):
    name = forms.CharField(max_length=100)
    url = forms.CharField(max_length=500, label="URL", help_text="http:// or https://")
    format = forms.ChoiceField(choices=WebhookFormat.choices)
    team = forms.ChoiceField(
        required=False,
        label="For",
        help_text="A team webhook hears the team's events; a personal one follows your settings.",
    )
    events = forms.MultipleChoiceField(
        required=False,
        choices=[(k, EventKind(k).label) for k in TEAM_HOOK_EVENTS],
        widget=forms.CheckboxSelectMultiple,
        help_text="Team webhooks only (none ticked: every team event).",
    )
    allow_private_network = forms.BooleanField(
        required=False,
        label="Allow private network addresses",
        help_text="Platform admins only: lets the hook reach internal addresses.",
    )

    def __init__(
        self, *args: Any, teams: Iterable[Team] = (), is_admin: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        team_choices = [("", "Me (personal)")] + [(t.slug, t.slug) for t in teams]
        cast(forms.ChoiceField, self.fields["team"]).choices = team_choices
        if not is_admin:
            del self.fields["allow_private_network"]
