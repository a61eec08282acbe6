"""Kubernetes backend: runs the engine's placement as bound pods, through the official client.

A run (``job_id``, ``attempt``) becomes one Pod per worker, named
``backend_job_name(job_id, attempt) + "-w<index>"``. Each pod names our ``schedulerName`` so the
default scheduler leaves it alone, and the backend binds it to the node the engine chose with the
Binding API (or, with ``bind_mode="nodeName"``, sets ``spec.nodeName`` directly). Manifests are
built by the pure :mod:`scheduler.backends.k8s_manifests`.

Guarantees (on top of :mod:`scheduler.backends.base`):

- Idempotent by our identity: pod names are derived from the run, a 409 AlreadyExists on create
  means "already submitted" (the pod is read back and bound if it is not yet), a 409 on a binding
  whose pod already sits on the chosen node is success, a 404 on delete/patch is "already gone".
- Typed errors: 5xx, 429 and connection/timeout errors raise :class:`BackendUnavailable` after
  ``retry_attempts`` tries with exponential backoff and full jitter (``Retry-After`` honoured);
  other 4xx raise :class:`BackendRejected` at once.
- Job state comes from a watch on the platform's pods (:class:`PodWatcher`): it resumes from the
  last ``resourceVersion`` it saw and relists when the server answers 410 Gone.
- ``dry_run`` logs every mutating request instead of sending it; reads still go to the cluster.
- A run's team (``RunRef.team``) is not checked against the pods' team annotation: a pod's name
  is unique in the namespace and only the platform's ServiceAccount may create pods there, so a
  pod named for a run is the platform's own (unlike a Slurm job, which any account may name
  like a run). ``read_log`` reads worker 0's pod by name, without the pod object a check needs.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from scheduler.backends import k8s_formats as formats
from scheduler.backends import k8s_manifests as m
from scheduler.backends import k8s_network as network
from scheduler.backends.base import (
    BackendJobSpec,
    BackendJobStatus,
    BackendNode,
    BackendRejected,
    BackendUnavailable,
    LiveRun,
    LogChunk,
    RunRef,
    backend_job_name,
    parse_backend_job_name,
)

logger = logging.getLogger(__name__)

_SMP = "application/strategic-merge-patch+json"
# How far the node's clock may be behind ours when following a pod log by timestamp.
LOG_CLOCK_SLACK_S = 10
# The largest pod-log window read to get past a burst of already-read lines.
LOG_MAX_WINDOW_BYTES = 16 << 20
_TERMINAL_PHASES = ("Succeeded", "Failed")
# A run's NetworkPolicy is created before its pods: one without pods is an orphan (its run was
# cancelled, or purged by an older version) only once it is older than any submit can take, so
# the sweep never deletes the policy of a run whose pods are being created.
ORPHAN_POLICY_MIN_AGE_S = 600.0
# Orphans wait at least that long anyway: listing the policies on every cycle (every few seconds)
# would only load the API server.
POLICY_SWEEP_INTERVAL_S = 60.0


def _status_message(exc: ApiException) -> str:
    """The API server's ``Status.message`` if the body carries one, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return str(exc.reason or "")


