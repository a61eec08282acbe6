"""Pure functions that read what Slurm says about nodes: ``sinfo --json`` (both JSON
generations), GRES strings, node Features, ``topology.conf``, ``scontrol show node -o`` and
``scontrol show reservation -o``.

Like :mod:`scheduler.backends.slurm_parsers` (jobs, the batch script, errors), whose JSON reader
it shares: no command, clock or file; tested on output captured from Slurm 22.05 and 24.11.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.backends.base import BackendNode
from scheduler.backends.slurm_parsers import (
    _MISSING,
    SlurmQueryError,
    _load_json,
    _Reader,
    _split_top_level,
    expand_hostlist,
)


def parse_gres_gpus(gres: str) -> tuple[int, str]:
    """``(gpu count, gpu model)`` from a GRES string such as ``gpu:h100:8(S:0-1),shard:4``."""
    total, model = 0, ""
    for item in _split_top_level(gres or ""):
        item = item.split("(", 1)[0]
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        count = 1
        if len(parts) >= 2 and parts[-1].isdigit():
            count = int(parts[-1])
            type_parts = parts[1:-1]
        else:
            type_parts = parts[1:]
        if type_parts and not model:
            model = type_parts[0]
        total += count
    return total, model


_TOPOLOGY_KEYS = {
    "rack": "rack",
    "nvl": "nvlink_domain",
    "nvlink": "nvlink_domain",
    "nvlink_domain": "nvlink_domain",
    "zone": "zone",
    "fabric": "fabric",
    "gpu": "gpu_model",
    "gpu_model": "gpu_model",
}


def parse_node_features(features: str) -> dict[str, str | bool]:
    """Topology from node Features: ``rack=r1``, ``nvl=d1``, ``zone=``, ``fabric=``, ``gpu=``,
    and the bare word ``spot``. ``key:value`` works like ``key=value``. Unknown words are ignored.
    """
    out: dict[str, str | bool] = {}
    for word in (features or "").split(","):
        word = word.strip()
        if not word:
            continue
        if word.lower() == "spot":
            out["spot"] = True
            continue
        for sep in ("=", ":"):
            if sep in word:
                key, value = word.split(sep, 1)
                field_name = _TOPOLOGY_KEYS.get(key.strip().lower())
                if field_name and value.strip():
                    out[field_name] = value.strip()
                break
    return out


_SCONTROL_NODE_STATE = re.compile(r"(?:^|\s)State=(\S+)")


def parse_scontrol_node_flags(text: str) -> frozenset[str]:
    """The state words of one node in ``scontrol show node NAME -o``: ``State=DOWN+DRAIN+
    NOT_RESPONDING`` is {DOWN, DRAIN, NOT_RESPONDING}, alike in 22.05 and 24.11. The first
    ``State=`` is the node's: its free-text ``Reason=`` comes later on the line."""
    match = _SCONTROL_NODE_STATE.search(text)
    if match is None:
        raise SlurmQueryError(f"scontrol show node: no State= in {text[:200]!r}")
    return frozenset(match.group(1).upper().split("+"))


_SCONTROL_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_active_reservations(text: str) -> dict[str, str]:
    """Node name -> "<reservation> until <end>" for every ACTIVE reservation in ``scontrol show
    reservation -o`` (one line each, alike in 22.05 and 24.11; "No reservations in the system"
    when there are none). A job pinned to a node in one stays pending unless it names the
    reservation, which the platform's runs never do."""
    held: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(_SCONTROL_FIELD.findall(line))
        if "ReservationName" not in fields:
            continue
        if fields.get("State") != "ACTIVE" or fields.get("Nodes", "(null)") == "(null)":
            continue
        until = f"{fields['ReservationName']} until {fields.get('EndTime', '?')}"
        for node in expand_hostlist(fields["Nodes"]):
            held.setdefault(node, until)
    return held


def parse_topology_conf(text: str) -> dict[str, str]:
    """Node name -> leaf switch name from Slurm's ``topology.conf`` (tree plugin).

    Only switches that list ``Nodes=`` are leaves; the platform treats a leaf switch as a rack
    when the nodes carry no ``rack=`` feature.
    """
    leaf_of: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        switch = fields.get("SwitchName")
        nodes = fields.get("Nodes")
        if switch and nodes:
            for node in expand_hostlist(nodes):
                leaf_of[node] = switch
    return leaf_of


def node_state(state: str, flags: Iterable[str]) -> str:
    """Our node state (ready | draining | drained | down) from sinfo's ``state`` and flags."""
    state = (state or "").lower()
    flag_set = {f.upper() for f in flags}
    # NOT_RESPONDING alone (``idle*``) is not down: Slurm sets it for a moment after every
    # resume and only declares the node DOWN after SlurmdTimeout; we follow Slurm's verdict.
    if state in {"down", "unknown", "error", "future"} or flag_set & {
        "FAIL",
        "POWERED_DOWN",
        "POWER_DOWN",
    }:
        return "down"
    if "DRAIN" in flag_set or state in {"drain", "drained", "draining"}:
        busy = state in {"allocated", "mixed", "completing"} or "COMPLETING" in flag_set
        return "draining" if busy else "drained"
    return "ready"


