"""``gpuctl nodes retire|reinstate NAME`` and ``gpuctl clusters [retire|reinstate NAME]``: take
nodes and clusters out of the platform for good, or back (platform admins). Talks to
``/api/v1/admin/nodes/<id>/`` and ``/api/v1/admin/clusters/<name>/``; everyone else gets the API's
403 (exit 1). A node is named as ``gpuctl nodes`` lists it; a name two clusters use needs
``--cluster``, given before the action (``gpuctl nodes --cluster old retire n1``) or after it."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from . import output
from .client import ApiError, Client
from .common import UsageError
from .common import client as _client
from .common import out as _out

# The API's cluster lookup (a slug): anything else could only be a 404, or a URL of another
# endpoint.
_CLUSTER_NAME = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")
_REASON_MAX = 300  # the server's reason column

AddSubcommand = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]

# The action's --cluster is kept apart from the ``gpuctl nodes --cluster`` listing filter: on one
# attribute, argparse let the action's default (None) replace a --cluster given before the action.
_ACTION_CLUSTER = "action_cluster"
# ``gpuctl nodes`` options that filter the listing only, by attribute: before an action they
# would be read and dropped without a word.
_LISTING_FILTERS = {"state": "--state", "rack": "--rack", "gpu_model": "--gpu-model"}
_CLUSTER_HELP = (
    "the node's cluster (when two clusters use the name); also accepted before the action"
)


def register_nodes(add_subcommand: AddSubcommand) -> None:
    """Add ``nodes retire`` and ``nodes reinstate``."""
    retire = add_subcommand(
        "retire",
        cmd_node_retire,
        "retire a node: drained now, retired (out of capacity for good, its history kept) once "
        "nothing runs on it",
    )
    retire.add_argument("name", metavar="NAME")
    retire.add_argument("--cluster", dest=_ACTION_CLUSTER, metavar="CLUSTER", help=_CLUSTER_HELP)
    retire.add_argument("--reason", "-m", default="", help="why (kept with the node)")
    reinstate = add_subcommand(
        "reinstate", cmd_node_reinstate, "undo a retirement: the node comes back drained"
    )
    reinstate.add_argument("name", metavar="NAME")
    reinstate.add_argument("--cluster", dest=_ACTION_CLUSTER, metavar="CLUSTER", help=_CLUSTER_HELP)


def register_clusters(add_subcommand: AddSubcommand) -> None:
    """Add ``clusters retire`` and ``clusters reinstate``."""
    retire = add_subcommand(
        "retire",
        cmd_cluster_retire,
        "retire a cluster: its nodes drain and retire, no new job is routed to it",
    )
    retire.add_argument("name", metavar="NAME")
    retire.add_argument("--reason", "-m", default="", help="why (kept with its nodes)")
    reinstate = add_subcommand(
        "reinstate",
        cmd_cluster_reinstate,
        "undo a cluster's retirement: its nodes come back drained",
    )
    reinstate.add_argument("name", metavar="NAME")


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise UsageError(f"{what} must not be empty", {what: ["must not be empty"]})
    return value


def _reason(value: str) -> str:
    if len(value) > _REASON_MAX:
        message = f"must be at most {_REASON_MAX} characters ({len(value)} given)"
        raise UsageError(f"--reason {message}", {"--reason": [message]})
    return value


def _cluster_name(value: str) -> str:
    name = _text(value, "NAME")
    if not _CLUSTER_NAME.match(name):
        message = f"{name!r} is not a cluster name (letters, digits, '-' and '_')"
        raise UsageError(message, {"NAME": [message]})
    return name


def _node_cluster(args: argparse.Namespace) -> str | None:
    """The ``--cluster`` of a node action, given before the action or after it (the same value
    twice is fine; two different ones are bad usage). A listing filter of ``gpuctl nodes`` given
    before the action is bad usage too, rather than ignored."""
    action = f"nodes {args.nodes_command}"
    for attribute, flag in _LISTING_FILTERS.items():
        if getattr(args, attribute, None) is not None:
            message = f"{flag} filters the node list; `{action}` does not take it"
            raise UsageError(message, {flag: [message]})
    before, after = getattr(args, "cluster", None), getattr(args, _ACTION_CLUSTER, None)
    if before is not None and after is not None and before != after:
        message = f"given twice: {before!r} before `{args.nodes_command}` and {after!r} after it"
        raise UsageError(f"--cluster {message}", {"--cluster": [message]})
    return after if after is not None else before


def _node_id(api: Client, name: str, cluster: str | None) -> int:
    """The id of the node ``name`` (of ``cluster`` when given), as ``/api/v1/nodes/`` lists it."""
    name = _text(name, "NAME")
    nodes = api.get_all("/api/v1/nodes/", {"name": name, "cluster__name": cluster, "limit": 100})
    if not nodes:
        where = f" in cluster {cluster}" if cluster else ""
        message = f"no node is named {name!r}{where}"
        raise ApiError(404, message, {"NAME": [message]})
    if len(nodes) > 1:
        clusters = ", ".join(sorted(str(n.get("cluster")) for n in nodes))
        message = f"clusters {clusters} each have a node {name!r}: name one with --cluster"
        raise UsageError(message, {"--cluster": [message]})
    return int(nodes[0]["id"])


def _show_node(args: argparse.Namespace, node: dict[str, Any]) -> None:
    if args.json:
        output.print_json(node, _out())
        return
    if node.get("state") == "retired":
        status = f"retired ({node.get('retired_at')})"
    elif node.get("retiring_since"):
        status = f"retiring: {node.get('state')} until nothing runs on it"
    else:
        status = f"{node.get('state')}, not retired (release it to use it)"
    _out().write(f"node {node.get('name')} ({node.get('cluster')}): {status}\n")


def cmd_node_retire(args: argparse.Namespace) -> int:
    reason, cluster = _reason(args.reason), _node_cluster(args)
    with _client(args) as api:
        node_id = _node_id(api, args.name, cluster)
        node = api.post(f"/api/v1/admin/nodes/{node_id}/retire/", {"reason": reason})
    _show_node(args, node)
    return 0


def cmd_node_reinstate(args: argparse.Namespace) -> int:
    cluster = _node_cluster(args)
    with _client(args) as api:
        node_id = _node_id(api, args.name, cluster)
        node = api.post(f"/api/v1/admin/nodes/{node_id}/reinstate/")
    _show_node(args, node)
    return 0


def _show_cluster(args: argparse.Namespace, cluster: dict[str, Any]) -> None:
    if args.json:
        output.print_json(cluster, _out())
        return
    _out().write(f"cluster {cluster.get('name')}: {_cluster_status(cluster)}\n")


def _cluster_status(cluster: dict[str, Any]) -> str:
    if cluster.get("retired_at"):
        return f"retired ({cluster['retired_at']})"
    if cluster.get("retiring_since"):
        return "retiring: its nodes retire as their jobs end"
    return "in service" if cluster.get("enabled", True) else "disabled"


def cmd_clusters(args: argparse.Namespace) -> int:
    """GET /api/v1/clusters/: every cluster, its backend and whether it is in service."""
    with _client(args) as api:
        clusters = api.get_all("/api/v1/clusters/", {"limit": 1000})
    if args.json:
        output.print_json(clusters, _out())
        return 0
    rows = [
        [c.get("name"), c.get("backend_kind"), _cluster_status(c), c.get("backend_available")]
        for c in clusters
    ]
    output.table(["NAME", "BACKEND", "STATUS", "AVAILABLE"], rows, _out())
    return 0


def cmd_cluster_retire(args: argparse.Namespace) -> int:
    name, reason = _cluster_name(args.name), _reason(args.reason)
    with _client(args) as api:
        cluster = api.post(f"/api/v1/admin/clusters/{quote(name)}/retire/", {"reason": reason})
    _show_cluster(args, cluster)
    return 0


def cmd_cluster_reinstate(args: argparse.Namespace) -> int:
    name = _cluster_name(args.name)
    with _client(args) as api:
        cluster = api.post(f"/api/v1/admin/clusters/{quote(name)}/reinstate/")
    _show_cluster(args, cluster)
    return 0
