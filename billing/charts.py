"""Cost dashboard figures. Plain series in (a ``CostDashboard`` of dataclasses), Plotly figures
out; no ORM, no clock. Each function returns a figure even for empty data, with a note saying
what is missing rather than an empty frame that looks like "zero".

Every figure reaches a page through :func:`figure_dict` (the portal's charts too), which escapes
the text in the traces' data: Plotly renders a subset of HTML in labels, names and hover text,
links included, and job names are whatever a user typed."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs_version

from . import calc
from .series import CostDashboard


def plotly_version() -> str:
    """The version of the plotly.js bundled with the installed ``plotly`` (the portal serves it
    under a URL carrying this version)."""
    return str(get_plotlyjs_version())


_LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 48, "b": 40},
    "height": 320,
    "legend": {"orientation": "h", "y": -0.2},
    "template": "plotly_white",
}


_DAY_MS = 86_400_000


def _month_axis(fig: go.Figure, d: CostDashboard) -> None:
    """A date axis spanning the whole month, one label per day at most (a lone bar otherwise
    gets an axis in milliseconds)."""
    start, end = calc.month_bounds(d.month)
    half_day = timedelta(hours=12)
    fig.update_xaxes(
        type="date",
        range=[(start - half_day).isoformat(), (end - half_day).isoformat()],
        tickformat="%b %d",
    )


def _empty_note(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(
        text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font={"size": 14}
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


# The egress trace's name: not a GPU model's (model names are slugs without spaces).
EGRESS_TRACE = "egress (data movement)"


def spend_over_time(d: CostDashboard) -> go.Figure:
    """Daily spend stacked by GPU model, with egress on top: each bar is the day's spend as the
    budget counts it (GPU time + egress)."""
    fig = go.Figure(layout={**_LAYOUT, "title": "Spend per day by GPU model and egress (USD)"})
    by_model = d.daily_by_model()
    egress = d.daily_egress()
    for name, days in [*by_model.items(), *([(EGRESS_TRACE, egress)] if egress else [])]:
        xs = sorted(days)
        fig.add_bar(
            name=name,
            x=[x.isoformat() for x in xs],
            y=[float(days[x]) for x in xs],
            width=_DAY_MS * 0.8,
        )
    fig.update_layout(barmode="stack")
    _month_axis(fig, d)
    if not by_model and not egress:
        _empty_note(fig, "no usage metered this month")
    return fig


def spend_by_cluster(d: CostDashboard) -> go.Figure:
    """Daily spend stacked by cluster (the same spend as the GPU-model chart, split by where
    it ran)."""
    fig = go.Figure(layout={**_LAYOUT, "title": "Spend per day by cluster (USD)"})
    by_cluster = d.daily_by_cluster()
    for cluster, days in by_cluster.items():
        xs = sorted(days)
        fig.add_bar(
            name=cluster,
            x=[x.isoformat() for x in xs],
            y=[float(days[x]) for x in xs],
            width=_DAY_MS * 0.8,
        )
    fig.update_layout(barmode="stack")
    _month_axis(fig, d)
    if not by_cluster:
        _empty_note(fig, "no usage metered this month")
    return fig


def budget_and_forecast(d: CostDashboard) -> go.Figure:
    """Cumulative spend, the straight-line forecast to month end, and the budget line."""
    fig = go.Figure(layout={**_LAYOUT, "title": "Spend to date, forecast and budget (USD)"})
    cumulative = d.cumulative_daily()
    if cumulative:
        fig.add_scatter(
            name="spend to date",
            mode="lines+markers",
            x=[day.isoformat() for day, _ in cumulative],
            y=[float(v) for _, v in cumulative],
        )
    start, end = calc.month_bounds(d.month)
    last_day = (end - timedelta(days=1)).date().isoformat()
    if d.now < end:
        anchor = cumulative[-1][0].isoformat() if cumulative else start.date().isoformat()
        fig.add_scatter(
            name="forecast",
            mode="lines",
            line={"dash": "dash"},
            x=[anchor, last_day],
            y=[float(d.budget.spend), float(d.budget.forecast)],
        )
    if d.budget.amount is not None:
        label = "hard budget" if d.budget.hard_stop else "budget"
        fig.add_scatter(
            name=label,
            mode="lines",
            line={"color": "crimson"},
            x=[start.date().isoformat(), last_day],
            y=[float(d.budget.amount)] * 2,
        )
    _month_axis(fig, d)
    return fig


def top_jobs(d: CostDashboard) -> go.Figure:
    """The month's most expensive jobs, largest on top."""
    fig = go.Figure(layout={**_LAYOUT, "title": "Top jobs by cost (USD)"})
    jobs = list(reversed(d.top_jobs))
    if not jobs:
        return _empty_note(fig, "no jobs metered this month")
    fig.add_bar(
        orientation="h",
        x=[float(j.cost) for j in jobs],
        y=[j.name if j.job_id is None else f"#{j.job_id} {j.name}" for j in jobs],
        customdata=[[j.user, j.team, round(j.gpu_hours, 1)] for j in jobs],
        hovertemplate="%{y}<br>$%{x:.2f}<br>%{customdata[2]} GPU-h by %{customdata[0]}"
        " (%{customdata[1]})<extra></extra>",
    )
    fig.update_layout(height=max(240, 40 + 28 * len(jobs)), margin={"l": 200})
    return fig