@dataclass(frozen=True, slots=True)
class _SinfoNode:
    name: str
    state: str
    flags: tuple[str, ...]
    gres: str
    features: str
    reason: str
    partitions: tuple[str, ...]


def _sinfo_v0038(reader: _Reader, data: dict[str, Any]) -> list[_SinfoNode]:
    """22.05 (openapi v0.0.3x): ``nodes`` of one object per node, state a word plus flags."""
    out = []
    for i, raw in enumerate(reader.entries(data, "nodes")):
        where = f"nodes[{i}]"
        flags = raw.get("state_flags") or []
        partitions = raw.get("partitions") or []
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise reader.fail(f"{where}.state_flags", "a list of strings", flags)
        if not isinstance(partitions, list):
            raise reader.fail(f"{where}.partitions", "a list of strings", partitions)
        out.append(
            _SinfoNode(
                name=reader.text(raw, "name", where, required=True),
                state=reader.text(raw, "state", where, required=True),
                flags=tuple(flags),
                gres=reader.text(raw, "gres", where),
                features=reader.text(raw, "active_features", where)
                or reader.text(raw, "features", where),
                reason=reader.text(raw, "reason", where),
                partitions=tuple(str(p) for p in partitions),
            )
        )
    return out


def _section(reader: _Reader, raw: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise reader.fail(f"{where}.{key}", "an object", value)
    return value


def _sinfo_v0040(reader: _Reader, data: dict[str, Any]) -> list[_SinfoNode]:
    """23.02+ (data_parser v0.0.39+): ``sinfo`` entries, each grouping nodes that share a
    state, partition, GRES and features (one node each with ``sinfo -N``)."""
    out = []
    for i, raw in enumerate(reader.entries(data, "sinfo")):
        where = f"sinfo[{i}]"
        names = _section(reader, raw, "nodes", where).get("nodes", _MISSING)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise reader.fail(f"{where}.nodes.nodes", "a list of node names", names)
        words = reader.words(_section(reader, raw, "node", where), "state", f"{where}.node")
        if not words:
            raise reader.fail(f"{where}.node.state", "at least one state word", words)
        gres = _section(reader, raw, "gres", where)
        features = _section(reader, raw, "features", where)
        reason = raw.get("reason") or {}
        reason_text = (
            reader.text(reason, "description", f"{where}.reason")
            if isinstance(reason, dict)
            else reader.text(raw, "reason", where)
        )
        partition = reader.text(_section(reader, raw, "partition", where), "name", where)
        for name in names:
            out.append(
                _SinfoNode(
                    name=name,
                    state=words[0],
                    flags=tuple(words[1:]),
                    gres=reader.text(gres, "total", f"{where}.gres"),
                    features=reader.text(features, "active", f"{where}.features")
                    or reader.text(features, "total", f"{where}.features"),
                    reason=reason_text,
                    partitions=(partition,) if partition else (),
                )
            )
    return out


def parse_sinfo_json(
    text: str,
    *,
    partition: str = "",
    topology: Mapping[str, str] | None = None,
) -> list[BackendNode]:
    """Nodes from ``sinfo -N --json`` (either JSON generation): GPU count and model from GRES,
    state, drain reason, topology.

    Rack / NVLink domain / zone / fabric / spot come from node Features; a node without a rack
    feature takes its leaf switch from ``topology`` (see :func:`parse_topology_conf`). With
    ``partition`` only that partition's nodes are returned. Each node appears once even when
    sinfo lists it per partition. Raises :class:`SlurmQueryError` on an error answer and
    :class:`SlurmFormatError` (naming the field) on a shape of neither generation.
    """
    data = _load_json(text, "sinfo --json")
    reader = _Reader("sinfo --json", data)
    if "sinfo" in data:
        raw_nodes = _sinfo_v0040(reader, data)
    elif "nodes" in data:
        raw_nodes = _sinfo_v0038(reader, data)
    else:
        raise reader.fail("sinfo", "'sinfo' (23.02+) or 'nodes' (22.05)", _MISSING)
    seen: set[str] = set()
    nodes: list[BackendNode] = []
    for raw in raw_nodes:
        if not raw.name or raw.name in seen:
            continue
        if partition and partition not in raw.partitions:
            continue
        seen.add(raw.name)
        gpus, model = parse_gres_gpus(raw.gres)
        topo = parse_node_features(raw.features)
        rack = str(topo.get("rack", "")) or (topology or {}).get(raw.name, "")
        state = node_state(raw.state, raw.flags)
        nodes.append(
            BackendNode(
                name=raw.name,
                gpus=gpus,
                gpu_model=str(topo.get("gpu_model", "")) or model,
                state=state,
                # 24.11 keeps a resumed node's old drain reason; only a node out of service has one.
                reason="" if state == "ready" else raw.reason,
                zone=str(topo.get("zone", "")),
                rack=rack,
                nvlink_domain=str(topo.get("nvlink_domain", "")),
                fabric=str(topo.get("fabric", "")),
                spot=bool(topo.get("spot", False)),
            )
        )
    return nodes
