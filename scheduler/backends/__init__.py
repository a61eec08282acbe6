"""Backend registry: the one place that turns a Cluster row into a backend object.

Backends keep connections and (for the simulated one) in-memory state, so one object per cluster
is kept for the life of the process.
"""

from __future__ import annotations

import threading

from .base import Backend

_lock = threading.Lock()
_instances: dict[tuple[int, str], Backend] = {}


def get_backend(cluster) -> Backend:
    key = (cluster.pk, cluster.backend_kind)
    with _lock:
        backend = _instances.get(key)
        if backend is None:
            backend = _build(cluster)
            _instances[key] = backend
        return backend


def reset_backends() -> None:
    """Forget every backend object (tests; a cluster's configuration changed)."""
    with _lock:
        _instances.clear()


def _build(cluster) -> Backend:
    config = dict(cluster.backend_config or {})
    if cluster.backend_kind == "simulated":
        from .simulated import SimulatedBackend

        return SimulatedBackend(cluster_id=cluster.pk, config=config)
    if cluster.backend_kind == "slurm":
        from .slurm import SlurmBackend

        return SlurmBackend(config)
    if cluster.backend_kind == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(config)
    raise ValueError(f"unknown backend kind {cluster.backend_kind!r}")
