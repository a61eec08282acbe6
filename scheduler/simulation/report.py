"""Offline HTML report of one or more replays (Plotly). The only module here that imports plotly.

The page embeds the plotly.js bundled in the installed `plotly` package (no CDN, works offline):
queue length and GPU utilization over time, and JCT and waiting-time CDFs, one trace per policy.
Chart code takes plain series (`series_of`) and returns figures; writing the file is separate.
"""

from __future__ import annotations

import html
import json
import os
from bisect import bisect_right
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from .simulator import Simulator

MAX_POINTS = 1500


def series_of(sim: Simulator, metrics: dict[str, Any]) -> dict[str, Any]:
    """Plain data for the charts of one finished replay: a time series sampled on at most
    `MAX_POINTS` even steps, and sorted per-job JCT and waiting times."""
    t = sim.series_t
    out: dict[str, Any] = {"policy": sim.policy.name, "metrics": metrics}
    if t:
        t0, t1 = t[0], t[-1]
        steps = min(MAX_POINTS, len(t))
        xs, pend, util = [], [], []
        for k in range(steps):
            x = t0 + (t1 - t0) * k / max(1, steps - 1)
            i = max(0, bisect_right(t, x) - 1)
            xs.append(x / 3600.0)
            pend.append(sim.series_pending[i])
            util.append(sim.series_used[i] / sim.total_gpus)
        out.update(hours=xs, pending=pend, utilization=util)
    out["jct_s"] = sorted(j.finish_s() - j.submit for j in sim.jobs)
    out["queue_s"] = sorted(j.queue_s for j in sim.jobs)
    return out


def _cdf(values: list[float], max_points: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    n = len(values)
    if n == 0:
        return [], []
    step = max(1, n // max_points)
    idx = list(range(0, n, step))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return [values[i] for i in idx], [(i + 1) / n for i in idx]


def figures(runs: list[dict[str, Any]]) -> list[go.Figure]:
    """Four figures: pending jobs over time, utilization over time, JCT CDF, waiting CDF."""
    over_time = [
        ("pending", "Pending jobs", "jobs"),
        ("utilization", "GPU utilization", "fraction"),
    ]
    figs = []
    for key, title, unit in over_time:
        fig = go.Figure()
        for run in runs:
            fig.add_trace(
                go.Scatter(
                    x=run.get("hours", []),
                    y=run.get(key, []),
                    name=run["policy"],
                    mode="lines",
                    line_shape="hv",
                )
            )
        fig.update_layout(title=title, xaxis_title="time (h)", yaxis_title=unit, height=380)
        figs.append(fig)
    for key, title in (("jct_s", "Job completion time CDF"), ("queue_s", "Waiting time CDF")):
        fig = go.Figure()
        for run in runs:
            x, y = _cdf(run[key])
            fig.add_trace(go.Scatter(x=[max(v, 1.0) for v in x], y=y, name=run["policy"]))
        fig.update_layout(
            title=title, xaxis_title="seconds (log)", yaxis_title="fraction of jobs", height=380
        )
        fig.update_xaxes(type="log")
        figs.append(fig)
    return figs


def render_html(runs: list[dict[str, Any]], title: str = "Simulation report") -> str:
    """A self-contained HTML page: a metrics table and the figures, plotly.js inlined."""
    keys = ["avg_jct_s", "p99_jct_s", "avg_queue_s", "p95_queue_s", "gpu_utilization"]
    keys += ["idle_while_pending_frac", "preemptions", "lost_gpu_hours", "jain_fairness", "wall_s"]
    head = "".join(f"<th>{html.escape(k)}</th>" for k in ["policy", *keys])
    rows = "".join(
        "<tr><td>"
        + html.escape(r["policy"])
        + "</td>"
        + "".join(f"<td>{html.escape(str(r['metrics'].get(k, '')))}</td>" for k in keys)
        + "</tr>"
        for r in runs
    )
    divs = "".join(
        f.to_html(full_html=False, include_plotlyjs=False, config={"responsive": True})
        for f in figures(runs)
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
        f"<h1>{html.escape(title)}</h1><table><tr>{head}</tr>{rows}</table>{divs}"
        f"<script type='application/json' id='metrics'>"
        f"{html.escape(json.dumps([r['metrics'] for r in runs]))}</script>"
        "</body></html>"
    )


def write_html(path: str | os.PathLike[str], runs: list[dict[str, Any]], title: str) -> None:
    """Write `render_html(runs, title)` to `path`."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render_html(runs, title))