def translate_error(exc: BaseException, what: str) -> BackendRejected | BackendUnavailable:
    """Map a client exception to the backend's typed errors (see module docstring)."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        text = f"{what}: HTTP {status} {_status_message(exc)}".strip()
        if status == 0 or status == 429 or status >= 500:
            return BackendUnavailable(text)
        return BackendRejected(text)
    return BackendUnavailable(f"{what}: {type(exc).__name__}: {exc}")


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    try:
        value = headers.get("Retry-After")
        delay = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    # Only delay-seconds (a non-negative number) is a usable answer: time.sleep refuses a
    # negative or NaN delay with ValueError, which would escape the retry loop as an error that
    # is not BackendUnavailable (and the loop fails the cluster's jobs one by one on those).
    if delay is None or not math.isfinite(delay) or delay < 0:
        return None
    return delay


class PodWatcher:
    """A cache of the platform's pods in one namespace, kept current by list + watch.

    :meth:`sync` brings the cache up to date: the first call (and any call after the server
    answered 410 Gone, as an HTTP status or as an ERROR event in the stream) lists the pods and
    remembers the list's ``resourceVersion``; later calls watch from the last ``resourceVersion``
    seen (events and bookmarks advance it) for at most ``timeout_s`` seconds. Pods that disappear
    are kept as tombstones (their last seen state) so a run whose pods were deleted can still be
    told apart from one that never existed. Thread-safe: one sync at a time.
    """

    def __init__(
        self,
        call: Callable[..., Any],
        core: k8s_client.CoreV1Api,
        namespace: str,
        label_selector: str,
        timeout_s: int,
        request_timeout_s: float,
        max_tombstones: int = 10_000,
    ) -> None:
        self._call = call
        self._core = core
        self.namespace = namespace
        self.label_selector = label_selector
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_tombstones = max_tombstones
        self.pods: dict[str, dict[str, Any]] = {}
        self.deleted: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.resource_version: str | None = None
        self.relists = 0
        self.watches = 0
        self.last_sync: float | None = None  # time.monotonic() of the last completed sync
        self._lock = threading.Lock()

    def sync(self) -> None:
        """Apply everything that happened since the last sync (list on first use or after 410)."""
        with self._lock:
            if self.resource_version is None or not self._watch_once():
                self._relist()
            self.last_sync = time.monotonic()

    def sync_if_older(self, max_age_s: float) -> None:
        """:meth:`sync` unless the cache was brought up to date less than ``max_age_s`` ago."""
        if self.last_sync is None or time.monotonic() - self.last_sync >= max_age_s:
            self.sync()

    def run_pods(self, run: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(live, deleted)`` pods of one run from the cache."""

        def of_run(pod: Mapping[str, Any]) -> bool:
            return ((pod.get("metadata") or {}).get("labels") or {}).get(m.LABEL_RUN) == run

        with self._lock:
            live = [p for p in self.pods.values() if of_run(p)]
            gone = [p for p in self.deleted.values() if of_run(p)]
        return live, gone

    def live_runs(self) -> set[tuple[str, int]]:
        """``(job_id, attempt)`` of runs with a pod that is neither finished nor being deleted."""
        with self._lock:
            pods = list(self.pods.values())
        runs = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            if meta.get("deletionTimestamp") or _phase(pod) in _TERMINAL_PHASES:
                continue
            run = parse_backend_job_name((meta.get("labels") or {}).get(m.LABEL_RUN, ""))
            if run is not None:
                runs.add(run)
        return runs

    def busy_nodes(self) -> set[str]:
        """Nodes where a platform pod is bound and not finished."""
        with self._lock:
            return {
                p["spec"]["nodeName"]
                for p in self.pods.values()
                if (p.get("spec") or {}).get("nodeName")
                and (p.get("status") or {}).get("phase") not in _TERMINAL_PHASES
            }

    # -- internals

    def _relist(self) -> None:
        api_client = self._core.api_client
        result = self._call(
            "list pods",
            self._core.list_namespaced_pod,
            self.namespace,
            label_selector=self.label_selector,
        )
        listed = api_client.sanitize_for_serialization(result)
        fresh = {p["metadata"]["name"]: p for p in listed.get("items") or []}
        # Pods that vanished while we were not watching: keep their last seen state.
        for name, pod in self.pods.items():
            if name not in fresh:
                self._tombstone(name, pod)
        for name in fresh:
            self.deleted.pop(name, None)
        self.pods = fresh
        self.resource_version = (listed.get("metadata") or {}).get("resourceVersion")
        self.relists += 1

    def _tombstone(self, name: str, pod: dict[str, Any]) -> None:
        self.deleted[name] = pod
        self.deleted.move_to_end(name)
        while len(self.deleted) > self.max_tombstones:
            self.deleted.popitem(last=False)

    def _watch_once(self) -> bool:
        """Stream one watch window; False when the resourceVersion has expired (410)."""
        try:
            resp = self._call(
                "watch pods",
                self._core.list_namespaced_pod,
                self.namespace,
                label_selector=self.label_selector,
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.timeout_s,
                _preload_content=False,
                _request_timeout=(self.request_timeout_s, self.timeout_s + self.request_timeout_s),
                expect=(410,),
            )
        except ApiException:  # 410 Gone as an HTTP status
            return False
        self.watches += 1
        try:
            for event in _events(resp):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return False
                    raise BackendUnavailable(f"watch pods: {obj.get('code')} {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                name = (obj.get("metadata") or {}).get("name")
                if kind in ("ADDED", "MODIFIED") and name:
                    self.pods[name] = obj
                    self.deleted.pop(name, None)
                elif kind == "DELETED" and name:
                    self.pods.pop(name, None)
                    self._tombstone(name, obj)
                if rv:
                    self.resource_version = rv
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # The server may end a watch at any time; what was applied stays, the next sync
            # resumes from the last resourceVersion.
            logger.info("pod watch ended early: %s", exc)
        except ValueError as exc:
            # An event we cannot parse: do not guess what it changed, rebuild from a list.
            logger.warning("unreadable pod watch event, relisting: %s", exc)
            return False
        finally:
            # Close before releasing: a watch left unread must not go back to the pool.
            resp.close()
            resp.release_conn()
        return True


def _events(resp: Any) -> Iterator[dict[str, Any]]:
    """Newline-delimited JSON watch events from a streaming urllib3 response."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    # A stream cut mid-event leaves a partial line: it is dropped, and the next watch resumes
    # from the last complete event's resourceVersion.


class KubernetesBackend:
    """The :class:`~scheduler.backends.base.Backend` for a Kubernetes cluster.

    ``config`` holds the keys of :class:`~scheduler.backends.k8s_manifests.KubernetesConfig`
    (plus an optional ``api_client``); ``api_client``, ``sleep``, ``clock`` and ``rng`` are
    injectable so tests drive it over real HTTP against a test API server, without real waits.
    The connection is opened lazily: constructing the backend never touches the network.
    """

    kind = "kubernetes"

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        api_client: k8s_client.ApiClient | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        raw = dict(config or {})
        self.cfg = m.KubernetesConfig.from_mapping(raw)
        self._api_client = api_client or raw.get("api_client")
        self._sleep = sleep
        self._clock = clock or (lambda: datetime.now(UTC))
        self._rng = rng or random.Random()
        self._core: k8s_client.CoreV1Api | None = None
        self._networking: k8s_client.NetworkingV1Api | None = None
        self._last_policy_sweep: datetime | None = None
        self._watcher: PodWatcher | None = None
        self._init_lock = threading.Lock()

    # ------------------------------------------------------------------ wiring

    @property
    def core(self) -> k8s_client.CoreV1Api:
        """The CoreV1Api, built on first use from the configured transport."""
        with self._init_lock:
            if self._core is None:
                self._core = k8s_client.CoreV1Api(self._api_client or self._build_api_client())
            return self._core

    @property
    def networking(self) -> k8s_client.NetworkingV1Api:
        """The NetworkingV1Api (run NetworkPolicies), on the same connection as :attr:`core`."""
        core = self.core
        with self._init_lock:
            if self._networking is None:
                self._networking = k8s_client.NetworkingV1Api(core.api_client)
            return self._networking

    @property
    def watcher(self) -> PodWatcher:
        """The pod cache used by :meth:`poll_jobs` and :meth:`list_nodes`."""
        core = self.core
        with self._init_lock:
            if self._watcher is None:
                self._watcher = PodWatcher(
                    self._call,
                    core,
                    self.cfg.namespace,
                    m.managed_selector(),
                    timeout_s=self.cfg.watch_timeout_s,
                    request_timeout_s=self.cfg.request_timeout_s,
                )
            return self._watcher

    def _build_api_client(self) -> k8s_client.ApiClient:
        cfg = self.cfg
        conf = k8s_client.Configuration()
        try:
            if cfg.host:
                conf.host = cfg.host
            elif cfg.in_cluster:
                k8s_config.load_incluster_config(client_configuration=conf)
            elif cfg.kubeconfig or cfg.context:
                k8s_config.load_kube_config(
                    config_file=cfg.kubeconfig or None,
                    context=cfg.context or None,
                    client_configuration=conf,
                )
            else:
                try:
                    k8s_config.load_incluster_config(client_configuration=conf)
                except ConfigException:
                    k8s_config.load_kube_config(client_configuration=conf)
        except (ConfigException, OSError) as exc:
            raise BackendRejected(f"kubernetes client configuration: {exc}") from exc
        # Our own retry loop (with backoff and typed errors) is the only one: urllib3 must not
        # silently retry a non-idempotent POST underneath it.
        conf.retries = False
        return k8s_client.ApiClient(conf)

    def _call(self, what: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call the API with retries; ``expect`` statuses are re-raised as ApiException."""
        expect = kwargs.pop("expect", ())
        kwargs.setdefault("_request_timeout", self.cfg.request_timeout_s)
        attempts = self.cfg.retry_attempts
        for attempt in range(1, attempts + 1):
            try:
                return fn(*args, **kwargs)
            except ApiException as exc:
                if exc.status in expect:
                    raise
                error: BaseException = exc
                typed = translate_error(exc, what)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                error = exc
                typed = translate_error(exc, what)
            except ValueError as exc:
                # The client refused our arguments or could not read the server's answer into
                # its models (pydantic's ValidationError is a ValueError): not transient.
                raise BackendRejected(f"{what}: {exc}") from exc
            if isinstance(typed, BackendRejected) or attempt == attempts:
                raise typed from error
            ceiling = min(self.cfg.retry_cap_s, self.cfg.retry_base_s * 2 ** (attempt - 1))
            delay = _retry_after(error)
            if delay is None:
                delay = self._rng.uniform(0, ceiling)
            logger.warning("%s failed (%s), retry %d in %.2fs", what, typed, attempt, delay)
            self._sleep(min(delay, self.cfg.retry_cap_s))
        raise AssertionError("unreachable")

    def _as_dict(self, obj: Any) -> dict[str, Any]:
        # The client's serializer is untyped; an API object (what we pass) serializes to a dict.
        serialized: dict[str, Any] = self.core.api_client.sanitize_for_serialization(obj)
        return serialized

    def _dry(self, action: str, body: Any = None) -> None:
        logger.info(
            "dry-run: would %s %s", action, json.dumps(body, sort_keys=True) if body else ""
        )

    # ------------------------------------------------------------------ Backend protocol

    def run_provenance(self, spec: BackendJobSpec) -> dict[str, Any]:
        """For the attempt's reproducibility record. The kubelet pulls the image when the pod
        starts, after the record is written, so the digest is known only when the reference
        pins one (``name@sha256:...``)."""
        return {
            "image_digest": None,
            "image_note": "pulled by the kubelet by reference when the pod starts; pin a digest "
            "(image@sha256:...) to record it",
        }

    def submit(self, spec: BackendJobSpec) -> str:
        """Create the run's NetworkPolicy and Service, then create and bind one pod per worker;
        re-submitting the same run changes nothing.

        Returns ``"<namespace>/<run name>"``. A failure part-way leaves the pods created so far;
        calling ``submit`` again completes the run (created pods are found, unbound ones bound).
        """
        manifests = m.pod_manifests(spec, self.cfg)
        ref = f"{self.cfg.namespace}/{spec.backend_name}"
        if self.cfg.network_policy:
            # Before any pod: a worker is never reachable from another run, not even briefly.
            policy = network.run_network_policy_manifest(spec, self.cfg)
            if self.cfg.dry_run:
                self._dry("create networkpolicy", policy)
            else:
                self._create_network_policy(policy)
        if self.cfg.rendezvous_service:
            service = m.rendezvous_service_manifest(spec, self.cfg)
            if self.cfg.dry_run:
                self._dry("create service", service)
            else:
                self._create_service(service)
        for pod, node in manifests:
            if self.cfg.dry_run:
                self._dry("create pod", pod)
                if self.cfg.bind_mode == "binding":
                    binding = m.binding_manifest(pod["metadata"]["name"], self.cfg.namespace, node)
                    self._dry("bind pod", binding)
                continue
            created = self._create_pod(pod)
            if self.cfg.bind_mode == "binding":
                self._bind(created, node)
        return ref

    def cancel(self, run: RunRef) -> None:
        """Mark the run's pods cancelled and delete them (SIGTERM, then the checkpoint grace).

        Unknown runs and runs whose pods have all finished are left alone.
        """
        job_id, attempt = run.job_id, run.attempt
        pods = self._list_run(job_id, attempt)
        if pods and all(_phase(p) in _TERMINAL_PHASES for p in pods):
            return
        self._delete_service(job_id, attempt)
        for pod in pods:
            name = pod["metadata"]["name"]
            annotations = pod["metadata"].get("annotations") or {}
            if self.cfg.dry_run:
                self._dry(f"annotate and delete pod {name}", m.cancel_patch())
                continue
            try:
                if annotations.get(m.ANN_CANCELLED) != "true":
                    self._call(
                        "annotate pod",
                        self.core.patch_namespaced_pod,
                        name,
                        self.cfg.namespace,
                        m.cancel_patch(),
                        _content_type=_SMP,
                        expect=(404,),
                    )
                if not pod["metadata"].get("deletionTimestamp"):
                    self._call(
                        "delete pod",
                        self.core.delete_namespaced_pod,
                        name,
                        self.cfg.namespace,
                        expect=(404,),
                    )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                # Already gone: nothing left to stop.

    def purge(self, job_id: str, attempt: int) -> None:
        """Delete every object of a run the platform has finished with (pods, Service and
        NetworkPolicy).

        Not part of the Backend protocol: finished pods are kept (for logs and state) until the
        platform calls this once it has recorded the run's final state. Idempotent.
        """
        self._delete_service(job_id, attempt)
        self._delete_network_policy(backend_job_name(job_id, attempt))
        for pod in self._list_run(job_id, attempt):
            name = pod["metadata"]["name"]
            if self.cfg.dry_run:
                self._dry(f"delete pod {name}")
                continue
            try:
                self._call(
                    "delete pod",
                    self.core.delete_namespaced_pod,
                    name,
                    self.cfg.namespace,
                    expect=(404,),
                )
            except ApiException:
                pass  # 404: already gone

    def checkpoint(self, run: RunRef) -> None:
        """Annotate each running worker pod with a new checkpoint request id.

        The kubelet refreshes the downward API file ``$GPUPLATFORM_PODINFO_DIR/annotations`` in place; the
        workload checkpoints when the ``gpuplatform.io/checkpoint-request`` value changes. A pod
        asked less than ``checkpoint_min_interval_s`` ago is not asked again, so a caller that
        repeats the request every cycle (e.g. during a preemption grace) does not make the
        workload checkpoint over and over.
        """
        now = self._clock()
        request_id = formats.checkpoint_request_id(now)
        for pod in self._list_run(run.job_id, run.attempt):
            if _phase(pod) in _TERMINAL_PHASES or pod["metadata"].get("deletionTimestamp"):
                continue
            last = formats.parse_checkpoint_request_id(
                (pod["metadata"].get("annotations") or {}).get(m.ANN_CHECKPOINT_REQUEST, "")
            )
            if (
                last is not None
                and (now - last).total_seconds() < self.cfg.checkpoint_min_interval_s
            ):
                continue
            name = pod["metadata"]["name"]
            if self.cfg.dry_run:
                self._dry(f"annotate pod {name}", m.checkpoint_patch(request_id))
                continue
            try:
                self._call(
                    "request checkpoint",
                    self.core.patch_namespaced_pod,
                    name,
                    self.cfg.namespace,
                    m.checkpoint_patch(request_id),
                    _content_type=_SMP,
                    expect=(404,),
                )
            except ApiException:
                pass  # 404: the pod finished and went away in between

    def drain_node(self, name: str, reason: str) -> None:
        """Quarantine: cordon ``name`` and add the quarantine taint; running pods stay."""
        self._patch_node(name, lambda node: m.quarantine_patch(node, self.cfg, reason))

    def undrain_node(self, name: str) -> None:
        """Release: remove our taint, and the cordon if the platform put it there."""
        self._patch_node(name, lambda node: m.release_patch(node, self.cfg))

    def list_nodes(self) -> list[BackendNode]:
        """GPU nodes (matching ``node_selector``) from labels and allocatable, sorted by name."""
        raw = self._list_nodes(self.cfg.node_selector)
        # Only "draining" vs "drained" depends on the pods: a cache a few seconds old will do,
        # and saves holding a watch window open on every inventory read.
        self.watcher.sync_if_older(5.0)
        busy = self.watcher.busy_nodes()
        nodes = [m.node_from_k8s(n, self.cfg, busy) for n in raw]
        return sorted((n for n in nodes if n is not None), key=lambda n: n.name)

    def poll_jobs(self, runs: Iterable[RunRef]) -> list[BackendJobStatus]:
        """States of the runs, from the pod watch cache plus the nodes' health (one node list)."""
        runs = list(runs)
        if not runs:
            return []
        self.watcher.sync()
        health = {n["metadata"]["name"]: m.node_health(n) for n in self._list_nodes("")}
        now = self._clock()
        out = []
        for run in runs:
            live, gone = self.watcher.run_pods(run.backend_name)
            out.append(m.run_status(run.job_id, run.attempt, live, gone, health, self.cfg, now))
        return out

    def team_account(self, team: str) -> str:
        """Every pod runs as the platform's service account: no team accounts."""
        return ""

    def run_owners(self, runs: Mapping[str, RunRef]) -> dict[str, str]:
        """Every pod runs as the platform's service account, without asking."""
        return dict.fromkeys(runs, "")

    def live_runs(self, job_id_prefix: str, accounts: Iterable[str] = ()) -> list[LiveRun]:
        """Runs with a pod still pending or running (not being deleted), from the pod watch.

        Kubernetes never recreates our bare pods, so this finds only pods whose cancel did not
        reach the API server (e.g. during an outage); the sync then deletes them. ``accounts``
        changes nothing: every pod runs as the platform's service account.
        """
        self.watcher.sync_if_older(5.0)
        runs = self.watcher.live_runs()
        return sorted(LiveRun(*r) for r in runs if r[0].startswith(job_id_prefix))

    def read_log(
        self, run: RunRef, *, cursor: str | None = None, limit_bytes: int = 65536
    ) -> LogChunk:
        """Worker 0's output (``pods/log``, container ``worker``), read with ``timestamps=true``
        so a cursor can say where the reader is: the pod log API has no byte offsets. Without a
        cursor, the last lines (about ``limit_bytes``); with one, the lines after it, found
        through ``sinceSeconds`` (with ``LOG_CLOCK_SLACK_S`` for clock skew between this host
        and the node) and the timestamps. A pod that does not exist or has not started yet is
        an empty chunk."""
        limit = max(1, int(limit_bytes))
        after = None
        query: dict[str, Any] = {"container": m.WORKER_CONTAINER, "timestamps": True}
        if cursor is None:
            query["tail_lines"] = max(1, limit // 32)
            query["limit_bytes"] = 4 * limit
        else:
            try:
                after = formats.parse_log_cursor(cursor)
            except ValueError as exc:
                raise BackendRejected(str(exc)) from exc
            age_s = self._clock().timestamp() - after[0] / 1e9
            query["since_seconds"] = max(1, math.ceil(age_s + LOG_CLOCK_SLACK_S))
        budget = 4 * limit
        while True:
            if cursor is not None:
                query["limit_bytes"] = budget
            try:
                text = self._call(
                    "read pod log",
                    self.core.read_namespaced_pod_log,
                    m.pod_name(run.job_id, run.attempt, 0),
                    self.cfg.namespace,
                    expect=(400, 404),
                    **query,
                )
            except ApiException:
                # 404: no such pod (not created, or purged); 400: not started, no output yet.
                return LogChunk(text="", cursor=cursor or formats.log_cursor(0, 0))
            lines, position = formats.read_timestamped_log(text, after=after, max_bytes=limit)
            full = len(text.encode()) >= budget
            # A window full of lines already read (a burst inside the slack): widen it.
            if cursor is None or lines or not full or budget >= LOG_MAX_WINDOW_BYTES:
                break
            budget *= 4
        if cursor is None:
            truncated = len(text.splitlines()) >= query["tail_lines"] or full
            while len(lines) > 1 and sum(len(x.encode()) for x in lines) > limit:
                lines.pop(0)
                truncated = True
        else:
            truncated = False
        new_cursor = (
            formats.log_cursor(*position) if position else (cursor or formats.log_cursor(0, 0))
        )
        return LogChunk(text="".join(lines), cursor=new_cursor, truncated=truncated)

    def purge_finished(self) -> list[tuple[str, int]]:
        """Delete the pods, Service and NetworkPolicy of runs that finished more than
        ``finished_run_ttl_s`` ago (their logs stay readable until then), and the NetworkPolicy
        of runs none of whose pods exist any more (a cancelled run keeps its policy until its
        pods have stopped: they are isolated through their final checkpoint; looked for at most
        every ``POLICY_SWEEP_INTERVAL_S``). Idempotent;
        returns the runs purged. The watch keeps a tombstone of each deleted pod, so the run's
        state stays known."""
        self.watcher.sync_if_older(5.0)
        with self.watcher._lock:
            pods = list(self.watcher.pods.values())
        now = self._clock()
        runs = m.finished_runs(pods, now=now, older_than_s=self.cfg.finished_run_ttl_s)
        for job_id, attempt in runs:
            self.purge(job_id, attempt)
        last_sweep = self._last_policy_sweep
        if self.cfg.network_policy and (
            last_sweep is None or (now - last_sweep).total_seconds() >= POLICY_SWEEP_INTERVAL_S
        ):
            self._last_policy_sweep = now
            # A purged run's pods are still in this snapshot: purge deleted its policy already.
            with_pods = {
                ((p.get("metadata") or {}).get("labels") or {}).get(m.LABEL_RUN, "") for p in pods
            }
            for run in network.orphan_policy_runs(
                self._list_network_policies(),
                runs_with_pods=with_pods,
                now=now,
                min_age_s=ORPHAN_POLICY_MIN_AGE_S,
            ):
                self._delete_network_policy(run)
        return runs

    # ------------------------------------------------------------------ helpers

    def _list_run(self, job_id: str, attempt: int) -> list[dict[str, Any]]:
        result = self._call(
            "list pods",
            self.core.list_namespaced_pod,
            self.cfg.namespace,
            label_selector=m.run_selector(job_id, attempt),
        )
        return list(self._as_dict(result).get("items") or [])

    def _list_nodes(self, selector: str) -> list[dict[str, Any]]:
        result = self._call("list nodes", self.core.list_node, label_selector=selector or None)
        return list(self._as_dict(result).get("items") or [])

    def _create_service(self, service: dict[str, Any]) -> None:
        name = service["metadata"]["name"]
        try:
            self._call(
                "create service",
                self.core.create_namespaced_service,
                self.cfg.namespace,
                service,
                field_validation="Strict",
                expect=(409,),
            )
            return
        except ApiException:
            pass  # 409 AlreadyExists: check it is ours
        existing = self._as_dict(
            self._call("read service", self.core.read_namespaced_service, name, self.cfg.namespace)
        )
        if (existing["metadata"].get("labels") or {}).get(m.LABEL_RUN) != name:
            raise BackendRejected(f"service {name} exists and was not created for this run")

    def _delete_service(self, job_id: str, attempt: int) -> None:
        if not self.cfg.rendezvous_service:
            return
        name = backend_job_name(job_id, attempt)
        if self.cfg.dry_run:
            self._dry(f"delete service {name}")
            return
        try:
            self._call(
                "delete service",
                self.core.delete_namespaced_service,
                name,
                self.cfg.namespace,
                expect=(404,),
            )
        except ApiException:
            pass  # 404: never created or already gone

    def _create_network_policy(self, policy: dict[str, Any]) -> None:
        name = policy["metadata"]["name"]
        try:
            self._call(
                "create networkpolicy",
                self.networking.create_namespaced_network_policy,
                self.cfg.namespace,
                policy,
                field_validation="Strict",
                expect=(409,),
            )
            return
        except ApiException:
            pass  # 409 AlreadyExists: submitted before; check it is ours and admits only the run
        existing = self._as_dict(
            self._call(
                "read networkpolicy",
                self.networking.read_namespaced_network_policy,
                name,
                self.cfg.namespace,
            )
        )
        # A policy of that name that admits more than the run would quietly undo the isolation.
        if (existing["metadata"].get("labels") or {}).get(m.LABEL_RUN) != name or (
            existing.get("spec") != policy["spec"]
        ):
            raise BackendRejected(f"networkpolicy {name} exists and was not created for this run")

    def _list_network_policies(self) -> list[dict[str, Any]]:
        result = self._call(
            "list networkpolicies",
            self.networking.list_namespaced_network_policy,
            self.cfg.namespace,
            label_selector=m.managed_selector(),
        )
        return list(self._as_dict(result).get("items") or [])

    def _delete_network_policy(self, run: str) -> None:
        if not self.cfg.network_policy:
            return
        if self.cfg.dry_run:
            self._dry(f"delete networkpolicy {run}")
            return
        try:
            self._call(
                "delete networkpolicy",
                self.networking.delete_namespaced_network_policy,
                run,
                self.cfg.namespace,
                expect=(404,),
            )
        except ApiException:
            pass  # 404: never created or already gone

    def _create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        name = pod["metadata"]["name"]
        try:
            created = self._call(
                "create pod",
                self.core.create_namespaced_pod,
                self.cfg.namespace,
                pod,
                field_validation="Strict",
                expect=(409,),
            )
            return self._as_dict(created)
        except ApiException:
            pass  # 409 AlreadyExists: submitted before (maybe by a crashed earlier try)
        try:
            existing = self._as_dict(
                self._call(
                    "read pod",
                    self.core.read_namespaced_pod,
                    name,
                    self.cfg.namespace,
                    expect=(404,),
                )
            )
        except ApiException as exc:
            raise BackendUnavailable(f"pod {name} exists and vanished; retry submit") from exc
        run = pod["metadata"]["labels"][m.LABEL_RUN]
        if (existing["metadata"].get("labels") or {}).get(m.LABEL_RUN) != run:
            raise BackendRejected(f"pod {name} exists and was not created for run {run}")
        return existing

    def _bind(self, pod: dict[str, Any], node: str) -> None:
        name = pod["metadata"]["name"]
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to == node:
            return
        if bound_to:
            raise BackendRejected(f"pod {name} is already bound to {bound_to}, not {node}")
        try:
            resp = self._call(
                "bind pod",
                self.core.create_namespaced_pod_binding,
                name,
                self.cfg.namespace,
                m.binding_manifest(name, self.cfg.namespace, node),
                # The server answers 201 with a Status, which the client cannot read as a
                # V1Binding: take the raw response.
                _preload_content=False,
                expect=(409,),
            )
            resp.read()
            resp.release_conn()
            return
        except ApiException:
            pass  # 409: already bound by an earlier try; check to which node
        current = self._as_dict(
            self._call("read pod", self.core.read_namespaced_pod, name, self.cfg.namespace)
        )
        bound_to = (current.get("spec") or {}).get("nodeName")
        if bound_to != node:
            raise BackendRejected(f"pod {name} is bound to {bound_to!r}, not {node}")

    def _patch_node(
        self, name: str, compute: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> None:
        # Read-modify-write with the node's resourceVersion in the patch: a concurrent writer
        # (kubectl, the node controller) makes it fail with 409 and we recompute.
        for _ in range(5):
            try:
                node = self._as_dict(
                    self._call("read node", self.core.read_node, name, expect=(404,))
                )
            except ApiException as exc:
                raise BackendRejected(f"node {name} does not exist") from exc
            patch = compute(node)
            if patch is None:
                return
            if self.cfg.dry_run:
                self._dry(f"patch node {name}", patch)
                return
            try:
                self._call(
                    "patch node",
                    self.core.patch_node,
                    name,
                    patch,
                    _content_type=_SMP,
                    expect=(409,),
                )
                return
            except ApiException:
                continue  # 409 Conflict: the node changed under us; read it again
        raise BackendUnavailable(f"node {name} kept changing while being patched")


def _phase(pod: Mapping[str, Any]) -> str:
    phase: str = (pod.get("status") or {}).get("phase", "Pending")
    return phase
