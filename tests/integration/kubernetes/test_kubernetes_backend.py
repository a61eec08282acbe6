"""KubernetesBackend end to end over real HTTP, through the official client, against the test API
server (fake_apiserver.py): submit/bind/run/succeed, idempotency, cancel, quarantine, the pod
watch (resume and 410 relist), error mapping and retries, logs, checkpoint requests, dry run."""

from __future__ import annotations

import random
import re
import socket
import time
from datetime import UTC, datetime, timedelta

import pytest

from scheduler.backends import k8s_network as network
from scheduler.backends import kubernetes as backend_module
from scheduler.backends.base import (
    Backend,
    BackendJobSpec,
    BackendJobState,
    BackendRejected,
    BackendUnavailable,
    LiveRun,
    RunRef,
    log_tail,
)
from scheduler.backends.k8s_manifests import pod_manifests
from scheduler.backends.kubernetes import KubernetesBackend
from tests.integration.kubernetes.fake_apiserver import FakeKubeApiServer

NS = "gpuplatform-jobs"

PODS = rf"^/api/v1/namespaces/{NS}/pods$"
CLOCK = datetime(2026, 12, 2, 15, 0, 0, tzinfo=UTC)


def run_ref(job_id: str, attempt: int = 1) -> RunRef:
    """A run of the team the specs here submit for (the backend does not read it)."""
    return RunRef(job_id, attempt, "alice")


def make_spec(job_id="1001", attempt=1, placement=None) -> BackendJobSpec:
    placement = placement or {"gpu-a": (0, 1, 2, 3), "gpu-b": (0, 1, 2, 3)}
    return BackendJobSpec(
        job_id=job_id,
        attempt=attempt,
        name="resnet",
        team="alice",
        image="registry.example/train:2",
        command="python train.py --epochs 3",
        workers=len(placement),
        gpus_per_worker=4,
        placement=placement,
        checkpoint_grace_s=45,
    )


@pytest.fixture
def server():
    with FakeKubeApiServer(watch_hold_s=0.05) as srv:
        srv.add_node("gpu-a", rack="r1")
        srv.add_node("gpu-b", rack="r1")
        srv.add_node(
            "gpu-c",
            rack="r2",
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        )
        yield srv


class Harness:
    def __init__(self, server: FakeKubeApiServer, **config):
        self.sleeps: list[float] = []
        self.backend = KubernetesBackend(
            {"host": server.url, "retry_base_s": 0.05, "request_timeout_s": 5, **config},
            sleep=self.sleeps.append,
            clock=lambda: CLOCK,
            rng=random.Random(7),
        )


@pytest.fixture
def harness(server):
    return Harness(server)


@pytest.fixture
def backend(harness):
    return harness.backend


def state_of(backend, job_id="1001", attempt=1):
    (status,) = backend.poll_jobs([run_ref(job_id, attempt)])
    return status


def test_implements_the_backend_protocol(backend):
    assert isinstance(backend, Backend)
    assert backend.kind == "kubernetes"


