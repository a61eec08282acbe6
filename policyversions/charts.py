"""Figures of a what-if result: plain series in (the run's stored chart data), a JSON-ready
figure out (the page embeds it with ``json_script``; ``frontend/charts.js`` draws it with the
plotly.js the platform serves itself). No ORM here."""

from __future__ import annotations

import json
from typing import Any

import plotly.graph_objects as go

HOUR_S = 3600.0


def _dict(fig: go.Figure) -> dict[str, Any]:
    # Policy and team names are identifiers and slugs (no markup), checked where they are made.
    figure: dict[str, Any] = json.loads(fig.to_json())
    return figure


def _layout(fig: go.Figure, title: str, x: str, y: str, **extra: Any) -> None:
    fig.update_layout(
        title={"text": title},
        xaxis={"title": {"text": x}},
        yaxis={"title": {"text": y}},
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"orientation": "h"},
        **extra,
    )


def wait_distribution_figure(
    policies: list[str], details: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Share of jobs that waited at most x hours, one curve per policy."""
    fig = go.Figure()
    for name in policies:
        quantiles = details.get(name, {}).get("wait_quantiles_s", [])
        if not quantiles:
            continue
        n = len(quantiles) - 1
        fig.add_trace(
            go.Scatter(
                x=[q / HOUR_S for q in quantiles],
                y=[k / n for k in range(n + 1)],
                mode="lines",
                name=name,
            )
        )
    _layout(fig, "Waiting time: share of jobs that waited at most", "hours", "share of jobs")
    fig.update_yaxes(range=[0, 1])
    # The longest waits would squeeze every curve against the axis: show up to the 98th
    # percentile (the tables give the p95 and the averages).
    tails = [
        details[name]["wait_quantiles_s"][-2]
        for name in policies
        if len(details.get(name, {}).get("wait_quantiles_s", [])) > 2
    ]
    if tails and max(tails) > 0:
        fig.update_xaxes(range=[0, max(tails) / HOUR_S])
    return _dict(fig)


def team_wait_figure(policies: list[str], team_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Average wait per team, a bar per policy."""
    fig = go.Figure()
    teams = [row["team"] for row in team_rows]
    for i, name in enumerate(policies):
        fig.add_trace(
            go.Bar(
                x=teams,
                y=[(row["policies"][i]["avg_wait_s"] or 0) / HOUR_S for row in team_rows],
                name=name,
            )
        )
    _layout(fig, "Average wait per team", "team", "hours", barmode="group")
    return _dict(fig)


def team_share_figure(policies: list[str], team_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """GPU share each team held while the history's jobs arrived, a bar per policy, against
    the team's fair share (a marker)."""
    fig = go.Figure()
    teams = [row["team"] for row in team_rows]
    for i, name in enumerate(policies):
        fig.add_trace(
            go.Bar(
                x=teams, y=[row["policies"][i]["gpu_share"] or 0 for row in team_rows], name=name
            )
        )
    # One marker per distinct set of fair shares: the one in force, and a candidate's only
    # when its weights change them.
    shown: list[list[float]] = []
    for i, name in enumerate(policies):
        fair = [row["policies"][i].get("fair_share") or 0 for row in team_rows]
        if fair in shown:
            continue
        shown.append(fair)
        fig.add_trace(
            go.Scatter(
                x=teams,
                y=fair,
                mode="markers",
                marker={"symbol": "line-ew-open", "size": 30, "line": {"width": 3}},
                name="fair share" if i == 0 else f"fair share ({name})",
            )
        )
    _layout(fig, "GPU share per team against its fair share", "team", "share", barmode="group")
    return _dict(fig)


def utilization_figure(policies: list[str], details: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """GPUs in use (fraction of the cluster) over the replay, one line per policy."""
    fig = go.Figure()
    for name in policies:
        series = details.get(name, {}).get("utilization", {})
        fig.add_trace(
            go.Scatter(
                x=series.get("hours", []),
                y=series.get("fraction", []),
                mode="lines",
                line={"shape": "hv"},
                name=name,
            )
        )
    _layout(fig, "GPU utilization over the replay", "hours from the first job", "fraction in use")
    fig.update_yaxes(range=[0, 1])
    return _dict(fig)
