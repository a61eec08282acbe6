"""Cluster specifications: nodes, GPUs per node, GPU models, racks / NVLink domains, spot nodes.

A `ClusterSpec` is an immutable description; the simulator builds its mutable state from it. Spot
nodes are chosen from a seeded RNG, so a spec string plus a seed always gives the same cluster.

Spec strings accepted by `parse_cluster` (the CLI's `--cluster`):
- `NxG` or `NxG:model` (e.g. `80x8`, `128x8:a100`): N uniform nodes of G GPUs;
- `openb` (the openb GPU node list under the default traces dir) or `openb:PATH`;
- a path to a CSV node list with the openb columns (`sn,...,gpu,model`).
"""

from __future__ import annotations

import csv
import os
import random
from dataclasses import dataclass, replace
from pathlib import Path

from .trace_job import MAX_NODE_GPUS, csv_cell, default_traces_dir

# The most nodes a cluster may have: the largest GPU clusters have tens of thousands of nodes;
# --nodes 10^8 ran out of memory building them.
MAX_NODES = 100_000

OPENB_NODE_LIST = Path("alibaba-gpu-v2023-openb") / "openb_node_list_gpu_node.csv"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node: its GPUs and where it sits in the topology."""

    name: str
    gpu_model: str
    gpus: int
    zone: str = "z1"
    rack: str = "r0"
    nvlink_domain: str = ""
    fabric: str = "ib0"
    spot: bool = False


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A whole cluster; `nodes` order is the simulator's node index order."""

    nodes: tuple[NodeSpec, ...]
    name: str = "cluster"

    @property
    def total_gpus(self) -> int:
        """GPUs in the cluster."""
        return sum(n.gpus for n in self.nodes)

    @property
    def max_gpus_per_node(self) -> int:
        """The largest node's GPU count (0 for an empty cluster)."""
        return max((n.gpus for n in self.nodes), default=0)

    def with_spot_fraction(self, fraction: float, seed: int = 0) -> ClusterSpec:
        """The same cluster with `round(fraction * nodes)` nodes marked spot, chosen by `seed`."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("spot fraction must be in [0, 1]")
        count = round(fraction * len(self.nodes))
        chosen = set(random.Random(seed).sample(range(len(self.nodes)), count))
        nodes = tuple(replace(n, spot=i in chosen) for i, n in enumerate(self.nodes))
        return replace(self, nodes=nodes)


def sample_nodes(cluster: ClusterSpec, every: int) -> ClusterSpec:
    """Every `every`-th node of `cluster` (a smaller cluster with the same model mix, to put a
    lightly loaded trace under contention)."""
    if every < 1:
        raise ValueError("every must be >= 1")
    if every == 1:
        return cluster
    return ClusterSpec(cluster.nodes[::every], name=f"{cluster.name}/{every}")


def uniform_cluster(
    nodes: int, gpus_per_node: int, *, gpu_model: str = "gpu", nodes_per_rack: int = 16
) -> ClusterSpec:
    """`nodes` identical nodes of `gpus_per_node` GPUs, `nodes_per_rack` per rack, each node its
    own NVLink domain (an HGX board)."""
    if nodes <= 0 or gpus_per_node <= 0:
        raise ValueError("nodes and gpus_per_node must be > 0")
    if nodes > MAX_NODES or gpus_per_node > MAX_NODE_GPUS:
        raise ValueError(
            f"a cluster has at most {MAX_NODES} nodes of at most {MAX_NODE_GPUS} GPUs each"
        )
    width = len(str(nodes - 1))
    specs = tuple(
        NodeSpec(
            name=f"n{i:0{width}d}",
            gpu_model=gpu_model,
            gpus=gpus_per_node,
            rack=f"r{i // nodes_per_rack}",
            nvlink_domain=f"n{i:0{width}d}",
        )
        for i in range(nodes)
    )
    return ClusterSpec(specs, name=f"{nodes}x{gpus_per_node}")


def _node_gpus(value: str) -> int:
    number = int(value)
    if not 0 <= number <= MAX_NODE_GPUS:
        raise ValueError(value)
    return number


def load_openb_nodes(path: str | os.PathLike[str], *, nodes_per_rack: int = 16) -> ClusterSpec:
    """The openb node list as a heterogeneous cluster: one node per row with `gpu > 0`, its
    `model` as GPU model. The list has no topology, so racks group `nodes_per_rack` consecutive
    nodes of one model and every node is its own NVLink domain."""
    specs: list[NodeSpec] = []
    per_model: dict[str, int] = {}
    with open(path, newline="") as fh:
        for lineno, row in enumerate(csv.DictReader(fh), start=2):
            gpus = csv_cell(path, lineno, row, "gpu", _node_gpus, f"must be 0 to {MAX_NODE_GPUS}")
            if gpus <= 0:
                continue
            if len(specs) >= MAX_NODES:
                raise ValueError(f"{path}:{lineno}: more than {MAX_NODES} GPU nodes")
            model = csv_cell(path, lineno, row, "model", str, "")
            name = csv_cell(path, lineno, row, "sn", str, "")
            k = per_model.get(model, 0)
            per_model[model] = k + 1
            specs.append(
                NodeSpec(
                    name=name,
                    gpu_model=model,
                    gpus=gpus,
                    rack=f"{model}-r{k // nodes_per_rack}",
                    nvlink_domain=name,
                )
            )
    if not specs:
        raise ValueError(f"{path}: no GPU nodes")
    return ClusterSpec(tuple(specs), name=Path(path).stem)


def parse_cluster(spec: str, *, traces_dir: Path | None = None) -> ClusterSpec:
    """Build a cluster from a spec string (see the module docstring). Raises ValueError."""
    spec = spec.strip()
    if spec == "openb" or spec.startswith("openb:"):
        path = (
            spec[6:]
            if spec.startswith("openb:")
            else (traces_dir or default_traces_dir()) / OPENB_NODE_LIST
        )
        return load_openb_nodes(path)
    if spec.endswith(".csv") or os.path.exists(spec):
        return load_openb_nodes(spec)
    shape, _, model = spec.partition(":")
    n, sep, g = shape.lower().partition("x")
    if not sep or not n.isdigit() or not g.isdigit():
        raise ValueError(f"cluster spec {spec!r}: expected NxG[:model], openb[:PATH] or a CSV path")
    if not 1 <= int(n) <= MAX_NODES or not 1 <= int(g) <= MAX_NODE_GPUS:
        raise ValueError(
            f"cluster spec {spec!r}: N must be 1 to {MAX_NODES} nodes, G 1 to {MAX_NODE_GPUS} GPUs"
        )
    return uniform_cluster(int(n), int(g), gpu_model=model or "gpu")