def test_submit_binds_each_worker_to_its_node_and_follows_it_to_success(server, backend):
    ref = backend.submit(make_spec())
    assert ref == f"{NS}/gp-1001-a1"
    w0, w1 = server.pod("gp-1001-a1-w0"), server.pod("gp-1001-a1-w1")
    assert (w0["spec"]["nodeName"], w1["spec"]["nodeName"]) == ("gpu-a", "gpu-b")
    assert w0["spec"]["schedulerName"] == "gpuplatform"
    assert w0["spec"]["terminationGracePeriodSeconds"] == 45
    assert w0["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    service = server.services[(NS, "gp-1001-a1")]
    assert service["spec"]["selector"] == {"gpuplatform.io/run": "gp-1001-a1"}
    creates = server.requests_matching("POST", PODS)
    assert [r.query.get("fieldValidation") for r in creates] == ["Strict", "Strict"]
    assert {r.content_type for r in creates} <= {"", "application/json"}
    # Through the client's models and back, nothing of the manifest is lost or added.
    sent = [pod for pod, _ in pod_manifests(make_spec(), backend.cfg)]
    assert [r.body for r in creates] == sent
    bindings = server.requests_matching("POST", r"/binding$")
    assert [r.body["target"]["name"] for r in bindings] == ["gpu-a", "gpu-b"]

    assert state_of(backend).state is BackendJobState.PENDING
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    assert state_of(backend).state is BackendJobState.PENDING  # gang not complete yet
    server.set_pod_phase("gp-1001-a1-w1", "Running")
    running = state_of(backend)
    assert running.state is BackendJobState.RUNNING
    assert running.nodes == ("gpu-a", "gpu-b")
    server.set_pod_phase("gp-1001-a1-w0", "Succeeded")
    assert state_of(backend).state is BackendJobState.RUNNING
    server.set_pod_phase("gp-1001-a1-w1", "Succeeded")
    done = state_of(backend)
    assert (done.state, done.exit_code) == (BackendJobState.SUCCEEDED, 0)


def test_submit_again_is_idempotent(server, backend):
    backend.submit(make_spec())
    before = {name: pod["metadata"]["uid"] for (_, name), pod in server.pods.items()}
    assert backend.submit(make_spec()) == f"{NS}/gp-1001-a1"
    after = {name: pod["metadata"]["uid"] for (_, name), pod in server.pods.items()}
    assert after == before  # the same two pods, not new ones
    assert len(server.requests_matching("POST", r"/binding$")) == 2  # no second binding


def test_submit_interrupted_part_way_is_completed_by_the_next_submit(server, harness):
    backend = harness.backend
    server.fail("POST", r"/gp-1001-a1-w1/binding$", 503, times=10)
    with pytest.raises(BackendUnavailable):
        backend.submit(make_spec())
    assert "nodeName" not in server.pod("gp-1001-a1-w1")["spec"]
    server.faults.clear()
    backend.submit(make_spec())
    assert server.pod("gp-1001-a1-w1")["spec"]["nodeName"] == "gpu-b"
    assert len(server.pods) == 2


def test_lost_answers_are_retried_into_already_exists_and_already_bound(server, backend):
    # The create and the binding both take effect but their answers never arrive: the retries
    # meet 409 AlreadyExists and 409 "already assigned", and both mean "done".
    server.fail("POST", PODS, -1, times=1)
    server.fail("POST", r"/gp-1001-a1-w0/binding$", -1, times=1)
    backend.submit(make_spec())
    assert len(server.requests_matching("POST", PODS)) == 3
    assert server.pod("gp-1001-a1-w0")["spec"]["nodeName"] == "gpu-a"
    assert len(server.pods) == 2


def test_a_pod_bound_elsewhere_is_rejected(server, backend):
    backend.submit(make_spec())
    with pytest.raises(BackendRejected, match="bound"):
        backend.submit(make_spec(placement={"gpu-c": (0,), "gpu-b": (0,)}))


def test_a_foreign_pod_with_our_name_is_not_adopted(server, backend):
    backend.core.create_namespaced_pod(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gp-1001-a1-w0"},
            "spec": {"containers": [{"name": "x", "image": "busybox"}]},
        },
    )
    with pytest.raises(BackendRejected, match="not created for run"):
        backend.submit(make_spec())


def test_node_name_mode_needs_no_binding(server):
    backend = Harness(server, bind_mode="nodeName").backend
    backend.submit(make_spec())
    assert server.pod("gp-1001-a1-w1")["spec"]["nodeName"] == "gpu-b"
    assert server.requests_matching("POST", r"/binding$") == []


# ------------------------------------------------------------------ errors and retries


def test_5xx_then_recovery_is_retried_with_backoff(server, harness):
    server.fail("POST", PODS, 503, times=2)
    harness.backend.submit(make_spec())
    assert len(server.pods) == 2
    assert len(harness.sleeps) == 2
    assert harness.sleeps[0] <= 0.05 and harness.sleeps[1] <= 0.1  # full jitter under the cap


def test_429_honours_retry_after(server, harness):
    server.fail("GET", r"^/api/v1/nodes$", 429, times=1, retry_after=2)
    assert len(harness.backend.list_nodes()) == 3
    assert harness.sleeps == [2.0]


