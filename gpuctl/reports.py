"""``gpuctl quota``, ``cost`` and ``nodes``: read-only reports of the caller's teams and the
cluster, printed as tables (or the API's objects with ``--json``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from . import output
from .client import ApiError
from .common import UsageError
from .common import client as _client
from .common import out as _out


def cmd_quota(args: argparse.Namespace) -> int:
    """Quotas of the caller's teams (GET /api/v1/quotas/) and the GPUs each team's own running
    jobs hold now (from GET /api/v1/jobs/?state=running,preempted)."""
    with _client(args) as api:
        quotas = api.get_all(
            "/api/v1/quotas/", {"team__slug": args.team, "gpu_model__name": args.gpu_model}
        )
        holding = api.get_all(
            "/api/v1/jobs/", {"state": "running,preempted", "team": args.team, "limit": 500}
        )
    in_use: dict[tuple[str, str | None], int] = {}
    for job in holding:
        key = (job["team"], job.get("gpu_model"))
        in_use[key] = in_use.get(key, 0) + int(job.get("total_gpus") or 0)
    for quota in quotas:
        quota["in_use_gpus"] = in_use.get((quota["team"], quota["gpu_model"]), 0)
    if args.json:
        output.print_json(quotas, _out())
        return 0
    rows = [
        [q["team"], q["gpu_model"], q["guaranteed_gpus"], q["borrow_limit_gpus"], q["in_use_gpus"]]
        for q in sorted(quotas, key=lambda q: (q["team"], q["gpu_model"]))
    ]
    output.table(["TEAM", "GPU MODEL", "GUARANTEED", "BORROW LIMIT", "IN USE"], rows, _out())
    return 0


STATEMENTS_PATH = "/api/v1/billing/statements/"


def cmd_cost(args: argparse.Namespace) -> int:
    """Monthly spend per team from the billing statements (one month: ``--month`` or the newest).

    A server without billing answers the list with a plain 404: that prints "cost reporting is
    not available on this server" and exits 1."""
    if args.month and not _is_month(args.month):
        raise UsageError("--month must look like 2026-12", {"--month": ["must be YYYY-MM"]})
    with _client(args) as api:
        try:
            statements = api.get_all(STATEMENTS_PATH, {"team": args.team, "limit": 1000})
        except ApiError as exc:
            if exc.status == 404 and not exc.fields:
                raise ApiError(404, "cost reporting is not available on this server") from None
            raise
        month = args.month or max((s["month"] for s in statements), default=None)
        chosen = [s for s in statements if s["month"] == month]
        # Open statements carry no frozen total in the list; the detail computes it live.
        details = [api.get(f"{STATEMENTS_PATH}{s['id']}/") for s in chosen]
    if args.json:
        output.print_json(details, _out())
        return 0
    if not details:
        where = f" for {month}" if month else ""
        _out().write(f"no statements{where}\n")
        return 0
    rows = [
        [
            d["team"],
            d["month"],
            d["status"],
            d["mode"],
            _sum(line["gpu_hours"] for line in d.get("lines", [])),
            d.get("adjusted_total"),
        ]
        for d in sorted(details, key=lambda d: d["team"])
    ]
    output.table(["TEAM", "MONTH", "STATUS", "MODE", "GPU-HOURS", "COST (USD)"], rows, _out())
    if args.lines:
        lines = [
            [
                d["team"],
                line["team"],
                line["gpu_model"],
                line["capacity"],
                line["gpu_hours"],
                line["cost"],
            ]
            for d in sorted(details, key=lambda d: d["team"])
            for line in d.get("lines", [])
        ]
        # Egress is billed too: its lines follow the GPU lines, naming the clusters the data
        # moved between (a server from before egress was billed sends none).
        lines += [
            [
                d["team"],
                line["team"],
                "egress",
                f"{line['from_cluster']}->{line['to_cluster']}",
                "-",
                line["cost"],
            ]
            for d in sorted(details, key=lambda d: d["team"])
            for line in d.get("egress_lines", [])
        ]
        _out().write("\n")
        output.table(
            ["STATEMENT", "TEAM", "GPU MODEL", "CAPACITY", "GPU-HOURS", "COST (USD)"], lines, _out()
        )
    return 0


def _is_month(text: str) -> bool:
    year, sep, month = text.partition("-")
    return (
        bool(sep)
        and len(year) == 4
        and year.isdigit()
        and month.isdigit()
        and 1 <= int(month) <= 12
        and len(month) == 2
    )


def _sum(values: Iterable[Any]) -> str:
    total = Decimal(0)
    for value in values:
        try:
            total += Decimal(str(value))
        except InvalidOperation:
            continue
    return f"{total.quantize(Decimal('0.01'))}"


def cmd_nodes(args: argparse.Namespace) -> int:
    """GET /api/v1/nodes/: every node visible to the caller, with state and health."""
    with _client(args) as api:
        nodes = api.get_all(
            "/api/v1/nodes/",
            {
                "state": args.state,
                "rack": args.rack,
                "gpu_model__name": args.gpu_model,
                "cluster__name": args.cluster,
                "limit": 1000,
            },
        )
    if args.json:
        output.print_json(nodes, _out())
        return 0
    rows = [
        [
            n["name"],
            n.get("cluster"),
            n.get("gpu_model"),
            n.get("gpu_count"),
            n.get("rack"),
            _node_state(n),
            _health(n.get("health")),
            n.get("spot"),
            _node_reason(n),
        ]
        for n in nodes
    ]
    headers = ["NAME", "CLUSTER", "MODEL", "GPUS", "RACK", "STATE", "HEALTH", "SPOT", "REASON"]
    output.table(headers, rows, _out())
    return 0


def _node_state(node: dict[str, Any]) -> Any:
    """A down node that an admin drained or quarantined says what it comes back as: its state
    alone reads like any outage."""
    state, held = node.get("state"), node.get("resume_state")
    return f"{state}, then {held}" if held else state


def _node_reason(node: dict[str, Any]) -> Any:
    """The platform's reason, then why the cluster keeps new work off a node the platform has
    ready (a site admin's drain, a reservation, a run it kept waiting there): such a node's
    state reads "ready", and only this column says why nothing starts on it."""
    reason, held = node.get("state_reason"), node.get("resume_state")
    parts = [reason] if reason else []
    if held:
        parts.append(f"{held}: {node.get('resume_reason') or '(no reason given)'}")
    if node.get("cluster_hold"):
        parts.append(f"no new work: {node['cluster_hold']}")
    now = datetime.now(UTC)
    avoid_until = output.parse_time(node.get("avoid_until"))
    if avoid_until is not None and avoid_until > now:
        # The cluster kept a run placed here pending (its node event says which and why).
        parts.append(f"no new run until {output.when(node['avoid_until'], now)}")
    return "; ".join(parts) if parts else reason


def _health(value: Any) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.2f}"
    return None if value is None else str(value)
