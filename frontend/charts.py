"""Plotly figures for the portal, built from plain series (no ORM here).

Each function returns the figure as a JSON-ready dict; the page embeds it with ``json_script`` and
``charts.js`` draws it with the locally served plotly.js. Templates stay light ("none" plus a few
layout settings) so the embedded JSON is small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from billing.charts import figure_dict

_LAYOUT = {
    "template": "none",
    "margin": {"l": 48, "r": 16, "t": 36, "b": 48},
    "font": {"family": "system-ui, sans-serif", "size": 12},
    "legend": {"orientation": "h", "y": -0.25},
    "height": 300,
}


def _as_dict(fig: go.Figure) -> dict[str, Any]:
    # The one way a figure reaches a page: user text in the traces escaped for Plotly.
    return figure_dict(fig)


def quota_figure(
    labels: Sequence[str],
    in_use: Sequence[int],
    pending: Sequence[int],
    guaranteed: Sequence[int | None],
    ceiling: Sequence[int | None],
) -> dict[str, Any]:
    """GPUs held and wanted per (team, GPU model) against the guarantee and the borrow ceiling
    (None where the team has no quota of its own for the model: no marker)."""
    fig = go.Figure()
    fig.add_bar(name="In use", x=list(labels), y=list(in_use), marker_color="#2856d8")
    fig.add_bar(name="Pending", x=list(labels), y=list(pending), marker_color="#93a9ef")
    fig.add_scatter(
        name="Guaranteed",
        x=list(labels),
        y=list(guaranteed),
        mode="markers",
        marker={"symbol": "line-ew-open", "size": 28, "line": {"width": 3}, "color": "#111827"},
    )
    fig.add_scatter(
        name="Borrow ceiling",
        x=list(labels),
        y=list(ceiling),
        mode="markers",
        marker={"symbol": "line-ew-open", "size": 28, "line": {"width": 2}, "color": "#b45309"},
    )
    fig.update_layout(
        **_LAYOUT,
        barmode="stack",
        bargap=0.55,
        title={"text": "Quota use (GPUs)"},
        yaxis={"rangemode": "tozero"},
    )
    return _as_dict(fig)


def usage_timeline_figure(
    times: Sequence[str], in_use: Sequence[float], unavailable: Sequence[float], total: int
) -> dict[str, Any]:
    """GPUs in use and unavailable over time; the page appends live points to traces 0 and 1."""
    fig = go.Figure()
    fig.add_scatter(
        name="In use",
        x=list(times),
        y=list(in_use),
        mode="lines+markers",
        line={"color": "#2856d8"},
    )
    fig.add_scatter(
        name="Unavailable",
        x=list(times),
        y=list(unavailable),
        mode="lines+markers",
        line={"color": "#b91c1c"},
    )
    fig.update_layout(
        **_LAYOUT,
        title={"text": f"GPUs in use (of {total})"},
        yaxis={"range": [0, max(total, 1)]},
        xaxis={"type": "date"},
    )
    return _as_dict(fig)
