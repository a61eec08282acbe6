"""How the Kubernetes backend reads nodes and pods: inventory and per-run state aggregation."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.backends import k8s_manifests as m
from scheduler.backends.base import BackendJobSpec, BackendJobState

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CFG = m.KubernetesConfig.from_mapping(
    {"rack_label": "example.com/rack", "node_not_ready_grace_s": 60}
)


def k8s_node(name="gpu-a", *, ready=True, gpus="8", labels=None, spec=None, annotations=None):
    return {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "topology.kubernetes.io/zone": "eu-1b",
                "example.com/rack": "r07",
                "nvidia.com/gpu.clique": "clique-3",
            }
            | (labels or {}),
            "annotations": annotations or {},
        },
        "spec": spec or {},
        "status": {
            "allocatable": {"cpu": "95", "nvidia.com/gpu": gpus},
            "capacity": {"cpu": "96", "nvidia.com/gpu": "8"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "Unknown",
                    "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                    "message": "" if ready else "Kubelet stopped posting node status.",
                    "lastTransitionTime": (NOW - timedelta(seconds=30)).isoformat(),
                }
            ],
        },
    }


def test_node_inventory_from_labels_and_allocatable():
    node = m.node_from_k8s(k8s_node(labels={"karpenter.sh/capacity-type": "spot"}), CFG)
    assert node.name == "gpu-a"
    assert node.gpus == 8
    assert node.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert (node.zone, node.rack, node.nvlink_domain) == ("eu-1b", "r07", "clique-3")
    assert node.spot is True
    assert node.state == "ready"


def test_node_states():
    assert m.node_from_k8s(k8s_node(ready=False), CFG).state == "down"
    assert m.node_from_k8s(k8s_node(gpus="0"), CFG).state == "down"  # device plugin lost its GPUs
    quarantined = k8s_node(
        spec={
            "unschedulable": True,
            "taints": [{"key": CFG.quarantine_taint_key, "effect": "NoSchedule"}],
        },
        annotations={m.ANN_QUARANTINE_REASON: "xid 48"},
    )
    draining = m.node_from_k8s(quarantined, CFG, busy_nodes={"gpu-a"})
    assert (draining.state, draining.reason) == ("draining", "xid 48")
    assert m.node_from_k8s(quarantined, CFG).state == "drained"
    cordoned = m.node_from_k8s(k8s_node(spec={"unschedulable": True}), CFG)
    assert (cordoned.state, cordoned.reason) == ("drained", "cordoned outside gpuplatform")


@pytest.mark.parametrize("gpus", ["-4", "500m", "eight", ""])
def test_an_allocatable_that_is_not_a_gpu_count_is_a_down_node(gpus):
    node = m.node_from_k8s(k8s_node(gpus=gpus), CFG)
    assert (node.state, node.gpus) == ("down", 0)
    assert node.reason == "no allocatable nvidia.com/gpu"


def test_nodes_without_gpus_are_not_inventory():
    cpu = k8s_node(labels={})
    del cpu["metadata"]["labels"]["nvidia.com/gpu.product"]
    del cpu["status"]["allocatable"]["nvidia.com/gpu"]
    del cpu["status"]["capacity"]["nvidia.com/gpu"]
    assert m.node_from_k8s(cpu, CFG) is None


# ------------------------------------------------------------------ run state

SPEC = BackendJobSpec(
    job_id="7",
    attempt=1,
    name="t",
    team="bob",
    image="img",
    command="python t.py",
    workers=2,
    gpus_per_worker=8,
    placement={"gpu-a": (0,), "gpu-b": (0,)},
)
HEALTHY = {"gpu-a": m.NodeHealth(True, True), "gpu-b": m.NodeHealth(True, True)}


def pods(*phases, bound=True):
    """The run's pods as the API server would hold them, with the given phases."""
    out = []
    for (pod, node), phase in zip(m.pod_manifests(SPEC, CFG), phases, strict=False):
        pod = copy.deepcopy(pod)
        if bound:
            pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": phase}
        out.append(pod)
    return out


def state(live, deleted=(), nodes=HEALTHY, now=NOW):
    return m.run_status("7", 1, live, list(deleted), nodes, CFG, now)


def terminated(pod, code, reason=None):
    pod["status"]["containerStatuses"] = [
        {"name": "worker", "state": {"terminated": {"exitCode": code}}}
    ]
    if reason:
        pod["status"]["reason"] = reason
    return pod


def test_no_pods_is_unknown():
    assert state([]).state is BackendJobState.UNKNOWN


