"""Pure builders and readers for the Kubernetes backend: manifests in, states out, no I/O.

Everything here takes plain dicts (the JSON the API server speaks) and returns plain dicts or the
backend dataclasses of :mod:`scheduler.backends.base`, so every manifest the backend sends can be
validated against the official OpenAPI schemas and every state it derives can be tested on
captured objects without a cluster.

Guarantees:
- :func:`pod_manifest` is deterministic for a given spec, worker index and config (the same run
  always yields the same pod name and body), which is what makes ``submit`` idempotent.
- The workload's command is split into an argument list with :func:`shlex.split`; it is never
  handed to a shell. Environment values reach the container as written (no ``$(NAME)``
  expansion: :func:`literal_env_value`).
- Node patches (:func:`quarantine_patch`, :func:`release_patch`) are computed from the node as
  read, carry its ``resourceVersion`` (so a concurrent writer makes the patch fail with 409 instead
  of being overwritten) and are ``None`` when the node is already in the asked-for state.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from core.envvars import env_name_error
from core.images import oci_image_error
from scheduler.backends.base import (
    BackendJobSpec,
    BackendJobState,
    BackendJobStatus,
    BackendNode,
    BackendRejected,
    backend_job_name,
    identity_env,
    worker_envs,
)
from scheduler.backends.base import worker_slots as _worker_slots
from scheduler.backends.k8s_formats import egress_cidrs_error

# Label and annotation keys the platform writes and reads. They are part of the contract with
# operators (RBAC, dashboards, kubectl selectors): see docs/backends/kubernetes.md.
PREFIX = "gpuplatform.io"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuplatform"
LABEL_RUN = f"{PREFIX}/run"
LABEL_JOB_ID = f"{PREFIX}/job-id"
LABEL_ATTEMPT = f"{PREFIX}/attempt"
LABEL_TEAM = f"{PREFIX}/team"
LABEL_WORKER_INDEX = f"{PREFIX}/worker-index"
ANN_TEAM = f"{PREFIX}/team"
ANN_JOB_NAME = f"{PREFIX}/job-name"
ANN_WORKERS = f"{PREFIX}/workers"
ANN_NODE = f"{PREFIX}/node"
ANN_GPU_INDICES = f"{PREFIX}/gpu-indices"
ANN_CANCELLED = f"{PREFIX}/cancelled"
ANN_CHECKPOINT_REQUEST = f"{PREFIX}/checkpoint-request"
ANN_QUARANTINE_REASON = f"{PREFIX}/quarantine-reason"
ANN_CORDONED_BY = f"{PREFIX}/cordoned-by"

# The longest termination grace a pod is given. The policy's grace may be any finite number (a
# huge one says "never force-stop a victim"), but the API server decodes the field as an int64
# and the kubelet waits seconds x time.Second, a Go Duration of int64 nanoseconds: a grace of
# 1e19 s had every pod refused (so every job failed), and anything above this bound (about 292
# years, "never" in practice) overflows the kubelet's wait.
MAX_TERMINATION_GRACE_S = (2**63 - 1) // 10**9
WORKER_CONTAINER = "worker"
POD_SECURITY_LEVELS = ("baseline", "restricted")
PODINFO_DIR = "/etc/gpuplatform/podinfo"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# Pod-level reasons and conditions that mean "the node went away under the pod", as the kubelet,
# the node lifecycle controller and the pod GC set them.
_NODE_FAILURE_REASONS = frozenset(
    {
        "Evicted",
        "NodeLost",
        "NodeShutdown",
        "Terminated",
        "NodeAffinity",
        "UnexpectedAdmissionError",
    }
)
_NODE_DISRUPTION_REASONS = frozenset(
    {"DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet", "EvictionByEvictionAPI"}
)
# The default scheduler preempts any lower-priority pod on a node, ours included, to place a
# pod of higher priority: the cluster's scheduler stopped the run, not the job or the node.
_SCHEDULER_PREEMPTION_REASON = "PreemptionByScheduler"
# Waiting reasons that will not resolve by themselves: the run has failed even though the pod
# still says Pending.
_PERMANENT_WAITING_REASONS = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"}
)
# A container waiting for a pull that failed and is retried with back-off.
_FAILED_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    """The backend's settings, validated once. See docs/backends/kubernetes.md for each key."""

    namespace: str = "gpuplatform-jobs"
    scheduler_name: str = "gpuplatform"
    bind_mode: str = "binding"  # "binding" (custom schedulerName + Binding API) | "nodeName"
    gpu_resource: str = "nvidia.com/gpu"
    gpu_product_label: str = "nvidia.com/gpu.product"
    zone_label: str = "topology.kubernetes.io/zone"
    rack_label: str = "gpuplatform.io/rack"
    nvlink_label: str = "nvidia.com/gpu.clique"
    fabric_label: str = ""
    spot_labels: Mapping[str, str] = field(
        default_factory=lambda: {
            "karpenter.sh/capacity-type": "spot",
            "cloud.google.com/gke-spot": "true",
            "eks.amazonaws.com/capacityType": "SPOT",
        }
    )
    node_selector: str = ""
    gpu_taint_keys: tuple[str, ...] = ("nvidia.com/gpu",)
    quarantine_taint_key: str = "gpuplatform.io/quarantine"
    quarantine_taint_effect: str = "NoSchedule"
    service_account: str = ""
    priority_class_name: str = ""
    image_pull_secrets: tuple[str, ...] = ()
    shm_size: str = "16Gi"
    prestop_command: tuple[str, ...] = ()
    checkpoint_min_interval_s: float = 60.0
    rendezvous_service: bool = True
    rendezvous_port: int = 29500
    # One NetworkPolicy per run admitting ingress to its pods only from pods of the same run:
    # rendezvous (c10d TCPStore, NCCL) has no authentication.
    network_policy: bool = True
    # Address blocks the run's pods may not reach (the policy then limits egress too): the
    # cloud's metadata service, the cluster's pod and service ranges, the platform's database.
    egress_denied_cidrs: tuple[str, ...] = ()
    # "baseline" (what every pod gets) or "restricted" (the Pod Security Standard: also drop
    # every capability and refuse to run as root), and the uid workers run as (None: the
    # image's own user).
    pod_security: str = "baseline"
    run_as_user: int | None = None
    node_not_ready_grace_s: float = 0.0
    dry_run: bool = False
    # Transport: exactly one of api_client / host / in_cluster / kubeconfig is used, in that order.
    kubeconfig: str = ""
    context: str = ""
    in_cluster: bool = False
    host: str = ""
    request_timeout_s: float = 10.0
    watch_timeout_s: int = 1
    retry_attempts: int = 4
    retry_base_s: float = 0.2
    retry_cap_s: float = 5.0
    # Finished runs keep their pods (and so their logs) this long, then the sync deletes them.
    finished_run_ttl_s: float = 3600.0

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> KubernetesConfig:
        """Build from a settings dict; unknown keys and bad values raise ``ValueError``."""
        known = set(cls.__dataclass_fields__)
        extra = set(raw) - known - {"api_client"}
        if extra:
            raise ValueError(f"unknown kubernetes backend settings: {sorted(extra)}")
        values = {k: v for k, v in raw.items() if k in known}
        denied_error = egress_cidrs_error(values.get("egress_denied_cidrs", ()))
        if denied_error:
            raise ValueError(denied_error)
        for key in (
            "gpu_taint_keys",
            "image_pull_secrets",
            "prestop_command",
            "egress_denied_cidrs",
        ):
            if key in values:
                if isinstance(values[key], str):
                    raise ValueError(f"{key} must be a list, not a string")
                values[key] = tuple(values[key])
        if "spot_labels" in values:
            values["spot_labels"] = dict(values["spot_labels"])
        cfg = cls(**values)
        if cfg.bind_mode not in ("binding", "nodeName"):
            raise ValueError("bind_mode must be 'binding' or 'nodeName'")
        if cfg.quarantine_taint_effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError("quarantine_taint_effect must be a taint effect")
        if not _DNS1123_LABEL.match(cfg.namespace):
            raise ValueError(f"namespace {cfg.namespace!r} is not a DNS-1123 label")
        if cfg.watch_timeout_s < 1:
            raise ValueError("watch_timeout_s must be at least 1 (0 means 'server default')")
        if cfg.retry_attempts < 1:
            raise ValueError("retry_attempts must be at least 1")
        if cfg.finished_run_ttl_s < 0:
            raise ValueError("finished_run_ttl_s must be >= 0")
        if cfg.egress_denied_cidrs and not cfg.network_policy:
            raise ValueError(
                "egress_denied_cidrs needs network_policy: the run's policy holds them"
            )
        if cfg.pod_security not in POD_SECURITY_LEVELS:
            raise ValueError(f"pod_security must be one of {list(POD_SECURITY_LEVELS)}")
        # Read from the cluster's JSON settings: any JSON value until this check.
        run_as_user: object = cfg.run_as_user
        if run_as_user is not None and (
            isinstance(run_as_user, bool)
            or not isinstance(run_as_user, int)
            or not 0 < run_as_user < 2**31
        ):
            # 0 is root, which "restricted" forbids and which needs no setting to get.
            raise ValueError("run_as_user must be a uid from 1 to 2147483647")
        return cfg