@pytest.mark.parametrize("retry_after", ["-3", "nan"])
def test_an_unusable_retry_after_falls_back_to_backoff(server, retry_after):
    # The real time.sleep: it raises ValueError on a negative or NaN delay.
    backend = KubernetesBackend({"host": server.url, "retry_base_s": 0.01})
    server.fail("GET", r"^/api/v1/nodes$", 429, times=1, retry_after=retry_after)
    assert len(backend.list_nodes()) == 3
    assert len(server.requests_matching("GET", r"^/api/v1/nodes$")) == 2


def test_persistent_outage_is_unavailable_after_the_configured_tries(server, harness):
    server.fail("GET", r"^/api/v1/nodes$", 500, times=100)
    with pytest.raises(BackendUnavailable, match="500"):
        harness.backend.list_nodes()
    assert len(server.requests_matching("GET", r"^/api/v1/nodes$")) == 4
    assert len(harness.sleeps) == 3


def test_connection_refused_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = KubernetesBackend(
        {"host": f"http://127.0.0.1:{port}", "retry_attempts": 2}, sleep=lambda _: None
    )
    with pytest.raises(BackendUnavailable):
        backend.list_nodes()


def test_kubeconfig_transport_with_a_bearer_token(server, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {server.url}\n"
        "users:\n- name: ci\n  user:\n    token: s3cret\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: ci\n"
    )
    backend = KubernetesBackend({"kubeconfig": str(kubeconfig)})
    assert len(backend.list_nodes()) == 3
    assert {r.authorization for r in server.requests} == {"Bearer s3cret"}


def test_missing_kubeconfig_is_rejected(tmp_path):
    backend = KubernetesBackend({"kubeconfig": str(tmp_path / "nope")})
    with pytest.raises(BackendRejected, match="configuration"):
        backend.list_nodes()


def test_dropped_connection_is_retried(server, harness):
    server.fail("GET", r"^/api/v1/nodes$", 0, times=1)
    assert len(harness.backend.list_nodes()) == 3


@pytest.mark.parametrize("status", [400, 403, 422])
def test_refusals_are_rejected_at_once_without_side_effects(server, harness, status):
    server.fail("POST", PODS, status, times=1)
    with pytest.raises(BackendRejected, match=str(status)):
        harness.backend.submit(make_spec())
    assert harness.sleeps == []
    assert server.pods == {}
    assert server.requests_matching("POST", r"/binding$") == []


# ------------------------------------------------------------------ network isolation

POLICY_PATH = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
POLICIES = "^" + re.escape(POLICY_PATH)


def test_each_run_gets_a_network_policy_before_any_of_its_pods(server, backend):
    backend.submit(make_spec())
    policy = server.network_policies[(NS, "gp-1001-a1")]
    run = {"app.kubernetes.io/managed-by": "gpuplatform", "gpuplatform.io/run": "gp-1001-a1"}
    assert policy["spec"] == {
        "podSelector": {"matchLabels": run},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": run}}]}],
    }
    writes = [r for r in server.requests if r.method == "POST"]
    assert re.match(POLICIES, writes[0].path)  # first: no worker is ever open to other runs
    assert writes[0].query.get("fieldValidation") == "Strict"
    backend.submit(make_spec())  # again: the same policy, found and checked
    assert len(server.network_policies) == 1
    assert len(server.requests_matching("GET", POLICIES + "/gp-1001-a1$")) == 1


def test_denied_egress_blocks_reach_the_api_server_in_the_runs_policy(server):
    backend = Harness(server, egress_denied_cidrs=["169.254.169.254/32", "fd00::/8"]).backend
    backend.submit(make_spec())
    policy = server.network_policies[(NS, "gp-1001-a1")]
    run = {"app.kubernetes.io/managed-by": "gpuplatform", "gpuplatform.io/run": "gp-1001-a1"}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == [
        {"to": [{"podSelector": {"matchLabels": run}}]},
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["fd00::/8"]}},
            ]
        },
    ]
    backend.submit(make_spec())  # again: found, and the same spec, so adopted
    assert len(server.pods) == 2


def test_a_lost_policy_answer_is_retried_into_already_exists(server, backend):
    server.fail("POST", POLICIES + "$", -1, times=1)
    backend.submit(make_spec())
    assert len(server.requests_matching("POST", POLICIES + "$")) == 2
    assert list(server.network_policies) == [(NS, "gp-1001-a1")]
    assert len(server.pods) == 2


