"""A run's network isolation on Kubernetes: the NetworkPolicy that admits ingress to its pods
only from pods of the same run, and which leftover policies the sync may delete."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from scheduler.backends.base import BackendJobSpec
from scheduler.backends.k8s_manifests import (
    LABEL_MANAGED_BY,
    LABEL_RUN,
    MANAGED_BY_VALUE,
    KubernetesConfig,
    check_identity,
    parse_time,
    run_object_metadata,
)


def run_network_policy_manifest(spec: BackendJobSpec, cfg: KubernetesConfig) -> dict[str, Any]:
    """The run's NetworkPolicy: its pods accept connections (any port: NCCL picks its own) only
    from pods of the same run, in the same namespace.

    Keyed by the run, not the team: PyTorch's rendezvous and NCCL authenticate nobody, so two runs
    of one team must not reach each other either (a stale worker of an earlier attempt joining
    the new one's TCPStore corrupts it as surely as a stranger), and a team name that is not a
    label value has no team label to select on. A pod selected by any NetworkPolicy is isolated
    for ingress, so this alone shuts the run's pods to every other pod, even where the namespace
    has no default-deny. Egress is left open (datasets, object stores, experiment trackers)
    unless ``egress_denied_cidrs`` names blocks to shut (see :func:`_egress_rules`).
    The selectors read only labels the platform sets from its own ids (the job's fields never
    become labels), and only the platform may create pods in the namespace."""
    check_identity(spec.job_id, spec.attempt, spec.workers)
    run = spec.backend_name
    members = {"matchLabels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_RUN: run}}
    policy: dict[str, Any] = {
        "podSelector": members,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": members}]}],
    }
    if cfg.egress_denied_cidrs:
        policy["policyTypes"] = ["Ingress", "Egress"]
        policy["egress"] = _egress_rules(members, cfg.egress_denied_cidrs)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": run_object_metadata(spec, cfg),
        "spec": policy,
    }


def _egress_rules(members: dict[str, Any], denied: Iterable[str]) -> list[dict[str, Any]]:
    """Egress that reaches everything but the ``denied`` blocks: the run's own pods (any port),
    DNS (port 53 anywhere: the cluster's resolver is a pod whose labels differ by distribution),
    and every address of each family outside its denied blocks. A family whose whole range is
    denied (``0.0.0.0/0``, ``::/0``) gets no block at all.

    The run's own pods are named by selector, not left to the address blocks: a CNI may match
    ``ipBlock`` only against addresses outside the cluster (Cilium does), and the rendezvous
    must hold there too."""
    families: dict[int, list[str]] = {4: [], 6: []}
    for block in denied:
        network = ipaddress.ip_network(block)
        families[network.version].append(str(network))
    rules: list[dict[str, Any]] = [
        {"to": [{"podSelector": members}]},
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
    ]
    peers = []
    for version, everything in ((4, "0.0.0.0/0"), (6, "::/0")):
        blocks = sorted(set(families[version]))
        if everything in blocks:
            continue
        peers.append({"ipBlock": {"cidr": everything, **({"except": blocks} if blocks else {})}})
    if peers:
        rules.append({"to": peers})
    return rules


def orphan_policy_runs(
    policies: Iterable[Mapping[str, Any]],
    *,
    runs_with_pods: set[str],
    now: datetime,
    min_age_s: float,
) -> list[str]:
    """Runs whose NetworkPolicy may be deleted: created more than ``min_age_s`` seconds before
    ``now`` (by its ``creationTimestamp``) and with no pod left in ``runs_with_pods``. A policy
    without a readable creation time is left alone."""
    out = []
    for policy in policies:
        meta = policy.get("metadata") or {}
        run = (meta.get("labels") or {}).get(LABEL_RUN)
        created = parse_time(meta.get("creationTimestamp"))
        if not run or run != meta.get("name") or run in runs_with_pods or created is None:
            continue
        if (now - created).total_seconds() > min_age_s:
            out.append(run)
    return sorted(out)