def test_pending_until_every_worker_runs():
    assert state(pods("Pending", "Pending", bound=False)).state is BackendJobState.PENDING
    assert "not bound" in state(pods("Pending", "Pending", bound=False)).reason
    assert state(pods("Running", "Pending")).state is BackendJobState.PENDING
    assert state(pods("Running")).state is BackendJobState.PENDING  # worker 1 not created yet
    running = state(pods("Running", "Running"))
    assert running.state is BackendJobState.RUNNING
    assert running.nodes == ("gpu-a", "gpu-b")
    assert running.backend_ref == "gpuplatform-jobs/gp-7-a1"
    assert state(pods("Succeeded", "Running")).state is BackendJobState.RUNNING


@pytest.mark.parametrize("workers", ["two", "²", "-1"])
def test_a_rewritten_gang_size_annotation_does_not_break_the_state(workers):
    live = pods("Running", "Running")
    live[0]["metadata"]["annotations"][m.ANN_WORKERS] = workers
    assert state(live).state is BackendJobState.RUNNING
    # The other worker's annotation still says two workers: one pod is not the whole gang.
    assert state(live[1:]).state is BackendJobState.PENDING


def test_all_succeeded_even_if_some_pods_are_already_gone():
    live, gone = pods("Succeeded", "Succeeded")
    assert state([live], [gone]).state is BackendJobState.SUCCEEDED


def test_failed_worker_fails_the_run_with_its_exit_code():
    live = pods("Running", "Failed")
    terminated(live[1], 3)
    status = state(live)
    assert (status.state, status.exit_code) == (BackendJobState.FAILED, 3)
    assert "worker 1" in status.reason


def test_a_worker_killed_for_its_memory_says_so():
    live = pods("Running", "Failed")
    terminated(live[1], 137)["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = (
        "OOMKilled"
    )
    status = state(live)
    assert (status.state, status.exit_code) == (BackendJobState.FAILED, 137)
    assert status.reason == "worker 1: OOMKilled (exit code 137)"
    # The runtime's generic word adds nothing to the exit code.
    live[1]["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "Error"
    assert state(live).reason == "worker 1: exit code 137"


def test_runtime_limit():
    live = pods("Failed", "Failed")
    live[0]["status"]["reason"] = "DeadlineExceeded"
    assert state(live).reason == "runtime limit exceeded"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["status"].update(reason="Evicted", message="low on memory"),
        lambda p: p["status"].update(reason="OutOfnvidia.com/gpu"),  # kubelet admission
        lambda p: p["status"].update(reason="NodeShutdown"),
        lambda p: (
            p["status"]
            .setdefault("conditions", [])
            .append(
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
            )
        ),
    ],
)
def test_pods_lost_to_their_node_are_node_failed(mutate):
    live = pods("Running", "Failed")
    mutate(live[1])
    assert state(live).state is BackendJobState.NODE_FAILED


def disrupted(pod, reason, at):
    pod["status"].setdefault("conditions", []).append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "lastTransitionTime": at.isoformat(),
        }
    )
    return pod


def test_a_worker_that_exited_0_on_an_eviction_did_not_succeed():
    # kubectl drain: the eviction API marks the pod, SIGTERM, the worker checkpoints and exits 0.
    live = pods("Succeeded", "Running")
    terminated(live[0], 0)["status"]["containerStatuses"][0]["state"]["terminated"].update(
        finishedAt=NOW.isoformat(), message='{"checkpointed_progress_s": 1800}'
    )
    disrupted(live[0], "EvictionByEvictionAPI", NOW - timedelta(seconds=40))
    status = state(live)
    assert status.state is BackendJobState.NODE_FAILED
    assert status.reason.startswith("worker 0: EvictionByEvictionAPI")
    assert status.checkpointed_progress_s == 1800
    # Both workers gone that way: still not done.
    other = disrupted(copy.deepcopy(live[0]), "DeletionByTaintManager", NOW - timedelta(seconds=9))
    other["metadata"] = live[1]["metadata"]
    assert state([live[0]], [other]).state is BackendJobState.NODE_FAILED


@pytest.mark.parametrize("phase,code", [("Failed", 143), ("Succeeded", 0)])
def test_a_worker_preempted_by_the_default_scheduler_is_interrupted(phase, code):
    # A higher-priority pod of another workload took the node: not the job's failure, not done.
    live = pods("Running", phase)
    terminated(live[1], code)["status"]["containerStatuses"][0]["state"]["terminated"][
        "finishedAt"
    ] = NOW.isoformat()
    disrupted(live[1], "PreemptionByScheduler", NOW - timedelta(seconds=30))
    # As the pod is last seen, and once it is gone.
    for live_pods, deleted in ((live, []), (live[:1], live[1:])):
        status = state(live_pods, deleted)
        assert status.state is BackendJobState.INTERRUPTED
        assert status.reason.startswith("worker 1: PreemptionByScheduler")


def test_a_worker_that_had_finished_before_a_disruption_succeeded():
    live = pods("Succeeded", "Succeeded")
    for pod in live:
        terminated(pod, 0)["status"]["containerStatuses"][0]["state"]["terminated"][
            "finishedAt"
        ] = (NOW - timedelta(minutes=5)).isoformat()
    disrupted(live[1], "EvictionByEvictionAPI", NOW)
    assert state(live).state is BackendJobState.SUCCEEDED