def waste(d: CostDashboard) -> go.Figure:
    """Lost work per day by cause, and idle cost (or an honest "no telemetry")."""
    fig = go.Figure(layout={**_LAYOUT, "title": "Waste: lost work and idle GPUs (USD)"})
    kinds: dict[str, dict[str, float]] = {}
    for p in d.lost:
        kinds.setdefault(p.kind, {})[p.day.isoformat()] = float(p.cost)
    for kind, days in sorted(kinds.items()):
        xs = sorted(days)
        fig.add_bar(
            name=f"lost: {kind.replace('_', ' ')}",
            x=xs,
            y=[days[x] for x in xs],
            width=_DAY_MS * 0.8,
        )
    fig.update_layout(barmode="stack")
    _month_axis(fig, d)
    if d.idle.has_telemetry:
        note = f"idle cost ${d.idle.idle_cost:,} ({d.idle.coverage:.0%} of GPU time has telemetry)"
    else:
        note = "idle cost: no telemetry"
    fig.add_annotation(text=note, showarrow=False, xref="paper", yref="paper", x=0, y=1.08)
    if not kinds:
        _empty_note(fig, "no work lost to preemption or node failure")
    return fig


def all_figures(d: CostDashboard) -> dict[str, go.Figure]:
    """The dashboard's figures by id."""
    return {
        "spend": spend_over_time(d),
        "clusters": spend_by_cluster(d),
        "budget": budget_and_forecast(d),
        "top-jobs": top_jobs(d),
        "waste": waste(d),
    }


# Trace attributes that carry data (names of jobs, users, teams, GPU models), not layout text.
_DATA_TEXT_KEYS = ("x", "y", "z", "text", "hovertext", "customdata", "labels", "ids", "name")


def plot_text(value: str) -> str:
    """``value`` as Plotly shows it literally: ``&``, ``<`` and ``>`` as entities, which Plotly
    turns back into the characters when it draws (so ``<a href=…>`` is text, not a link)."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escaped(value: object) -> object:
    if isinstance(value, str):
        return plot_text(value)
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    if isinstance(value, dict):
        return {key: _escaped(item) for key, item in value.items()}
    return value


def figure_dict(fig: go.Figure) -> dict[str, Any]:
    """The figure as the JSON-ready dict a page embeds (``json_script``), with every string of
    its traces' data escaped by :func:`plot_text`. Layout text (titles, notes, hover templates)
    is the platform's own and keeps its markup."""
    out: dict[str, Any] = json.loads(
        fig.to_json()
    )  # plotly's encoders (dates, numpy), then a plain dict
    for trace in out.get("data", []):
        for key in _DATA_TEXT_KEYS:
            if key in trace:
                trace[key] = _escaped(trace[key])
    return out


def money(value: Decimal | None) -> str:
    return "—" if value is None else f"${value:,.2f}"