def test_a_policy_with_our_name_that_admits_more_is_not_adopted(server, backend):
    # Someone with access to the namespace made "the run's policy" admit every pod in it.
    foreign = network.run_network_policy_manifest(make_spec(), backend.cfg)
    foreign["spec"]["ingress"] = [{"from": [{"podSelector": {}}]}]
    assert server.handle("POST", POLICY_PATH, {}, foreign)[0] == 201
    with pytest.raises(BackendRejected, match="networkpolicy gp-1001-a1"):
        backend.submit(make_spec())
    assert server.pods == {}


def test_a_cluster_that_refuses_the_policy_runs_nothing(server, harness):
    # RBAC without networkpolicies (an upgrade that kept the old Role): no unisolated pods.
    server.fail("POST", POLICIES + "$", 403, times=1)
    with pytest.raises(BackendRejected, match="create networkpolicy: HTTP 403"):
        harness.backend.submit(make_spec())
    assert server.pods == {} and server.network_policies == {}


def test_without_network_policy_the_backend_never_asks_for_one(server):
    Harness(server, network_policy=False).backend.submit(make_spec())
    assert len(server.pods) == 2
    assert [r for r in server.requests if re.match(POLICIES, r.path)] == []


def test_policy_goes_with_the_run(server):
    clock = {"now": datetime.now(UTC)}
    backend = KubernetesBackend(
        {"host": server.url, "retry_base_s": 0.05, "finished_run_ttl_s": 600},
        sleep=lambda _s: None,
        clock=lambda: clock["now"],
    )
    backend.submit(make_spec())  # finishes, then purged
    backend.submit(make_spec(job_id="2002", placement={"gpu-a": (4,), "gpu-b": (4,)}))  # cancelled
    for w in (0, 1):
        server.set_pod_phase(f"gp-1001-a1-w{w}", "Succeeded")
        server.set_pod_phase(f"gp-2002-a1-w{w}", "Running")
    backend.cancel(run_ref("2002"))
    # Still stopping (writing its final checkpoint): its workers stay shut to other runs.
    assert backend.purge_finished() == []
    assert sorted(name for _, name in server.network_policies) == ["gp-1001-a1", "gp-2002-a1"]
    for w in (0, 1):
        server.finish_deletion(f"gp-2002-a1-w{w}")
    assert state_of(backend, "2002").state is BackendJobState.CANCELLED  # the loop's poll
    clock["now"] += timedelta(seconds=700)
    assert backend.purge_finished() == [("1001", 1)]
    assert server.network_policies == {}
    assert state_of(backend).state is BackendJobState.SUCCEEDED
    assert backend.purge_finished() == []  # idempotent
    assert len(server.requests_matching("DELETE", POLICIES)) == 2


def test_the_sweep_spares_a_policy_whose_pods_are_being_created(server):
    # Another worker's submit created the policy and is creating the pods: the sweep must not
    # take the policy away from under them.
    clock = {"now": datetime.now(UTC)}
    backend = KubernetesBackend(
        {"host": server.url, "retry_base_s": 0.05},
        sleep=lambda _s: None,
        clock=lambda: clock["now"],
    )
    server.handle(
        "POST", POLICY_PATH, {}, network.run_network_policy_manifest(make_spec(), backend.cfg)
    )
    assert backend.purge_finished() == []
    assert list(server.network_policies) == [(NS, "gp-1001-a1")]
    server.age_network_policy("gp-1001-a1", backend_module.ORPHAN_POLICY_MIN_AGE_S + 1)
    backend.purge_finished()  # looked for at most once a minute: not yet
    assert list(server.network_policies) == [(NS, "gp-1001-a1")]
    clock["now"] += timedelta(seconds=backend_module.POLICY_SWEEP_INTERVAL_S)
    backend.purge_finished()  # older than any submit: its run gave up before creating a pod
    assert server.network_policies == {}


# ------------------------------------------------------------------ cancel


