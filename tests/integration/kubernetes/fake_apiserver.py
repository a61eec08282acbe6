"""TEST TOOL: a small in-process Kubernetes API server for driving the real client over HTTP.

Not a product component and not a Kubernetes implementation: it serves exactly the core/v1
endpoints the Kubernetes backend uses, with the response shapes, status codes and ``Status``
bodies a real kube-apiserver gives, so that ``KubernetesBackend`` can be exercised end to end
through the official ``kubernetes`` client on 127.0.0.1 with a random port:

- pods: create (201; 409 AlreadyExists; 422 Invalid when the body fails the official OpenAPI
  schema, strict), get, list and watch (label selectors; chunked newline-delimited events;
  bookmarks; 410 Expired as an ERROR event or as an HTTP status once history is compacted),
  strategic-merge patch, graceful delete (``deletionTimestamp`` first, gone when the test says
  the kubelet finished), binding (201 + ``Status``; 409 when already bound), log (400 while the
  container is waiting; ``timestamps``, ``sinceSeconds``, ``tailLines`` and ``limitBytes`` applied
  in the kubelet's order: since, then tail, then the byte limit; timestamps in Go's RFC3339Nano,
  trailing zeros dropped);
- services: create (201; 409; 422 as for pods), get, delete;
- networkpolicies (networking.k8s.io/v1): create (201 with ``generation``; 409; 422 as for
  pods), get, list (label selectors), delete (200 with a ``Status``, as for every kind whose
  registry does not return the deleted object; 404);
- nodes: get, list (label selectors), strategic-merge patch with the ``resourceVersion``
  precondition (409 Conflict), schema-validated result.

The test drives the "cluster" side through methods: add nodes, move pod phases, finish
deletions, flip node readiness, compact watch history, inject faults (an HTTP status N times, or
a dropped connection). Every request is recorded for assertions.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
from referencing import Registry, Resource

_POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/(binding|log))?$")
_SERVICE_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$")
_NODE_PATH = re.compile(r"^/api/v1/nodes(?:/([^/]+))?$")
_POLICY_PATH = re.compile(
    r"^/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/networkpolicies(?:/([^/]+))?$"
)
_PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rfc3339_nano(ns: int) -> str:
    """Go's time.RFC3339Nano, as the kubelet prints log timestamps: trailing zeros dropped."""
    whole = datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{ns % 1_000_000_000:09d}".rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A ``Status`` object as the API server returns it with an error."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 300 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge for the fields this server accepts patches on (maps merge, lists replace,
    null deletes), which is also JSON merge patch (RFC 7386)."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merge_patch(out.get(key) or {}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int  # 0 = drop without handling; -1 = handle, then drop the answer; -2 = callback
    remaining: int
    retry_after: int | str | None = None
    callback: Any = None


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    authorization: str = ""