def test_node_gone_or_not_ready_past_the_grace_is_node_failed():
    live = pods("Running", "Running")
    assert state(live, nodes={"gpu-a": HEALTHY["gpu-a"]}).state is BackendJobState.NODE_FAILED
    flaky = dict(HEALTHY, **{"gpu-b": m.NodeHealth(True, False, NOW - timedelta(seconds=30))})
    assert state(live, nodes=flaky).state is BackendJobState.RUNNING  # within the 60 s grace
    dead = dict(HEALTHY, **{"gpu-b": m.NodeHealth(True, False, NOW - timedelta(seconds=61))})
    status = state(live, nodes=dead)
    assert status.state is BackendJobState.NODE_FAILED
    assert "gpu-b is NotReady" in status.reason


def test_cancel_wins_over_how_the_pods_exited():
    live = pods("Running", "Succeeded")  # SIGTERM handler exited 0
    for pod in live:
        pod["metadata"]["annotations"][m.ANN_CANCELLED] = "true"
    assert state([live[0]], [live[1]]).state is BackendJobState.CANCELLED


def test_pod_deleted_behind_our_back_fails_the_run():
    live, gone = pods("Running", "Running")
    status = state([live], [gone])
    assert status.state is BackendJobState.FAILED
    assert "deleted outside" in status.reason


def test_permanent_image_errors_fail_but_pull_backoff_waits():
    live = pods("Pending", "Pending")
    live[0]["status"]["containerStatuses"] = [
        {"name": "worker", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
    ]
    assert (state(live).state, state(live).reason) == (BackendJobState.PENDING, "ImagePullBackOff")
    # A pull that failed is the cluster holding the run (the loop's grace requeues it); a pull
    # in progress is not.
    assert state(live).held_by_cluster and not state(live).pending_on_nodes
    live[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] = "ContainerCreating"
    assert not state(live).held_by_cluster
    live[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] = "InvalidImageName"
    assert state(live).state is BackendJobState.FAILED


def test_a_container_the_kubelet_will_not_start_fails_with_the_kubelets_words():
    # What the kubelet says of a root image under pod_security: restricted.
    live = pods("Pending", "Pending")
    why = 'container has runAsNonRoot and image will run as root (pod: "gp-1-a1-w0_ns", container: worker)'
    live[0]["status"]["containerStatuses"] = [
        {
            "name": "worker",
            "state": {"waiting": {"reason": "CreateContainerConfigError", "message": why}},
        }
    ]
    status = state(live)
    assert status.state is BackendJobState.FAILED
    assert status.reason == f"worker 0: CreateContainerConfigError: {why}"


# ------------------------------------------------------------------ properties

PHASES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])


@settings(max_examples=150, deadline=None)
@given(
    phases=st.tuples(PHASES, PHASES),
    gone=st.tuples(st.booleans(), st.booleans()),
    cancelled=st.booleans(),
    node_b_ready=st.booleans(),
    order=st.permutations([0, 1]),
)
def test_state_depends_on_the_pods_not_their_order(phases, gone, cancelled, node_b_ready, order):
    all_pods = pods(*phases)
    if cancelled:
        for pod in all_pods:
            pod["metadata"]["annotations"][m.ANN_CANCELLED] = "true"
    nodes = dict(HEALTHY, **{"gpu-b": m.NodeHealth(True, node_b_ready, NOW - timedelta(hours=1))})
    live = [all_pods[i] for i in order if not gone[i]]
    deleted = [all_pods[i] for i in order if gone[i]]
    status = state(live, deleted, nodes)
    reordered = state(list(reversed(live)), list(reversed(deleted)), nodes)
    assert status == reordered
    assert status.state is not BackendJobState.UNKNOWN
    if cancelled:
        assert status.state is BackendJobState.CANCELLED
    elif phases == ("Succeeded", "Succeeded"):
        assert status.state is BackendJobState.SUCCEEDED
    elif not node_b_ready and phases[1] != "Succeeded":
        assert status.state is BackendJobState.NODE_FAILED
    elif "Failed" in phases or any(
        g and p != "Succeeded" for g, p in zip(gone, phases, strict=True)
    ):
        assert status.state is BackendJobState.FAILED


def test_checkpointed_progress_comes_from_the_workers_termination_messages():
    live = pods("Succeeded", "Failed")
    terminated(live[0], 0)["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        '{"checkpointed_progress_s": 3600}'
    )
    terminated(live[1], 143)["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        '{"checkpointed_progress_s": 3500.5}'
    )
    assert state(live).checkpointed_progress_s == 3500.5
    live[1]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "Traceback ..."
    assert state(live).checkpointed_progress_s == 3600
    assert state(pods("Running", "Running")).checkpointed_progress_s is None