def test_cancel_deletes_the_pods_and_reports_cancelled(server, backend):
    backend.submit(make_spec())
    for w in (0, 1):
        server.set_pod_phase(f"gp-1001-a1-w{w}", "Running")
    assert state_of(backend).state is BackendJobState.RUNNING

    backend.cancel(run_ref("1001"))
    w0 = server.pod("gp-1001-a1-w0")
    assert w0["metadata"]["deletionTimestamp"]  # graceful: SIGTERM, then the checkpoint grace
    assert w0["metadata"]["annotations"]["gpuplatform.io/cancelled"] == "true"
    assert len(server.requests_matching("DELETE", r"/pods/gp-1001-a1-w\d$")) == 2
    assert state_of(backend).state is BackendJobState.CANCELLED

    server.set_pod_phase("gp-1001-a1-w0", "Succeeded")  # the worker checkpointed and exited 0
    for w in (0, 1):
        server.finish_deletion(f"gp-1001-a1-w{w}")
    assert server.pods == {}
    assert state_of(backend).state is BackendJobState.CANCELLED  # remembered from the watch

    assert server.services == {}
    backend.cancel(run_ref("1001"))  # already done: quiet
    backend.cancel(run_ref("does-not-exist", 3))
    assert len(server.requests_matching("DELETE", r"/pods/")) == 2


def test_cancel_leaves_a_finished_run_alone_and_purge_removes_it(server, backend):
    backend.submit(make_spec())
    for w in (0, 1):
        server.set_pod_phase(f"gp-1001-a1-w{w}", "Succeeded")
    backend.cancel(run_ref("1001"))
    assert server.requests_matching("DELETE", r"/pods/") == []
    assert state_of(backend).state is BackendJobState.SUCCEEDED

    backend.purge("1001", 1)
    assert server.pods == {} and server.services == {}
    assert state_of(backend).state is BackendJobState.SUCCEEDED  # the watch saw the final state
    backend.purge("1001", 1)  # idempotent


def test_finished_runs_are_purged_after_their_retention(server):
    clock = {"now": datetime.now(UTC)}
    backend = KubernetesBackend(
        {"host": server.url, "retry_base_s": 0.05, "finished_run_ttl_s": 600},
        sleep=lambda _s: None,
        clock=lambda: clock["now"],
    )
    backend.submit(make_spec())  # finishes
    backend.submit(make_spec(job_id="2002", placement={"gpu-a": (4,), "gpu-b": (4,)}))  # runs
    for w in (0, 1):
        server.set_pod_phase(f"gp-1001-a1-w{w}", "Succeeded")
    server.set_pod_phase("gp-2002-a1-w0", "Succeeded")
    server.set_pod_phase("gp-2002-a1-w1", "Running")
    assert backend.purge_finished() == []  # finished a moment ago: its logs are still wanted
    assert len(server.pods) == 4
    clock["now"] += timedelta(seconds=601)
    assert backend.purge_finished() == [("1001", 1)]
    assert sorted(name for _, name in server.pods) == ["gp-2002-a1-w0", "gp-2002-a1-w1"]
    assert sorted(name for _, name in server.services) == ["gp-2002-a1"]
    assert state_of(backend).state is BackendJobState.SUCCEEDED  # known from the tombstones
    assert backend.purge_finished() == []  # idempotent: nothing left to purge


def test_live_runs_lists_runs_with_a_pod_still_working(server, backend):
    backend.submit(make_spec())
    backend.submit(make_spec(attempt=2))
    backend.submit(make_spec(job_id="2002", placement={"gpu-a": (4, 5, 6, 7)}))
    server.set_pod_phase("gp-1001-a1-w0", "Running")  # w1 still Pending: live too
    assert backend.live_runs("") == [LiveRun("1001", 1), LiveRun("1001", 2), LiveRun("2002", 1)]
    assert backend.live_runs("10") == [LiveRun("1001", 1), LiveRun("1001", 2)]

    backend.cancel(run_ref("1001"))  # being deleted: already stopping, not listed again
    server.set_pod_phase("gp-2002-a1-w0", "Succeeded")  # finished
    backend.watcher.sync()  # the live-run list may otherwise reuse a cache a few seconds old
    assert backend.live_runs("") == [LiveRun("1001", 2)]
    assert server.requests_matching("DELETE", r"/pods/gp-1001-a2") == []