class FakeKubeApiServer:
    """See the module docstring. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        validate_versions: tuple[str, ...] = ("1.34", "1.37"),
        watch_hold_s: float = 0.15,
        graceful_delete: bool = True,
        expired_as: str = "event",  # "event" (200 + ERROR event) | "status" (HTTP 410)
    ) -> None:
        self.validate_versions = validate_versions
        self.watch_hold_s = watch_hold_s
        self.graceful_delete = graceful_delete
        self.expired_as = expired_as
        self.cond = threading.Condition()
        self.rv = 1000
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.network_policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted_rv = 0
        self.faults: list[Fault] = []
        self.requests: list[Recorded] = []
        # (namespace, pod) -> [(time in ns since the epoch, line with its newline)]
        self.logs: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self.next_watch_prefix: bytes = b""  # raw bytes the next watch stream starts with
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeKubeApiServer:
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ cluster-side controls

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, kind: str, pod: dict[str, Any]) -> None:
        self.events.append((self.rv, kind, copy.deepcopy(pod)))
        self.cond.notify_all()

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        product: str = "NVIDIA-H100-80GB-HBM3",
        zone: str = "zone-a",
        rack: str = "",
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        ready: bool = True,
        unschedulable: bool = False,
    ) -> None:
        all_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "topology.kubernetes.io/zone": zone,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus),
        }
        if rack:
            all_labels["gpuplatform.io/rack"] = rack
        all_labels.update(labels or {})
        with self.cond:
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": self._bump(),
                    "creationTimestamp": _now(),
                    "labels": all_labels,
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {"providerID": f"fake://{name}"},
                "status": {
                    "capacity": {"cpu": "96", "memory": "1056Gi", "nvidia.com/gpu": str(gpus)},
                    "allocatable": {"cpu": "95", "memory": "1050Gi", "nvidia.com/gpu": str(gpus)},
                    "conditions": [_ready_condition(ready, "")],
                    "nodeInfo": _node_info(),
                },
            }
            if taints:
                node["spec"]["taints"] = taints
            if unschedulable:
                node["spec"]["unschedulable"] = True
            self.nodes[name] = node

    def set_node_ready(self, name: str, ready: bool, message: str = "") -> None:
        with self.cond:
            node = self.nodes[name]
            node["status"]["conditions"] = [_ready_condition(ready, message)]
            node["metadata"]["resourceVersion"] = self._bump()

    def remove_node(self, name: str) -> None:
        with self.cond:
            del self.nodes[name]

    def touch_node(self, name: str) -> None:
        """Change the node behind a client's back (as the node controller does every few s)."""
        with self.cond:
            node = self.nodes[name]
            node["metadata"]["annotations"]["fake/heartbeat"] = str(self.rv)
            node["metadata"]["resourceVersion"] = self._bump()

    def pod(self, name: str, namespace: str = "gpuplatform-jobs") -> dict[str, Any]:
        with self.cond:
            return copy.deepcopy(self.pods[(namespace, name)])

    def set_pod_phase(
        self,
        name: str,
        phase: str,
        *,
        namespace: str = "gpuplatform-jobs",
        exit_code: int | None = None,
        reason: str | None = None,
        message: str | None = None,
        waiting_reason: str | None = None,
    ) -> None:
        """What the kubelet reports: phase, container state, and pod-level reason."""
        with self.cond:
            pod = self.pods[(namespace, name)]
            container = pod["spec"]["containers"][0]
            status = pod.setdefault("status", {})
            status["phase"] = phase
            if reason:
                status["reason"] = reason
            if message:
                status["message"] = message
            state: dict[str, Any]
            if phase == "Running":
                state = {"running": {"startedAt": _now()}}
                status["startTime"] = status.get("startTime") or _now()
                status["podIP"] = f"10.0.0.{len(self.pods) % 250 + 2}"
            elif phase in ("Succeeded", "Failed"):
                code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
                state = {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "startedAt": _now(),
                        "finishedAt": _now(),
                    }
                }
            else:
                state = {"waiting": {"reason": waiting_reason or "ContainerCreating"}}
            status["containerStatuses"] = [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "started": phase == "Running",
                    "state": state,
                }
            ]
            pod["metadata"]["resourceVersion"] = self._bump()
            self._emit("MODIFIED", pod)

    def write_log(
        self, name: str, text: str, at_ns: int | None = None, namespace: str = "gpuplatform-jobs"
    ) -> None:
        """The container printed ``text``: each line gets ``at_ns`` (default: now) as its
        timestamp, as the container runtime records it."""
        with self.cond:
            lines = self.logs.setdefault((namespace, name), [])
            for line in text.splitlines(keepends=True):
                lines.append((time.time_ns() if at_ns is None else at_ns, line))

    def add_pod_condition(
        self, name: str, condition: dict[str, str], namespace: str = "gpuplatform-jobs"
    ) -> None:
        with self.cond:
            pod = self.pods[(namespace, name)]
            pod["status"].setdefault("conditions", []).append(
                {"lastTransitionTime": _now(), **condition}
            )
            pod["metadata"]["resourceVersion"] = self._bump()
            self._emit("MODIFIED", pod)

    def finish_deletion(self, name: str, namespace: str = "gpuplatform-jobs") -> None:
        """The kubelet confirmed the container stopped: the pod object goes away."""
        with self.cond:
            pod = self.pods.pop((namespace, name))
            pod["metadata"]["resourceVersion"] = self._bump()
            self._emit("DELETED", pod)

    def delete_pod_now(self, name: str, namespace: str = "gpuplatform-jobs") -> None:
        """Someone else (kubectl, the pod GC) removes a pod."""
        self.finish_deletion(name, namespace)

    def compact(self) -> None:
        """Forget watch history (etcd compaction): watches from any rv seen so far get 410."""
        with self.cond:
            self.compacted_rv = self.rv + 1
            self.events.clear()

    def fail(
        self,
        method: str,
        path_pattern: str,
        status: int,
        times: int = 1,
        retry_after: int | str | None = None,
    ) -> None:
        """The next ``times`` matching requests get ``status`` (0 = connection dropped)."""
        with self.cond:
            self.faults.append(
                Fault(method.upper(), re.compile(path_pattern), status, times, retry_after)
            )

    def before(self, method: str, path_pattern: str, callback: Any, times: int = 1) -> None:
        """Run ``callback()`` just before the next ``times`` matching requests are handled (to
        change the cluster between a client's read and its write)."""
        with self.cond:
            self.faults.append(
                Fault(method.upper(), re.compile(path_pattern), -2, times, None, callback)
            )

    def requests_matching(self, method: str, path_pattern: str) -> list[Recorded]:
        pattern = re.compile(path_pattern)
        with self.cond:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    # ------------------------------------------------------------------ request handling

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.remaining > 0 and fault.method == method and fault.path.search(path):
                fault.remaining -= 1
                return fault
        return None

    def _invalid(self, obj: dict[str, Any]) -> str:
        for version in self.validate_versions:
            validator = _strict_validator(version, obj.get("kind", ""), obj.get("apiVersion", ""))
            error = next(iter(validator.iter_errors(obj)), None)
            if error is not None:
                return f"{version}: {error.message} at {list(error.absolute_path)}"
        return ""

    def handle(self, method: str, path: str, query: dict[str, str], body: Any):
        """Returns (status, json body) or ("watch", params) for a streaming watch."""
        if m := _NODE_PATH.match(path):
            return self._nodes(method, m.group(1), query, body)
        if m := _SERVICE_PATH.match(path):
            return self._services(method, m.group(1), m.group(2), body)
        if m := _POLICY_PATH.match(path):
            return self._network_policies(method, m.group(1), m.group(2), query, body)
        if m := _POD_PATH.match(path):
            return self._pods(method, m.group(1), m.group(2), m.group(3), query, body)
        return 404, status_body(404, "NotFound", f"the server could not find {path}")

    def _nodes(self, method: str, name: str | None, query: dict[str, str], body: Any):
        with self.cond:
            if name is None and method == "GET":
                items = [
                    copy.deepcopy(n)
                    for n in self.nodes.values()
                    if selector_matches(query.get("labelSelector", ""), n["metadata"]["labels"])
                ]
                return 200, {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items,
                }
            node = self.nodes.get(name or "")
            if node is None:
                return 404, status_body(
                    404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes"
                )
            if method == "GET":
                return 200, copy.deepcopy(node)
            if method == "PATCH":
                wanted = ((body or {}).get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != node["metadata"]["resourceVersion"]:
                    return 409, status_body(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                        "modified; please apply your changes to the latest version and try again",
                        name=name,
                        kind="nodes",
                    )
                patched = merge_patch(node, body)
                patched["metadata"]["resourceVersion"] = node["metadata"]["resourceVersion"]
                if problem := self._invalid(patched):
                    return 422, status_body(422, "Invalid", f'Node "{name}" is invalid: {problem}')
                patched["metadata"]["resourceVersion"] = self._bump()
                self.nodes[name] = patched
                return 200, copy.deepcopy(patched)
        return 405, status_body(405, "MethodNotAllowed", f"{method} not allowed")

    def _services(self, method: str, ns: str, name: str | None, body: Any):
        with self.cond:
            if name is None and method == "POST":
                if not isinstance(body, dict) or body.get("kind") != "Service":
                    return 400, status_body(400, "BadRequest", "body is not a Service")
                name = body["metadata"]["name"]
                if problem := self._invalid(body):
                    return 422, status_body(
                        422, "Invalid", f'Service "{name}" is invalid: {problem}'
                    )
                if (ns, name) in self.services:
                    return 409, status_body(
                        409,
                        "AlreadyExists",
                        f'services "{name}" already exists',
                        name=name,
                        kind="services",
                    )
                service = copy.deepcopy(body)
                service["metadata"].update(
                    namespace=ns,
                    uid=str(uuid.uuid4()),
                    creationTimestamp=_now(),
                    resourceVersion=self._bump(),
                )
                service["spec"]["clusterIPs"] = ["None"]
                service["spec"].setdefault("type", "ClusterIP")
                service["status"] = {"loadBalancer": {}}
                self.services[(ns, name)] = service
                return 201, copy.deepcopy(service)
            service = self.services.get((ns, name or ""))
            if service is None:
                return 404, status_body(
                    404, "NotFound", f'services "{name}" not found', name=name, kind="services"
                )
            if method == "GET":
                return 200, copy.deepcopy(service)
            if method == "DELETE":
                del self.services[(ns, name)]
                return 200, copy.deepcopy(service)
        return 405, status_body(405, "MethodNotAllowed", f"{method} not allowed")

    def _network_policies(
        self, method: str, ns: str, name: str | None, query: dict[str, str], body: Any
    ):
        kind = "networkpolicies"
        with self.cond:
            if name is None and method == "POST":
                if not isinstance(body, dict) or body.get("kind") != "NetworkPolicy":
                    return 400, status_body(400, "BadRequest", "body is not a NetworkPolicy")
                name = (body.get("metadata") or {}).get("name")
                if body["metadata"].get("namespace", ns) != ns:
                    return 400, status_body(
                        400,
                        "BadRequest",
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request",
                    )
                if problem := self._invalid(body):
                    return 422, status_body(
                        422,
                        "Invalid",
                        f'NetworkPolicy.networking.k8s.io "{name}" is invalid: {problem}',
                        name=name,
                        group="networking.k8s.io",
                        kind="NetworkPolicy",
                    )
                if (ns, name) in self.network_policies:
                    return 409, status_body(
                        409,
                        "AlreadyExists",
                        f'networkpolicies.networking.k8s.io "{name}" already exists',
                        name=name,
                        group="networking.k8s.io",
                        kind=kind,
                    )
                policy = copy.deepcopy(body)
                policy["metadata"].update(
                    namespace=ns,
                    uid=str(uuid.uuid4()),
                    creationTimestamp=_now(),
                    resourceVersion=self._bump(),
                    generation=1,
                )
                self.network_policies[(ns, name)] = policy
                return 201, copy.deepcopy(policy)
            if name is None and method == "GET":
                items = [
                    copy.deepcopy(p)
                    for (pns, _), p in self.network_policies.items()
                    if pns == ns
                    and selector_matches(
                        query.get("labelSelector", ""), p["metadata"].get("labels") or {}
                    )
                ]
                return 200, {
                    "kind": "NetworkPolicyList",
                    "apiVersion": "networking.k8s.io/v1",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items,
                }
            policy = self.network_policies.get((ns, name or ""))
            if policy is None:
                return 404, status_body(
                    404,
                    "NotFound",
                    f'networkpolicies.networking.k8s.io "{name}" not found',
                    name=name,
                    group="networking.k8s.io",
                    kind=kind,
                )
            if method == "GET":
                return 200, copy.deepcopy(policy)
            if method == "DELETE":
                del self.network_policies[(ns, name)]
                self._bump()
                # What the registry answers for a kind it does not return on delete.
                return 200, {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": name,
                        "group": "networking.k8s.io",
                        "kind": kind,
                        "uid": policy["metadata"]["uid"],
                    },
                }
        return 405, status_body(405, "MethodNotAllowed", f"{method} not allowed")

    def age_network_policy(self, name: str, seconds: float, namespace: str = "gpuplatform-jobs"):
        """Move a policy's ``creationTimestamp`` ``seconds`` into the past."""
        with self.cond:
            meta = self.network_policies[(namespace, name)]["metadata"]
            created = datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
            meta["creationTimestamp"] = (created - timedelta(seconds=seconds)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )

    def _pods(self, method, ns, name, sub, query, body):
        with self.cond:
            if name is None and method == "POST":
                return self._create_pod(ns, body)
            if name is None and method == "GET":
                if query.get("watch") in ("true", "1"):
                    return "watch", (ns, query)
                items = [
                    copy.deepcopy(p)
                    for (pns, _), p in self.pods.items()
                    if pns == ns
                    and selector_matches(
                        query.get("labelSelector", ""), p["metadata"].get("labels") or {}
                    )
                ]
                return 200, {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items,
                }
            pod = self.pods.get((ns, name))
            if pod is None:
                return 404, status_body(
                    404, "NotFound", f'pods "{name}" not found', name=name, kind="pods"
                )
            if sub == "binding" and method == "POST":
                return self._bind(pod, body)
            if sub == "log" and method == "GET":
                return self._log(pod, query)
            if sub is None and method == "GET":
                return 200, copy.deepcopy(pod)
            if sub is None and method == "PATCH":
                patched = merge_patch(pod, body)
                if problem := self._invalid(patched):
                    return 422, status_body(422, "Invalid", f'Pod "{name}" is invalid: {problem}')
                patched["metadata"]["resourceVersion"] = self._bump()
                self.pods[(ns, name)] = patched
                self._emit("MODIFIED", patched)
                return 200, copy.deepcopy(patched)
            if sub is None and method == "DELETE":
                return self._delete(pod, query)
        return 405, status_body(405, "MethodNotAllowed", f"{method} not allowed")

    def _create_pod(self, ns: str, body: Any):
        if not isinstance(body, dict) or body.get("kind") != "Pod":
            return 400, status_body(400, "BadRequest", "body is not a Pod")
        name = (body.get("metadata") or {}).get("name")
        if body["metadata"].get("namespace", ns) != ns:
            return 400, status_body(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if problem := self._invalid(body):
            return 422, status_body(
                422, "Invalid", f'Pod "{name}" is invalid: {problem}', name=name, kind="Pod"
            )
        if (ns, name) in self.pods:
            return 409, status_body(
                409, "AlreadyExists", f'pods "{name}" already exists', name=name, kind="pods"
            )
        pod = copy.deepcopy(body)
        meta = pod["metadata"]
        meta.update(
            namespace=ns,
            uid=str(uuid.uuid4()),
            creationTimestamp=_now(),
            resourceVersion=self._bump(),
        )
        spec = pod["spec"]
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("serviceAccountName", "default")
        conditions = []
        if spec.get("nodeName"):
            conditions.append(
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}
            )
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort", "conditions": conditions}
        self.pods[(ns, name)] = pod
        self._emit("ADDED", pod)
        return 201, copy.deepcopy(pod)

    def _bind(self, pod: dict[str, Any], body: Any):
        name = pod["metadata"]["name"]
        if not isinstance(body, dict) or body.get("kind") != "Binding":
            return 400, status_body(400, "BadRequest", "body is not a Binding")
        if problem := self._invalid(body):
            return 422, status_body(422, "Invalid", f"Binding is invalid: {problem}")
        if pod["spec"].get("nodeName"):
            return 409, status_body(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already '
                f'assigned to node "{pod["spec"]["nodeName"]}"',
                name=name,
                kind="pods/binding",
            )
        pod["spec"]["nodeName"] = body["target"]["name"]
        pod["status"].setdefault("conditions", []).append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}
        )
        pod["metadata"]["resourceVersion"] = self._bump()
        self._emit("MODIFIED", pod)
        return 201, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _log(self, pod: dict[str, Any], query: dict[str, str]):
        name = pod["metadata"]["name"]
        statuses = pod["status"].get("containerStatuses") or []
        started = any("running" in s["state"] or "terminated" in s["state"] for s in statuses)
        if not started:
            return 400, status_body(
                400,
                "BadRequest",
                f'container "worker" in pod "{name}" is waiting to start: ContainerCreating',
            )
        lines = list(self.logs.get((pod["metadata"]["namespace"], name), []))
        if "sinceSeconds" in query:
            since_ns = time.time_ns() - int(query["sinceSeconds"]) * 1_000_000_000
            lines = [(ns, line) for ns, line in lines if ns >= since_ns]
        tail = int(query.get("tailLines", "-1") or -1)
        if tail >= 0:
            lines = lines[-tail:] if tail else []
        stamped = query.get("timestamps") == "true"
        text = "".join(f"{_rfc3339_nano(ns)} {line}" if stamped else line for ns, line in lines)
        if "limitBytes" in query:
            text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
        return 200, text

    def _delete(self, pod: dict[str, Any], query: dict[str, str]):
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        grace = int(
            query.get("gracePeriodSeconds", pod["spec"].get("terminationGracePeriodSeconds", 30))
        )
        running = pod["spec"].get("nodeName") and pod["status"].get("phase") not in (
            "Succeeded",
            "Failed",
        )
        if self.graceful_delete and running and grace > 0:
            if not pod["metadata"].get("deletionTimestamp"):
                pod["metadata"]["deletionTimestamp"] = _now()
                pod["metadata"]["deletionGracePeriodSeconds"] = grace
                pod["metadata"]["resourceVersion"] = self._bump()
                self._emit("MODIFIED", pod)
            return 200, copy.deepcopy(pod)
        del self.pods[(ns, name)]
        pod["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", pod)
        return 200, copy.deepcopy(pod)

    def watch_events(self, ns: str, query: dict[str, str]):
        """Yield watch event dicts for one watch request, honouring the hold time."""
        selector = query.get("labelSelector", "")
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + min(timeout, self.watch_hold_s)
        sent = since
        while True:
            with self.cond:
                batch = [
                    (rv, kind, pod)
                    for rv, kind, pod in self.events
                    if rv > sent
                    and pod["metadata"]["namespace"] == ns
                    and selector_matches(selector, pod["metadata"].get("labels") or {})
                ]
                if not batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cond.wait(left)
                    continue
            for rv, kind, pod in batch:
                yield {"type": kind, "object": pod}
                sent = max(sent, rv)
        if query.get("allowWatchBookmarks") == "true":
            with self.cond:
                current = str(self.rv)
            yield {
                "type": "BOOKMARK",
                "object": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": current},
                },
            }

    def watch_expired(self, query: dict[str, str]) -> bool:
        since = int(query.get("resourceVersion") or 0)
        with self.cond:
            return 0 < since < self.compacted_rv


