"""The success-rate page: how the caller's teams' jobs ended and how much work was lost, per day
(``scheduler.outcomes``). Another team is a 404; bad parameters re-render with a message."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing.charts import figure_dict
from core.errors import FieldErrors, NotFound
from scheduler import outcomes
from tenants.permissions import signed_in

_COLORS = {
    "succeeded": "#15803d",
    "failed_user_error": "#b91c1c",
    "failed_node_failure": "#7c2d12",
    "failed_preemption_limit": "#b45309",
    "failed_timeout": "#a21caf",
    "failed_platform": "#475569",
    "cancelled": "#94a3b8",
}
LABELS = {
    "succeeded": "Succeeded",
    "failed_user_error": "Failed: user error",
    "failed_node_failure": "Failed: node failure",
    "failed_preemption_limit": "Failed: preemption limit",
    "failed_timeout": "Failed: timeout",
    "failed_platform": "Failed: platform",
    "cancelled": "Cancelled",
}


def outcomes_figure(days: list[dict[str, Any]]) -> dict[str, Any]:
    """Stacked bars of jobs ended per day by outcome, and GPU-hours lost on a second axis."""
    x = [d["day"] for d in days]
    fig = go.Figure()
    for key in outcomes.OUTCOMES:
        fig.add_bar(name=LABELS[key], x=x, y=[d[key] for d in days], marker_color=_COLORS[key])
    fig.add_scatter(
        name="Work lost (GPU-h)",
        x=x,
        y=[round(sum(d["lost_gpu_hours"].values()), 2) for d in days],
        mode="lines+markers",
        yaxis="y2",
        line={"color": "#111827"},
    )
    fig.update_layout(
        template="none",
        margin={"l": 48, "r": 48, "t": 36, "b": 48},
        font={"family": "system-ui, sans-serif", "size": 12},
        legend={"orientation": "h", "y": -0.25},
        height=340,
        barmode="stack",
        title={"text": "Jobs ended per day, and work lost"},
        xaxis={"type": "date"},
        yaxis={"title": {"text": "jobs"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "GPU-h lost"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
        },
    )
    return figure_dict(fig)


@login_required
@require_GET
def outcomes_page(request: HttpRequest) -> HttpResponse:
    user = signed_in(request)
    team = (request.GET.get("team") or "").strip() or None
    error = ""
    try:
        days = int(request.GET.get("days") or 30)
    except ValueError:
        days, error = 30, "days must be a whole number from 1 to 366; showing 30"
    try:
        report = outcomes.outcome_report(user=user, now=timezone.now(), days=days, team=team)
    except NotFound:
        raise Http404("no such team") from None
    except FieldErrors:
        error = "days must be a whole number from 1 to 366; showing 30"
        report = outcomes.outcome_report(user=user, now=timezone.now(), days=30, team=team)
    data = report.as_dict()
    from tenants.models import Membership, Team

    choices = (
        Team.objects.all()
        if user.is_superuser
        else Team.objects.filter(pk__in=Membership.objects.filter(user=user).values("team_id"))
    ).order_by("slug")
    return render(
        request,
        "frontend/outcomes.html",
        {
            "report": data,
            "rows": [
                d
                for d in reversed(data["days"])
                if d["finished"] or any(d["lost_gpu_hours"].values())
            ],
            "labels": LABELS,
            "figure": outcomes_figure(data["days"]),
            "team": team or "",
            "days": len(data["days"]),
            "day_choices": sorted({7, 30, 90, 365, len(data["days"])}),
            "team_choices": [t.slug for t in choices],
            "error": error,
            "page": "outcomes",
        },
    )