# ------------------------------------------------------------------ quarantine


def test_quarantine_cordons_and_taints_and_release_undoes_both(server, backend):
    original = server.nodes["gpu-c"]["spec"]
    backend.drain_node("gpu-c", "xid 79: GPU fell off the bus")
    spec = server.nodes["gpu-c"]["spec"]
    assert spec["unschedulable"] is True
    assert spec["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "gpuplatform.io/quarantine", "value": "true", "effect": "NoSchedule"},
    ]
    patch = server.requests_matching("PATCH", r"^/api/v1/nodes/gpu-c$")[0]
    assert patch.content_type == "application/strategic-merge-patch+json"
    node = {n.name: n for n in backend.list_nodes()}["gpu-c"]
    assert (node.state, node.reason) == ("drained", "xid 79: GPU fell off the bus")

    backend.drain_node("gpu-c", "xid 79: GPU fell off the bus")  # already quarantined
    assert len(server.requests_matching("PATCH", r"/nodes/")) == 1

    backend.undrain_node("gpu-c")
    assert server.nodes["gpu-c"]["spec"] == original
    assert (
        "gpuplatform.io/quarantine-reason" not in server.nodes["gpu-c"]["metadata"]["annotations"]
    )
    assert {n.name: n.state for n in backend.list_nodes()}["gpu-c"] == "ready"
    backend.undrain_node("gpu-c")  # already released
    assert len(server.requests_matching("PATCH", r"/nodes/")) == 2


def test_quarantine_of_a_busy_node_is_draining(server, backend):
    backend.submit(make_spec())
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    backend.drain_node("gpu-a", "ecc")
    assert {n.name: n.state for n in backend.list_nodes()}["gpu-a"] == "draining"


def test_quarantine_retries_when_the_node_changed_under_it(server, backend):
    # The node controller updates the node between our read and our patch: the patch carries the
    # old resourceVersion, the server answers 409 Conflict, we read again and win the second time.
    server.before("PATCH", r"^/api/v1/nodes/gpu-a$", lambda: server.touch_node("gpu-a"))
    backend.drain_node("gpu-a", "ecc")
    assert server.nodes["gpu-a"]["spec"]["unschedulable"] is True
    assert len(server.requests_matching("PATCH", r"/nodes/gpu-a$")) == 2
    assert server.nodes["gpu-a"]["metadata"]["annotations"]["fake/heartbeat"]  # not overwritten


def test_quarantine_of_an_unknown_node_is_rejected(backend):
    with pytest.raises(BackendRejected, match="does not exist"):
        backend.drain_node("gpu-zz", "ecc")


def test_inventory_from_labels_and_allocatable(server, backend):
    server.add_node("gpu-d", gpus=4, product="NVIDIA-L40S", zone="zone-b", rack="r9")
    server.set_node_ready("gpu-b", False)
    nodes = {n.name: n for n in backend.list_nodes()}
    assert (nodes["gpu-d"].gpus, nodes["gpu-d"].gpu_model) == (4, "NVIDIA-L40S")
    assert (nodes["gpu-d"].zone, nodes["gpu-d"].rack) == ("zone-b", "r9")
    assert nodes["gpu-b"].state == "down"
    selective = Harness(server, node_selector="topology.kubernetes.io/zone=zone-b").backend
    assert [n.name for n in selective.list_nodes()] == ["gpu-d"]


# ------------------------------------------------------------------ the pod watch


def test_watch_resumes_from_the_last_resource_version(server, backend):
    backend.submit(make_spec())
    state_of(backend)  # first poll lists
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    state_of(backend)  # then watches from the list's resourceVersion
    last_rv = server.pod("gp-1001-a1-w0")["metadata"]["resourceVersion"]
    server.set_pod_phase("gp-1001-a1-w1", "Running")
    assert state_of(backend).state is BackendJobState.RUNNING
    watches = [r for r in server.requests_matching("GET", PODS) if r.query.get("watch") == "true"]
    assert len(watches) == 2
    assert int(watches[1].query["resourceVersion"]) >= int(last_rv)
    assert watches[0].query["allowWatchBookmarks"] == "true"
    assert watches[0].query["timeoutSeconds"] == "1"
    assert backend.watcher.relists == 1