# --------------------------------------------------------------------------- names and labels


def pod_name(job_id: str, attempt: int, worker_index: int) -> str:
    """The pod of one worker of one run: ``gp-<job>-a<attempt>-w<index>``."""
    return f"{backend_job_name(job_id, attempt)}-w{worker_index}"


def run_selector(job_id: str, attempt: int) -> str:
    """Label selector matching exactly the pods of one run."""
    return f"{LABEL_RUN}={backend_job_name(job_id, attempt)}"


def managed_selector() -> str:
    """Label selector matching every pod the platform created."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"


def check_identity(job_id: str, attempt: int, workers: int) -> None:
    run = backend_job_name(job_id, attempt)
    last = pod_name(job_id, attempt, max(workers - 1, 0))
    # Pod names must be DNS-1123 subdomains and the run name is also a label value (<= 63).
    if not _DNS1123_LABEL.match(run) or len(run) > 63 or len(last) > 253:
        raise BackendRejected(
            f"job id {job_id!r} does not give a valid Kubernetes name ({run!r}); "
            "ids must be lowercase letters, digits and '-'"
        )


# --------------------------------------------------------------------------- manifests


def pod_manifest(
    spec: BackendJobSpec,
    worker_index: int,
    node: str,
    gpu_indices: Sequence[int],
    cfg: KubernetesConfig,
    *,
    launch: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Pod for worker ``worker_index`` of ``spec``, pinned to ``node``.

    Pinning: with ``bind_mode="binding"`` the pod names our ``schedulerName`` (so the default
    scheduler never picks it up) and a required node affinity on ``metadata.name`` (which the
    kubelet re-checks at admission); the backend then binds it with the Binding API. With
    ``bind_mode="nodeName"`` ``spec.nodeName`` is set directly and no scheduler is involved.

    ``launch`` is the worker's :func:`~scheduler.backends.base.launcher_env` (computed here when
    not given); its ``MASTER_ADDR`` is worker 0's DNS name through the run's headless Service,
    ``w0.<run>``, so without ``rendezvous_service`` no master address is set.
    """
    check_identity(spec.job_id, spec.attempt, spec.workers)
    if launch is None:
        launch = _launch_envs(spec, cfg)[worker_index]
    if not spec.image:
        raise BackendRejected("job has no image")
    # A pyxis form (an enroot URI, a squashfs file) is valid for Slurm, but no kubelet pulls it.
    problem = oci_image_error(spec.image)
    if problem:
        raise BackendRejected(f"Kubernetes pulls OCI image references only: {problem}")
    for key in spec.env:
        problem = env_name_error(key)
        if problem:
            raise BackendRejected(problem)
    try:
        argv = shlex.split(spec.command)
    except ValueError as exc:
        raise BackendRejected(f"command cannot be split into arguments: {exc}") from exc
    gpus = len(gpu_indices) or spec.gpus_per_worker
    run = spec.backend_name
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY_VALUE,
        LABEL_RUN: run,
        LABEL_JOB_ID: spec.job_id,
        LABEL_ATTEMPT: str(spec.attempt),
        LABEL_WORKER_INDEX: str(worker_index),
    }
    # A team name that is not a valid label value still travels in the annotation.
    if spec.team and len(spec.team) <= 63 and _LABEL_VALUE.match(spec.team):
        labels[LABEL_TEAM] = spec.team
    annotations = {
        ANN_TEAM: spec.team,
        ANN_JOB_NAME: spec.name,
        ANN_WORKERS: str(spec.workers),
        ANN_NODE: node,
        # The device plugin, not us, picks the physical GPUs; the engine's choice is recorded.
        ANN_GPU_INDICES: ",".join(str(i) for i in gpu_indices),
    }
    ours = {**identity_env(spec), "GPUPLATFORM_PODINFO_DIR": PODINFO_DIR, **dict(launch)}
    # The job's own variables first; the platform's win a clash (a wrong RANK breaks the gang).
    env: list[dict[str, Any]] = [
        {"name": k, "value": literal_env_value(str(v))}
        for k, v in sorted(spec.env.items())
        if k not in ours
    ]
    env += [{"name": k, "value": literal_env_value(v)} for k, v in ours.items()]
    env += [
        {"name": "GPUPLATFORM_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {
            "name": "GPUPLATFORM_NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        },
    ]
    container: dict[str, Any] = {
        "name": WORKER_CONTAINER,
        "image": spec.image,
        "env": env,
        # Extended resources: requests default to limits and must equal them.
        "resources": {"limits": {cfg.gpu_resource: str(gpus)}},
        "volumeMounts": [
            {"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if argv:
        container["command"] = argv
    # What the "baseline"/"restricted" Pod Security levels ask of every container and that no
    # training job needs; root is not forbidden because many CUDA images run as root.
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod_security: dict[str, Any] = {}
    if cfg.pod_security == "restricted":
        # The rest of "restricted", for sites whose images run as a user: without any capability
        # (NET_RAW among the defaults would let a worker forge packets to other pods on the
        # node's bridge) and never as root (the kubelet refuses to start an image whose user is
        # root, unless run_as_user names another).
        container["securityContext"]["capabilities"] = {"drop": ["ALL"]}
        container["securityContext"]["runAsNonRoot"] = True
        pod_security["runAsNonRoot"] = True
        pod_security["seccompProfile"] = {"type": "RuntimeDefault"}
    if cfg.run_as_user is not None:
        pod_security["runAsUser"] = cfg.run_as_user
    if cfg.prestop_command:
        container["lifecycle"] = {"preStop": {"exec": {"command": list(cfg.prestop_command)}}}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # Deleting the pod sends SIGTERM and waits this long before SIGKILL: the workload's
        # window to write its final checkpoint.
        "terminationGracePeriodSeconds": min(int(spec.checkpoint_grace_s), MAX_TERMINATION_GRACE_S),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "tolerations": [
            {"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in cfg.gpu_taint_keys
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        },
        "containers": [container],
        **({"securityContext": pod_security} if pod_security else {}),
        "volumes": [
            {
                "name": "podinfo",
                # Annotations in a downward API volume are refreshed in place by the kubelet:
                # this is how a checkpoint request reaches a running worker without exec.
                "downwardAPI": {
                    "items": [
                        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    ]
                },
            },
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": cfg.shm_size}},
        ],
    }
    if cfg.rendezvous_service:
        pod_spec["hostname"] = f"w{worker_index}"
        pod_spec["subdomain"] = run
    if cfg.bind_mode == "nodeName":
        pod_spec["nodeName"] = node
    else:
        pod_spec["schedulerName"] = cfg.scheduler_name
    if spec.runtime_limit_s:
        pod_spec["activeDeadlineSeconds"] = int(spec.runtime_limit_s)
    if cfg.service_account:
        pod_spec["serviceAccountName"] = cfg.service_account
    if cfg.priority_class_name:
        pod_spec["priorityClassName"] = cfg.priority_class_name
    if cfg.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in cfg.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(spec.job_id, spec.attempt, worker_index),
            "namespace": cfg.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": pod_spec,
    }


def literal_env_value(value: str) -> str:
    """``value`` written so the container gets it exactly: Kubernetes expands ``$(NAME)`` in an
    env value and reduces ``$$`` to ``$``, so a password ``pa$$word`` would arrive as ``pa$word``
    (on Slurm the same value arrives as written). Every ``$`` doubled comes back as one."""
    return value.replace("$", "$$")


def worker_slots(spec: BackendJobSpec) -> list[tuple[str, tuple[int, ...]]]:
    """``(node, gpu indices)`` of each worker, worker 0 first (see
    :func:`scheduler.backends.base.worker_slots`); a placement that does not give the job's
    workers is :class:`BackendRejected`."""
    try:
        return _worker_slots(spec)
    except ValueError as exc:
        raise BackendRejected(str(exc)) from exc


def _launch_envs(spec: BackendJobSpec, cfg: KubernetesConfig) -> list[dict[str, str]]:
    """Every worker's launcher variables; the master is worker 0's stable DNS name through the
    run's headless Service (``w0.<run>``, resolvable from every pod of the namespace)."""
    worker_slots(spec)  # a placement that cannot run is refused before anything else
    envs = worker_envs(spec, master_addr=f"w0.{spec.backend_name}", master_port=cfg.rendezvous_port)
    if not cfg.rendezvous_service:
        drop = {"MASTER_ADDR", "PET_MASTER_ADDR", "GPUPLATFORM_MASTER_ADDR"}
        envs = [{k: v for k, v in env.items() if k not in drop} for env in envs]
    return envs


def pod_manifests(spec: BackendJobSpec, cfg: KubernetesConfig) -> list[tuple[dict[str, Any], str]]:
    """One ``(pod, node)`` per worker (see :func:`worker_slots`), worker 0 first."""
    launch = _launch_envs(spec, cfg)
    return [
        (pod_manifest(spec, i, node, gpus, cfg, launch=launch[i]), node)
        for i, (node, gpus) in enumerate(worker_slots(spec))
    ]


def run_object_metadata(spec: BackendJobSpec, cfg: KubernetesConfig) -> dict[str, Any]:
    """The metadata of an object that lives and dies with the run (its Service, its
    NetworkPolicy): named like the run, with the labels the sync finds it by."""
    run = spec.backend_name
    return {
        "name": run,
        "namespace": cfg.namespace,
        "labels": {
            LABEL_MANAGED_BY: MANAGED_BY_VALUE,
            LABEL_RUN: run,
            LABEL_JOB_ID: spec.job_id,
            LABEL_ATTEMPT: str(spec.attempt),
        },
        "annotations": {ANN_TEAM: spec.team},
    }


def rendezvous_service_manifest(spec: BackendJobSpec, cfg: KubernetesConfig) -> dict[str, Any]:
    """The run's headless Service: gives worker ``i`` the DNS name ``w<i>.<run>`` (pods set
    ``hostname``/``subdomain``), published before the pods are Ready so rendezvous can start."""
    check_identity(spec.job_id, spec.attempt, spec.workers)
    run = spec.backend_name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": run_object_metadata(spec, cfg),
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_RUN: run},
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": "rendezvous",
                    "port": cfg.rendezvous_port,
                    "targetPort": cfg.rendezvous_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def binding_manifest(pod: str, namespace: str, node: str) -> dict[str, Any]:
    """The Binding that assigns ``pod`` to ``node`` (what a scheduler posts)."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def checkpoint_patch(request_id: str) -> dict[str, Any]:
    """Pod patch that asks a worker for a checkpoint (seen through the downward API volume)."""
    return {"metadata": {"annotations": {ANN_CHECKPOINT_REQUEST: request_id}}}


def cancel_patch() -> dict[str, Any]:
    """Pod patch recording that the platform, not a node failure, is stopping the pod."""
    return {"metadata": {"annotations": {ANN_CANCELLED: "true"}}}


def quarantine_patch(
    node: Mapping[str, Any], cfg: KubernetesConfig, reason: str
) -> dict[str, Any] | None:
    """Cordon + taint ``node`` with the quarantine taint; ``None`` if already quarantined.

    Taints are a plain list in strategic merge (no merge key), so the patch carries the whole new
    list: every foreign taint is kept. If the node was already cordoned by someone else we do not
    claim the cordon, so :func:`release_patch` will leave it in place.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    annotations = meta.get("annotations") or {}
    taints = list(spec.get("taints") or [])
    has_taint = any(t.get("key") == cfg.quarantine_taint_key for t in taints)
    cordoned = bool(spec.get("unschedulable"))
    if has_taint and cordoned and annotations.get(ANN_QUARANTINE_REASON) == reason:
        return None
    new_annotations = {ANN_QUARANTINE_REASON: reason}
    if not cordoned:
        new_annotations[ANN_CORDONED_BY] = MANAGED_BY_VALUE
    if not has_taint:
        taints.append(
            {
                "key": cfg.quarantine_taint_key,
                "value": "true",
                "effect": cfg.quarantine_taint_effect,
            }
        )
    return {
        "metadata": _with_rv(meta, {"annotations": new_annotations}),
        "spec": {"unschedulable": True, "taints": taints},
    }


def _with_rv(meta: Mapping[str, Any], patch_meta: dict[str, Any]) -> dict[str, Any]:
    # A resourceVersion in a patch is a precondition: the server refuses (409) if it changed.
    if meta.get("resourceVersion"):
        return {"resourceVersion": meta["resourceVersion"], **patch_meta}
    return patch_meta


def release_patch(node: Mapping[str, Any], cfg: KubernetesConfig) -> dict[str, Any] | None:
    """Undo :func:`quarantine_patch`; ``None`` if there is nothing of ours to undo.

    Removes our taint and annotations; uncordons only if the platform did the cordoning.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    annotations = meta.get("annotations") or {}
    taints = list(spec.get("taints") or [])
    kept = [t for t in taints if t.get("key") != cfg.quarantine_taint_key]
    ours = [k for k in (ANN_QUARANTINE_REASON, ANN_CORDONED_BY) if k in annotations]
    we_cordoned = annotations.get(ANN_CORDONED_BY) == MANAGED_BY_VALUE
    if len(kept) == len(taints) and not ours:
        return None
    new_spec: dict[str, Any] = {"taints": kept or None}
    if we_cordoned:
        new_spec["unschedulable"] = None
    return {
        "metadata": _with_rv(meta, {"annotations": {k: None for k in ours}}),
        "spec": new_spec,
    }


def strategic_merge(target: Any, patch: Any) -> Any:
    """Apply a strategic-merge patch the way the API server does for the fields we patch.

    Maps merge key by key, ``None`` deletes a key, and lists replace (true for node taints and
    for the annotation maps; lists with merge keys such as containers are never patched here).
    Used by the tests to compute the object a patch produces (and validate it).
    """
    if not isinstance(patch, Mapping) or not isinstance(target, Mapping):
        return patch
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            out[key] = strategic_merge(out.get(key) or {}, value)
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- readers


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    cond: Mapping[str, Any]
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What a run needs to know about a node: does it exist and is the kubelet Ready."""

    exists: bool
    ready: bool
    not_ready_since: datetime | None = None


def node_health(node: Mapping[str, Any] | None) -> NodeHealth:
    """Health of a node object (``None`` = the node is gone)."""
    if node is None:
        return NodeHealth(exists=False, ready=False)
    cond = _condition(node, "Ready")
    ready = cond is not None and cond.get("status") == "True"
    since = None if ready or not cond else parse_time(cond.get("lastTransitionTime"))
    return NodeHealth(exists=True, ready=ready, not_ready_since=since)


def node_from_k8s(
    node: Mapping[str, Any], cfg: KubernetesConfig, busy_nodes: Iterable[str] = ()
) -> BackendNode | None:
    """The platform's view of one Node; ``None`` for a node with no GPU resource at all.

    State: ``down`` if the kubelet is not Ready or the GPU device plugin reports no allocatable
    GPUs; ``draining``/``drained`` if cordoned or carrying our quarantine taint (draining while
    platform pods still run there); otherwise ``ready``.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or {}
    has_gpu_resource = cfg.gpu_resource in allocatable or cfg.gpu_resource in capacity
    if not has_gpu_resource and cfg.gpu_product_label not in labels:
        return None
    gpus = _quantity_int(allocatable.get(cfg.gpu_resource, "0"))
    name = meta.get("name", "")
    health = node_health(node)
    taints = spec.get("taints") or []
    quarantined = any(t.get("key") == cfg.quarantine_taint_key for t in taints)
    if not health.ready:
        cond = _condition(node, "Ready") or {}
        state, reason = "down", cond.get("message") or cond.get("reason") or "kubelet not Ready"
    elif gpus == 0:
        state, reason = "down", f"no allocatable {cfg.gpu_resource}"
    elif quarantined or spec.get("unschedulable"):
        state = "draining" if name in set(busy_nodes) else "drained"
        reason = annotations.get(ANN_QUARANTINE_REASON) or "cordoned outside gpuplatform"
    else:
        state, reason = "ready", ""
    spot = any(labels.get(k) == v for k, v in cfg.spot_labels.items())
    return BackendNode(
        name=name,
        gpus=gpus,
        gpu_model=labels.get(cfg.gpu_product_label, ""),
        state=state,
        reason=reason,
        zone=labels.get(cfg.zone_label, ""),
        rack=labels.get(cfg.rack_label, "") if cfg.rack_label else "",
        nvlink_domain=labels.get(cfg.nvlink_label, "") if cfg.nvlink_label else "",
        fabric=labels.get(cfg.fabric_label, "") if cfg.fabric_label else "",
        spot=spot,
    )


def _quantity_int(value: Any) -> int:
    # nvidia.com/gpu is always a whole count; anything else (e.g. "500m") is not a usable GPU,
    # and neither is a negative count (it would read as a ready node, imported with 1 GPU).
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term is not None and cs.get("name") == WORKER_CONTAINER:
            code: int | None = term.get("exitCode")
            return code
    return None


def _terminated_reason(pod: Mapping[str, Any]) -> str:
    """The runtime's word for how the worker container ended, when it says more than the exit
    code: ``OOMKilled`` (its memory limit), ``StartError``/``ContainerCannotRun`` (the command
    could not be started). ``Error`` and ``Completed`` only restate the exit code."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term is not None and cs.get("name") == WORKER_CONTAINER:
            reason = term.get("reason") or ""
            return "" if reason in ("Error", "Completed") else str(reason)
    return ""


def _checkpointed_progress(pods: Sequence[Mapping[str, Any]]) -> float | None:
    """Seconds of work checkpointed, as workers report it in their termination message.

    A worker that writes ``{"checkpointed_progress_s": <seconds>}`` to ``/dev/termination-log``
    before exiting (e.g. after its final checkpoint on SIGTERM) has it surfaced by the kubelet in
    ``state.terminated.message``. The smallest value any worker reports is the safe one.
    """
    values = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            message = ((cs.get("state") or {}).get("terminated") or {}).get("message")
            if cs.get("name") != WORKER_CONTAINER or not message:
                continue
            try:
                value = json.loads(message).get("checkpointed_progress_s")
            except (ValueError, AttributeError):
                continue
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                values.append(float(value))
    return min(values) if values else None


def _waiting_reason(pod: Mapping[str, Any]) -> str:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return ""


def _waiting_message(pod: Mapping[str, Any]) -> str:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting.get("message") or "")
    return ""


def _node_disruption(
    pod: Mapping[str, Any], reasons: frozenset[str] = _NODE_DISRUPTION_REASONS
) -> str:
    """Why the cluster is taking this pod off its node (a ``DisruptionTarget`` condition with
    one of ``reasons``: by default the taint manager's, pod GC's, kubelet's or the eviction
    API's), or ""."""
    disruption = _condition(pod, "DisruptionTarget")
    if disruption and disruption.get("status") == "True" and disruption.get("reason") in reasons:
        return f"{disruption.get('reason')}: {disruption.get('message', '')}".strip(": ")
    return ""


def _preempted(pod: Mapping[str, Any]) -> str:
    return _node_disruption(pod, frozenset({_SCHEDULER_PREEMPTION_REASON}))


def _succeeded(pod: Mapping[str, Any]) -> bool:
    """The worker finished its work: phase Succeeded, and not because the cluster stopped it.

    A workload obeys SIGTERM by checkpointing and exiting, usually with 0, so a pod evicted
    (``kubectl drain``, a NoExecute taint) ends Succeeded although its work is not done. It
    counts as done only if it finished before the disruption began."""
    if (pod.get("status") or {}).get("phase") != "Succeeded":
        return False
    if not _node_disruption(pod) and not _preempted(pod):
        return True
    began = parse_time((_condition(pod, "DisruptionTarget") or {}).get("lastTransitionTime"))
    finished = _finished_at(pod)
    return began is not None and finished is not None and finished < began


def _node_failure(
    pod: Mapping[str, Any], nodes: Mapping[str, NodeHealth], now: datetime, grace_s: float
) -> str:
    """Why this (not succeeded) pod was lost to its node, or "" if it was not."""
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    # "OutOf<resource>": the kubelet refused the pod at admission (e.g. the GPUs are taken by a
    # pod the default scheduler placed there); the run never started, so it is not its fault.
    if reason in _NODE_FAILURE_REASONS or reason.startswith("OutOf"):
        return f"{reason}: {status.get('message', '')}".strip(": ")
    disruption = _node_disruption(pod)
    if disruption:
        return disruption
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return ""
    health = nodes.get(node, NodeHealth(exists=False, ready=False))
    if not health.exists:
        return f"node {node} is gone"
    if not health.ready:
        since = health.not_ready_since
        if grace_s <= 0 or since is None or (now - since).total_seconds() >= grace_s:
            return f"node {node} is NotReady"
    return ""


def _gang_size(annotations: Mapping[str, Any]) -> int:
    # Anyone who may patch pods in the namespace can rewrite the annotation; a value that is not
    # a count must not make the run's state (and the poll of the whole cluster) raise.
    try:
        return max(0, int(str(annotations.get(ANN_WORKERS) or 0)))
    except ValueError:
        return 0


def _worker_order(pod: Mapping[str, Any]) -> tuple[int, str]:
    meta = pod.get("metadata") or {}
    index = (meta.get("labels") or {}).get(LABEL_WORKER_INDEX, "")
    return (int(index) if index.isdigit() else -1, meta.get("name", ""))


def run_status(
    job_id: str,
    attempt: int,
    pods: Sequence[Mapping[str, Any]],
    deleted: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, NodeHealth],
    cfg: KubernetesConfig,
    now: datetime | None = None,
) -> BackendJobStatus:
    """Aggregate the pods of one run into one state.

    ``pods`` are the run's live pods, ``deleted`` the last seen state of its pods that are gone,
    ``nodes`` the health of every node that exists. Precedence, first match wins:
    no pod at all -> UNKNOWN; a pod we cancelled -> CANCELLED; every worker Succeeded ->
    SUCCEEDED; a worker lost to its node (gone, NotReady, evicted, kubelet admission) ->
    NODE_FAILED; a worker preempted by the default scheduler -> INTERRUPTED; a worker Failed or
    stuck on a permanent error -> FAILED; a worker pod deleted behind our back -> FAILED; every
    worker Running (or done) -> RUNNING; else PENDING.
    """
    now = now or datetime.now(UTC)
    ref = f"{cfg.namespace}/{backend_job_name(job_id, attempt)}"
    # Worker order, so the reason names the lowest failing worker whatever order the API gave.
    pods = sorted(pods, key=_worker_order)
    deleted = sorted(deleted, key=_worker_order)
    everything = pods + deleted

    def status(
        state: BackendJobState, reason: str = "", exit_code: int | None = None
    ) -> BackendJobStatus:
        bound = {(p.get("spec") or {}).get("nodeName") for p in everything}
        node_names = sorted(name for name in bound if name is not None and name != "")
        return BackendJobStatus(
            job_id=job_id,
            attempt=attempt,
            state=state,
            backend_ref=ref,
            nodes=tuple(node_names),
            exit_code=exit_code,
            reason=reason,
            checkpointed_progress_s=_checkpointed_progress(everything),
        )

    if not everything:
        return BackendJobStatus(job_id, attempt, BackendJobState.UNKNOWN, reason="no pods")
    annotations = [(p.get("metadata") or {}).get("annotations") or {} for p in everything]
    if any(a.get(ANN_CANCELLED) == "true" for a in annotations):
        return status(BackendJobState.CANCELLED, "cancelled by the platform")
    workers = max(_gang_size(a) for a in annotations) or len(everything)

    def phase(p: Mapping[str, Any]) -> str:
        value: str = (p.get("status") or {}).get("phase", "Pending")
        return value

    def index(p: Mapping[str, Any]) -> str:
        value: str = ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_WORKER_INDEX, "?")
        return value

    succeeded = {index(p) for p in everything if _succeeded(p)}
    if len(succeeded) >= workers:
        return status(BackendJobState.SUCCEEDED, exit_code=0)
    unfinished = [p for p in everything if not _succeeded(p)]
    for pod in unfinished:
        why = _node_failure(pod, nodes, now, cfg.node_not_ready_grace_s)
        if why:
            return status(BackendJobState.NODE_FAILED, f"worker {index(pod)}: {why}")
    for pod in unfinished:
        why = _preempted(pod)
        if why:
            return status(BackendJobState.INTERRUPTED, f"worker {index(pod)}: {why}")
    for pod in unfinished:
        st = pod.get("status") or {}
        if phase(pod) == "Failed":
            if st.get("reason") == "DeadlineExceeded":
                return status(BackendJobState.FAILED, "runtime limit exceeded", _exit_code(pod))
            code = _exit_code(pod)
            exited = f"exit code {code}" if code is not None else "failed"
            container = _terminated_reason(pod)
            # Exit code 137 alone does not tell the user their job ran out of memory.
            why = st.get("reason") or (f"{container} ({exited})" if container else exited)
            return status(BackendJobState.FAILED, f"worker {index(pod)}: {why}", code)
        waiting = _waiting_reason(pod)
        if waiting in _PERMANENT_WAITING_REASONS:
            # The reason alone does not say what to fix ("CreateContainerConfigError": a root
            # image under runAsNonRoot? a missing Secret?); the kubelet's message does.
            detail = _waiting_message(pod)
            why = f"{waiting}: {detail}" if detail else waiting
            return status(BackendJobState.FAILED, f"worker {index(pod)}: {why}")
    gone = [p for p in deleted if phase(p) != "Succeeded"]
    if gone:
        return status(
            BackendJobState.FAILED, f"worker {index(gone[0])}: pod deleted outside the platform"
        )
    live_indices = {index(p) for p in pods}
    if len(live_indices | succeeded) < workers:
        return status(
            BackendJobState.PENDING,
            f"{len(live_indices | succeeded)} of {workers} worker pods exist",
        )
    if all(phase(p) in ("Running", "Succeeded") for p in pods):
        return status(BackendJobState.RUNNING)
    waiting = next((w for w in map(_waiting_reason, pods) if w), "")
    unbound = sum(1 for p in pods if not (p.get("spec") or {}).get("nodeName"))
    reason = waiting or (f"{unbound} worker pods not bound yet" if unbound else "")
    pending = status(BackendJobState.PENDING, reason)
    if waiting in _FAILED_PULL_REASONS:
        # A pull in progress may take long (a large image) and is left alone; one that failed
        # and is being retried (a wrong tag, a registry refusing us) would hold the run's GPUs,
        # billed, for as long as nobody looks: the loop's grace for runs the cluster holds
        # puts the job back in the queue instead.
        return replace(pending, held_by_cluster=True)
    return pending


# --------------------------------------------------------------------------- finished runs


def finished_runs(
    pods: Iterable[Mapping[str, Any]], *, now: datetime, older_than_s: float
) -> list[tuple[str, int]]:
    """``(job_id, attempt)`` of runs every pod of which finished (Succeeded or Failed) more than
    ``older_than_s`` seconds before ``now``: their pods and Service may be deleted. A run with a
    pod still pending, running or without a finish time is left alone."""
    by_run: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        run = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_RUN)
        if run:
            by_run.setdefault(run, []).append(pod)
    out = []
    for _run, members in sorted(by_run.items()):
        ends = [_finished_at(p) for p in members]
        known = [end for end in ends if end is not None]
        if len(known) < len(ends):
            continue
        if (now - max(known)).total_seconds() <= older_than_s:
            continue
        labels = members[0]["metadata"]["labels"]
        try:
            out.append((labels[LABEL_JOB_ID], int(labels[LABEL_ATTEMPT])))
        except (KeyError, ValueError):
            continue
    return out


def _finished_at(pod: Mapping[str, Any]) -> datetime | None:
    if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
        return None
    times = [
        parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None