@functools.lru_cache(maxsize=64)
def _strict_validator(version: str, kind: str, api_version: str) -> jsonschema.Validator:
    """The official schema of ``kind`` for Kubernetes ``version`` (strict: no unknown fields), as
    shipped by kubernetes-validate; cached, because loading its definitions takes ~20 ms."""
    full = next(v for v in kubernetes_validate.utils.all_versions() if v.startswith(version + "."))
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    folder = root / f"v{full}-local-strict"
    schema = json.loads((folder / f"{kind.lower()}-{group}.json").read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _ready_condition(ready: bool, message: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True" if ready else "Unknown",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "message": message
        or ("kubelet is posting ready status" if ready else "Kubelet stopped posting node status."),
        "lastHeartbeatTime": _now(),
        "lastTransitionTime": _now(),
    }


def _node_info() -> dict[str, str]:
    return {
        "machineID": "0",
        "systemUUID": "0",
        "bootID": "0",
        "kernelVersion": "6.1.0",
        "osImage": "Debian GNU/Linux 12 (bookworm)",
        "containerRuntimeVersion": "containerd://1.7.0",
        "kubeletVersion": "v1.34.0",
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One write for headers, one for the body: without this, Nagle + delayed ACK add ~40 ms.
    disable_nagle_algorithm = True
    api: FakeKubeApiServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type") or ""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._send(400, status_body(400, "BadRequest", "body is not JSON"))
            return
        method = self.command
        with self.api.cond:
            self.api.requests.append(
                Recorded(
                    method,
                    parts.path,
                    query,
                    content_type,
                    body,
                    self.headers.get("Authorization") or "",
                )
            )
            fault = self.api._take_fault(method, parts.path)
        if fault is not None and fault.status == -2:
            fault.callback()
            fault = None
        if fault is not None and fault.status == -1:
            # The request takes effect but the answer is lost (a timeout, a proxy reset).
            self.api.handle(method, parts.path, query, body)
            self._drop()
            return
        if fault is not None:
            if fault.status == 0:
                self._drop()
                return
            headers = (
                {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            )
            reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}
            self._send(
                fault.status,
                status_body(fault.status, reason.get(fault.status, "Failure"), "injected fault"),
                headers,
            )
            return
        if method == "PATCH" and content_type.split(";")[0] not in _PATCH_TYPES:
            self._send(
                415,
                status_body(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: {', '.join(_PATCH_TYPES)}",
                ),
            )
            return
        if method == "POST" and content_type and not content_type.startswith("application/json"):
            self._send(415, status_body(415, "UnsupportedMediaType", "unsupported media type"))
            return
        result = self.api.handle(method, parts.path, query, body)
        if result[0] == "watch":
            ns, params = result[1]
            self._watch(ns, params)
            return
        self._send(*result)

    do_GET = do_POST = do_PATCH = do_DELETE = _dispatch

    def _drop(self) -> None:
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        if isinstance(body, str):
            data, ctype = body.encode(), "text/plain"
        else:
            data, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _watch(self, ns: str, query: dict[str, str]) -> None:
        expired = self.api.watch_expired(query)
        too_old = status_body(
            410,
            "Expired",
            f"too old resource version: {query.get('resourceVersion')} ({self.api.compacted_rv})",
        )
        if expired and self.api.expired_as == "status":
            self._send(410, too_old)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = (
            [{"type": "ERROR", "object": too_old}] if expired else self.api.watch_events(ns, query)
        )
        try:
            with self.api.cond:
                prefix, self.api.next_watch_prefix = self.api.next_watch_prefix, b""
            if prefix:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(prefix), prefix))
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
