"""Backend registry: the one place that turns a Cluster row into a backend object.

Backends keep connections and what they learnt of their cluster (a Slurm's version, the owner of
each run), so one object per cluster is kept and reused while the cluster's backend kind and
configuration stay as they are; a row read with another kind or configuration gets a new one.
"""

from __future__ import annotations

import json
import re
import threading
from typing import TYPE_CHECKING, Any

from .base import Backend, RunRef

if TYPE_CHECKING:
    from scheduler.models import Cluster, Job

_lock = threading.Lock()
# Cluster id -> (the backend kind and configuration it was built from, the backend).
_instances: dict[int, tuple[tuple[str, str], Backend]] = {}


def get_backend(cluster: Cluster) -> Backend:
    """The backend of ``cluster`` as this row configures it. Built once per kind and
    configuration and reused: a change saved by an admin (a Slurm partition, ``team_accounts``)
    reaches every process at its next use with a row read after the change, without a restart
    and without a query here (callers pass the row they read)."""
    built_from = (cluster.backend_kind, _config_key(cluster.backend_config))
    with _lock:
        held = _instances.get(cluster.pk)
        if held is not None and held[0] == built_from:
            return held[1]
        backend = _build(cluster)
        # Replaces the object of the old configuration: one object per cluster, never a pile
        # of stale ones.
        _instances[cluster.pk] = (built_from, backend)
        return backend


def _config_key(config: object) -> str:
    # Canonical JSON: the same settings read again (in another key order) are the same backend.
    return json.dumps(config or {}, sort_keys=True, separators=(",", ":"), default=str)


def reset_backends() -> None:
    """Forget every backend object (tests that need a fresh one of the same configuration)."""
    with _lock:
        _instances.clear()


# Run names are "gp-<namespace><job id>-a<attempt>" and also name Kubernetes pods: lowercase,
# and the namespace must not end in a digit, or namespace "1" would claim the runs of namespace
# "" (gp-15-a1 reads as job 15 or as job 5 of namespace "1").
_NAMESPACE = re.compile(r"([a-z0-9][a-z0-9-]*)?[a-z-]")


def _build(cluster: Cluster) -> Backend:
    return _construct(cluster.backend_kind, dict(cluster.backend_config or {}), cluster.pk)


def _construct(backend_kind: str, config: dict[str, Any], cluster_id: int) -> Backend:
    """The backend for these settings; ValueError or TypeError naming a setting it refuses.
    Constructors only read their settings: nothing connects or runs a command here."""
    namespace = str(config.get("run_namespace", ""))
    if namespace and not _NAMESPACE.fullmatch(namespace):
        raise ValueError(
            f"run_namespace {namespace!r}: use lowercase letters, digits and '-', ending in a "
            "letter or '-' (e.g. 'prod-')"
        )
    if backend_kind == "simulated":
        from .simulated import SimulatedBackend

        return SimulatedBackend(cluster_id=cluster_id, config=config)
    if backend_kind == "slurm":
        from .slurm import SlurmBackend

        return SlurmBackend(config)
    if backend_kind == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(config)
    raise ValueError(f"unknown backend kind {backend_kind!r}")


def backend_config_problem(backend_kind: str, config: object) -> str | None:
    """Why a cluster of ``backend_kind`` could not run with ``config`` (what building its
    backend in the loop would raise), or None when it could."""
    if not isinstance(config, dict):
        return 'must be a JSON object of backend settings, e.g. {"partition": "gpu"}'
    try:
        # Built only to read its settings and then dropped: the id of no cluster (ids start at 1).
        _construct(backend_kind, dict(config), 0)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def backend_run_id(job: Job) -> str:
    """Our job's identity on its backend: its id, prefixed by the cluster's ``run_namespace``
    (``Cluster.backend_config``) when one is set. Backends find runs by this name, so two platform
    databases sharing one cluster (or a database restored from a backup) must use different
    namespaces, or one would mistake the other's runs for its own."""
    cluster = job.cluster if job.cluster_id is not None else None
    namespace = run_namespace(cluster) if cluster is not None else ""
    return f"{namespace}{job.pk}"


def backend_run_ref(job: Job, attempt: int | None = None) -> RunRef:
    """How a backend is told which run of ``job`` to poll, read, cancel or checkpoint: its
    :func:`backend_run_id`, ``attempt`` (default: its current one), its team's slug (the team
    ``submit`` ran it for) and the account that attempt was submitted as (``Job.backend_accounts``).
    Reads ``job.team``: select it with the job where many are handled."""
    attempt = job.attempts if attempt is None else attempt
    account = (job.backend_accounts or {}).get(str(attempt), "")
    return RunRef(backend_run_id(job), attempt, job.team.slug, account)


def run_namespace(cluster: Cluster) -> str:
    """The ``run_namespace`` of a cluster's ``backend_config`` ("" when unset)."""
    return str((cluster.backend_config or {}).get("run_namespace", ""))