@pytest.mark.parametrize("expired_as", ["event", "status"])
def test_watch_410_gone_relists_and_loses_nothing(expired_as):
    with FakeKubeApiServer(watch_hold_s=0.05, expired_as=expired_as) as server:
        for name in ("gpu-a", "gpu-b"):
            server.add_node(name)
        backend = Harness(server).backend
        backend.submit(make_spec())
        backend.submit(make_spec(job_id="1002", placement={"gpu-a": (4,)}))
        for w in (0, 1):
            server.set_pod_phase(f"gp-1001-a1-w{w}", "Running")
        server.set_pod_phase("gp-1002-a1-w0", "Running")
        assert state_of(backend).state is BackendJobState.RUNNING
        # Our resourceVersion falls out of the server's history while changes happen.
        server.compact()
        for w in (0, 1):
            server.set_pod_phase(f"gp-1001-a1-w{w}", "Succeeded")
        server.delete_pod_now("gp-1002-a1-w0")
        server.compact()
        first, second = backend.poll_jobs([run_ref("1001"), run_ref("1002")])
        assert backend.watcher.relists == 2
        assert first.state is BackendJobState.SUCCEEDED
        # Seen gone by comparing the relist with the cache: deleted behind our back.
        assert (second.state, second.reason) == (
            BackendJobState.FAILED,
            "worker 0: pod deleted outside the platform",
        )


def test_an_unreadable_watch_event_relists_instead_of_guessing(server, backend):
    backend.submit(make_spec())
    state_of(backend)
    server.next_watch_prefix = b'{"type": "MODIFIED", "object": {"metadata": \n'
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    server.set_pod_phase("gp-1001-a1-w1", "Running")
    assert state_of(backend).state is BackendJobState.RUNNING
    assert backend.watcher.relists == 2


def test_node_loss_is_node_failed(server, backend):
    backend.submit(make_spec())
    for w in (0, 1):
        server.set_pod_phase(f"gp-1001-a1-w{w}", "Running")
    server.set_node_ready("gpu-b", False)
    status = state_of(backend)
    assert status.state is BackendJobState.NODE_FAILED
    assert "gpu-b" in status.reason
    server.set_node_ready("gpu-b", True)
    server.remove_node("gpu-a")
    assert "gpu-a is gone" in state_of(backend).reason


def test_failed_worker_reports_its_exit_code(server, backend):
    backend.submit(make_spec())
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    server.set_pod_phase("gp-1001-a1-w1", "Failed", exit_code=137)
    status = state_of(backend)
    assert (status.state, status.exit_code) == (BackendJobState.FAILED, 137)


def test_unknown_runs_are_unknown(backend):
    assert state_of(backend, "nope", 1).state is BackendJobState.UNKNOWN
    assert backend.poll_jobs([]) == []


# ------------------------------------------------------------------ logs, checkpoint, dry run


@pytest.fixture
def clocked_backend(server):
    """A backend on the real clock: following a log compares its clock with the server's."""
    return KubernetesBackend(
        {"host": server.url, "retry_base_s": 0.05, "request_timeout_s": 5},
        sleep=lambda _s: None,
    )


def test_log_tail_and_follow_read_worker_zero_by_timestamp(server, clocked_backend):
    backend = clocked_backend
    backend.submit(make_spec())
    empty = backend.read_log(run_ref("1001"))  # container still waiting: 400 from the server
    assert empty.text == ""
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    base = time.time_ns() - 5_000_000_000
    server.write_log("gp-1001-a1-w0", "".join(f"step {i}\n" for i in range(500)), at_ns=base)
    assert log_tail(backend, run_ref("1001"), lines=2) == "step 498\nstep 499"
    (req,) = server.requests_matching("GET", r"/gp-1001-a1-w0/log$")[1:2]
    assert req.query["container"] == "worker" and req.query["timestamps"] == "true"
    assert "tailLines" in req.query

    # Follow from the start: 500 lines sharing one timestamp come in chunks, none twice.
    chunk = backend.read_log(run_ref("1001"), cursor="k8s-0-0", limit_bytes=1000)
    seen = chunk.text.splitlines()
    while True:
        chunk = backend.read_log(run_ref("1001"), cursor=chunk.cursor, limit_bytes=1000)
        if not chunk.text:
            break
        seen += chunk.text.splitlines()
    assert seen == [f"step {i}" for i in range(500)]
    # Lines printed later arrive after the cursor, and only they.
    server.write_log("gp-1001-a1-w0", "step 500\nstep 501\n")
    more = backend.read_log(run_ref("1001"), cursor=chunk.cursor)
    assert more.text == "step 500\nstep 501\n"
    assert backend.read_log(run_ref("1001"), cursor=more.cursor).text == ""
    follow = server.requests_matching("GET", r"/gp-1001-a1-w0/log$")[-1]
    assert 1 <= int(follow.query["sinceSeconds"]) <= 1 + backend_module.LOG_CLOCK_SLACK_S
    assert backend.read_log(run_ref("missing")).text == ""
    with pytest.raises(BackendRejected, match="not a log cursor"):
        backend.read_log(run_ref("1001"), cursor="12; DROP")


def test_follow_gets_past_a_burst_of_lines_already_read(server, clocked_backend):
    # More output within the clock-skew slack than one window holds, all of it read already:
    # the window is widened instead of answering "nothing new" for ever.
    backend = clocked_backend
    backend.submit(make_spec())
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    now = time.time_ns()
    server.write_log("gp-1001-a1-w0", "x" * 200 + "\n" * 1, at_ns=now - 2_000_000_000)
    burst = "".join(f"burst {i}\n" for i in range(300))
    server.write_log("gp-1001-a1-w0", burst, at_ns=now - 1_000_000_000)
    cursor = "k8s-0-0"
    text = ""
    for _ in range(40):
        chunk = backend.read_log(run_ref("1001"), cursor=cursor, limit_bytes=256)
        text += chunk.text
        cursor = chunk.cursor
    assert text.count("burst") == 300
    server.write_log("gp-1001-a1-w0", "after the burst\n")
    assert (
        backend.read_log(run_ref("1001"), cursor=cursor, limit_bytes=256).text
        == "after the burst\n"
    )


def test_checkpoint_annotates_running_workers(server, backend):
    backend.submit(make_spec())
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    server.set_pod_phase("gp-1001-a1-w1", "Succeeded")
    backend.checkpoint(run_ref("1001"))
    w0, w1 = server.pod("gp-1001-a1-w0"), server.pod("gp-1001-a1-w1")
    key = "gpuplatform.io/checkpoint-request"
    assert w0["metadata"]["annotations"][key] == "20261202T150000.000000Z"
    assert key not in w1["metadata"]["annotations"]  # finished workers are not bothered
    (patch,) = server.requests_matching("PATCH", r"/pods/")
    assert patch.content_type == "application/strategic-merge-patch+json"
    backend.checkpoint(
        run_ref("1001")
    )  # asked again within checkpoint_min_interval_s: no new request
    assert len(server.requests_matching("PATCH", r"/pods/")) == 1
    backend.checkpoint(run_ref("unknown"))  # nothing to do, no error


def test_checkpoint_is_asked_again_after_the_minimum_interval(server):
    times = iter([CLOCK, CLOCK + timedelta(seconds=61)])
    backend = KubernetesBackend({"host": server.url}, clock=lambda: next(times))
    backend.submit(make_spec())
    server.set_pod_phase("gp-1001-a1-w0", "Running")
    backend.checkpoint(run_ref("1001"))
    backend.checkpoint(run_ref("1001"))
    annotations = server.pod("gp-1001-a1-w0")["metadata"]["annotations"]
    assert annotations["gpuplatform.io/checkpoint-request"] == "20261202T150101.000000Z"


def test_dry_run_reads_but_never_writes(server):
    backend = Harness(server, dry_run=True).backend
    assert backend.submit(make_spec()) == f"{NS}/gp-1001-a1"
    backend.drain_node("gpu-a", "ecc")
    backend.cancel(run_ref("1001"))
    writes = [r for r in server.requests if r.method in ("POST", "PATCH", "DELETE")]
    assert writes == []
    assert server.pods == {}
    assert "unschedulable" not in server.nodes["gpu-a"]["spec"]
