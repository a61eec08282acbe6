"""Manifests of the Kubernetes backend: content, determinism, and validity against the official
Kubernetes OpenAPI schemas (kubernetes-validate, strict) for several Kubernetes versions."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from scheduler.backends import backend_config_problem
from scheduler.backends import k8s_manifests as m
from scheduler.backends import k8s_network as network
from scheduler.backends.base import BackendJobSpec, BackendRejected

# Oldest and newest schemas kubernetes-validate ships (1.35 and 1.36 pass too; they add little).
VERSIONS = ("1.34", "1.37")
DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes"
RBAC = DEPLOY / "rbac.yaml"
NETWORK_POLICY = DEPLOY / "network-policy.yaml"


def make_spec(**overrides) -> BackendJobSpec:
    values = dict(
        job_id="42",
        attempt=2,
        name="llama finetune (lr sweep)",
        team="alice-lab",
        image="registry.example/train:1.4",
        command="torchrun --nproc-per-node 4 train.py --note 'a b; rm -rf /'",
        workers=2,
        gpus_per_worker=4,
        placement={"gpu-a": (0, 1, 2, 3), "gpu-b": (4, 5, 6, 7)},
        env={"WANDB_MODE": "offline"},
        runtime_limit_s=7200,
        checkpoint_grace_s=90,
    )
    values.update(overrides)
    return BackendJobSpec(**values)


def cfg(**overrides) -> m.KubernetesConfig:
    return m.KubernetesConfig.from_mapping(overrides)


def full_cfg() -> m.KubernetesConfig:
    return cfg(
        service_account="trainer",
        priority_class_name="gpu-batch",
        image_pull_secrets=["regcred"],
        prestop_command=["/opt/gpuplatform/final-checkpoint", "--timeout", "60"],
        gpu_taint_keys=["nvidia.com/gpu", "gpuplatform.io/dedicated"],
    )


def node_object(name: str = "gpu-a", **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "77",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "annotations": {},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
        | spec,
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}},
    }


# ------------------------------------------------------------------ content


@pytest.mark.parametrize("grace", [10**19, round(1e300)])
def test_a_grace_past_any_clock_is_the_longest_the_kubelet_can_wait(grace):
    # What the loop hands over for a policy grace of 1e19 s or 1e300 s (any finite grace is a
    # valid policy): the API server decodes the field as int64 and refused every such pod.
    pod, _ = m.pod_manifests(make_spec(checkpoint_grace_s=grace), cfg())[0]
    seconds = pod["spec"]["terminationGracePeriodSeconds"]
    assert seconds == m.MAX_TERMINATION_GRACE_S
    assert seconds * 10**9 <= 2**63 - 1  # the kubelet's wait, in Go's int64 nanoseconds
    assert seconds > 200 * 365 * 86400  # still "never" in practice


def test_one_pod_per_worker_pinned_to_the_engines_node():
    pods = m.pod_manifests(make_spec(), cfg())
    assert [(p["metadata"]["name"], node) for p, node in pods] == [
        ("gp-42-a2-w0", "gpu-a"),
        ("gp-42-a2-w1", "gpu-b"),
    ]
    pod, node = pods[1]
    spec = pod["spec"]
    assert spec["schedulerName"] == "gpuplatform"
    assert "nodeName" not in spec  # bound later through the Binding API
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-b"]}]}
    ]
    assert m.binding_manifest("gp-42-a2-w1", "gpuplatform-jobs", node)["target"]["name"] == "gpu-b"


def test_pod_carries_gpus_grace_deadline_tolerations_and_identity():
    pod, _ = m.pod_manifests(make_spec(), cfg())[0]
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    assert spec["terminationGracePeriodSeconds"] == 90
    assert spec["activeDeadlineSeconds"] == 7200
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpuplatform",
        "gpuplatform.io/run": "gp-42-a2",
        "gpuplatform.io/job-id": "42",
        "gpuplatform.io/attempt": "2",
        "gpuplatform.io/worker-index": "0",
        "gpuplatform.io/team": "alice-lab",
    }
    annotations = pod["metadata"]["annotations"]
    assert annotations["gpuplatform.io/team"] == "alice-lab"
    assert annotations["gpuplatform.io/job-name"] == "llama finetune (lr sweep)"
    assert annotations["gpuplatform.io/workers"] == "2"
    assert annotations["gpuplatform.io/gpu-indices"] == "0,1,2,3"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUPLATFORM_WORKER"] == env["RANK"] == env["NODE_RANK"] == "0"
    assert env["GPUPLATFORM_WORKERS"] == env["WORLD_SIZE"] == env["PET_NNODES"] == "2"
    assert env["GPUPLATFORM_CHECKPOINT_GRACE_S"] == "90"
    assert env["GPUPLATFORM_RESUME_FROM_S"] == "0"
    assert env["WANDB_MODE"] == "offline"
    # Four GPUs per worker: the launcher inside (torchrun) sets LOCAL_RANK for its processes.
    assert "LOCAL_RANK" not in env and "LOCAL_WORLD_SIZE" not in env
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names))


def test_command_is_an_argument_list_never_a_shell():
    pod, _ = m.pod_manifests(make_spec(), cfg())[0]
    assert pod["spec"]["containers"][0]["command"] == [
        "torchrun",
        "--nproc-per-node",
        "4",
        "train.py",
        "--note",
        "a b; rm -rf /",
    ]
    with pytest.raises(BackendRejected):
        m.pod_manifests(make_spec(command="python 'unterminated"), cfg())


def test_prestop_checkpoint_hook_and_optional_fields():
    pod, _ = m.pod_manifests(make_spec(), full_cfg())[0]
    container = pod["spec"]["containers"][0]
    assert container["lifecycle"] == {
        "preStop": {"exec": {"command": ["/opt/gpuplatform/final-checkpoint", "--timeout", "60"]}}
    }
    assert pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert {t["key"] for t in pod["spec"]["tolerations"]} == {
        "nvidia.com/gpu",
        "gpuplatform.io/dedicated",
    }


def test_workers_find_each_other_through_the_runs_headless_service():
    service = m.rendezvous_service_manifest(make_spec(), cfg())
    assert service["metadata"]["name"] == "gp-42-a2"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"gpuplatform.io/run": "gp-42-a2"}
    pod, _ = m.pod_manifests(make_spec(), cfg())[1]
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("w1", "gp-42-a2")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    for prefix in ("", "PET_", "GPUPLATFORM_"):
        assert (env[f"{prefix}MASTER_ADDR"], env[f"{prefix}MASTER_PORT"]) == (
            "w0.gp-42-a2",
            "29500",
        )
    assert (env["RANK"], env["PET_NODE_RANK"], env["WORLD_SIZE"]) == ("1", "1", "2")
    plain, _ = m.pod_manifests(make_spec(), cfg(rendezvous_service=False))[1]
    assert "subdomain" not in plain["spec"]
    plain_env = {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    assert "MASTER_ADDR" not in plain_env and "MASTER_PORT" in plain_env


def _selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector with matchLabels only (all the platform writes) against a pod's labels."""
    assert set(selector) <= {"matchLabels"}
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def admits(policy: dict, source: dict, target: dict) -> bool:
    """Whether ``policy`` lets ``source`` connect to ``target`` (pods of its namespace), by the
    NetworkPolicy rules: a pod it selects is isolated for ingress and accepts only what one of
    its rules' peers selects; a peer without namespaceSelector is in the policy's namespace."""
    spec = policy["spec"]
    if not _selects(spec["podSelector"], target["metadata"]["labels"]):
        return True  # not this policy's business
    assert "Ingress" in spec["policyTypes"]
    return any(
        set(peer) == {"podSelector"} and _selects(peer["podSelector"], source["metadata"]["labels"])
        for rule in spec.get("ingress", [])
        for peer in rule.get("from", [])
    )


def test_a_runs_pods_accept_connections_only_from_the_same_run():
    spec = make_spec()
    policy = network.run_network_policy_manifest(spec, cfg())
    assert (policy["metadata"]["name"], policy["metadata"]["namespace"]) == (
        "gp-42-a2",
        "gpuplatform-jobs",
    )
    w0, w1 = (pod for pod, _ in m.pod_manifests(spec, cfg()))
    same_team_next_attempt, _ = m.pod_manifests(make_spec(attempt=3), cfg())[0]
    same_team_other_job, _ = m.pod_manifests(make_spec(job_id="43"), cfg())[0]
    other_team, _ = m.pod_manifests(make_spec(job_id="44", team="bob-lab"), cfg())[0]
    assert admits(policy, w1, w0) and admits(policy, w0, w1) and admits(policy, w0, w0)
    for stranger in (same_team_next_attempt, same_team_other_job, other_team):
        assert not admits(policy, stranger, w0)
        assert not admits(policy, stranger, w1)
    # Every port (NCCL listens where it likes), from this namespace only.
    (rule,) = policy["spec"]["ingress"]
    assert set(rule) == {"from"}


def egress_allows(
    policy: dict,
    source: dict,
    *,
    pod: dict | None = None,
    ip: str = "",
    port: int = 443,
    protocol: str = "TCP",
) -> bool:
    """Whether ``policy`` lets ``source`` open a connection to ``pod`` (of its namespace) or to the
    address ``ip``, by the NetworkPolicy egress rules: a pod it selects for Egress may reach only
    what one rule admits (its peers, or anywhere when it has none, on its ports, or any port when
    it has none); an ``ipBlock`` holds its ``cidr`` minus its ``except``. Addresses are matched
    as Calico matches them (ipBlock applies to every address)."""
    spec = policy["spec"]
    if not _selects(spec["podSelector"], source["metadata"]["labels"]):
        return True
    if "Egress" not in spec["policyTypes"]:
        return True

    def peer_admits(peer: dict) -> bool:
        if "podSelector" in peer:
            assert set(peer) == {"podSelector"}
            return pod is not None and _selects(peer["podSelector"], pod["metadata"]["labels"])
        block = peer["ipBlock"]
        if not ip:
            return False
        address = ipaddress.ip_address(ip)
        inside = ipaddress.ip_network(block["cidr"])
        if address.version != inside.version or address not in inside:
            return False
        return not any(
            address in ipaddress.ip_network(e)
            for e in block.get("except", [])
            if ipaddress.ip_network(e).version == address.version
        )

    for rule in spec.get("egress", []):
        ports = rule.get("ports")
        if ports and not any(p["port"] == port and p["protocol"] == protocol for p in ports):
            continue
        peers = rule.get("to")
        if not peers or any(peer_admits(peer) for peer in peers):
            return True
    return False


def test_egress_is_open_unless_blocks_are_denied():
    spec = make_spec()
    w0, w1 = (pod for pod, _ in m.pod_manifests(spec, cfg()))
    policy = network.run_network_policy_manifest(spec, cfg())
    assert policy["spec"]["policyTypes"] == ["Ingress"] and "egress" not in policy["spec"]
    assert egress_allows(policy, w0, ip="169.254.169.254", port=80)


def test_denied_blocks_are_shut_and_the_rest_stays_reachable():
    config = cfg(
        egress_denied_cidrs=["169.254.169.254/32", "10.0.0.0/8", "fd00::/8", "192.168.0.0/16"]
    )
    spec = make_spec()
    (w0, _), (w1, _) = m.pod_manifests(spec, config)
    other_run, _ = m.pod_manifests(make_spec(job_id="43"), config)[0]
    policy = network.run_network_policy_manifest(spec, config)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # The cloud's metadata service (node credentials), the cluster's pod range, an IPv6 range.
    assert not egress_allows(policy, w0, ip="169.254.169.254", port=80)
    assert not egress_allows(policy, w0, ip="10.12.3.4", port=5432)
    assert not egress_allows(policy, w0, ip="fd00::1", port=6379)
    assert not egress_allows(policy, w0, ip="192.168.7.7", port=22)
    # Another run's pod is not reached by its selector (its address is in the denied range).
    assert not egress_allows(policy, w0, pod=other_run, port=29500)
    # The run's own pods on any port (the rendezvous, NCCL), DNS anywhere, the rest of the world.
    assert egress_allows(policy, w0, pod=w1, port=29500)
    assert egress_allows(policy, w0, pod=w1, port=41234)
    assert egress_allows(policy, w0, ip="10.96.0.10", port=53, protocol="UDP")
    assert egress_allows(policy, w0, ip="10.96.0.10", port=53, protocol="TCP")
    assert egress_allows(policy, w0, ip="151.101.0.223", port=443)
    assert egress_allows(policy, w0, ip="2a04:4e42::223", port=443)
    # Ingress is what it was without the setting.
    assert (
        policy["spec"]["ingress"]
        == network.run_network_policy_manifest(spec, cfg())["spec"]["ingress"]
    )


def test_a_family_denied_whole_reaches_only_the_run_and_dns():
    config = cfg(egress_denied_cidrs=["0.0.0.0/0"])
    spec = make_spec()
    (w0, _), (w1, _) = m.pod_manifests(spec, config)
    policy = network.run_network_policy_manifest(spec, config)
    assert not egress_allows(policy, w0, ip="151.101.0.223", port=443)
    assert egress_allows(policy, w0, ip="2a04:4e42::223", port=443)
    assert egress_allows(policy, w0, pod=w1, port=29500)
    assert egress_allows(policy, w0, ip="8.8.8.8", port=53, protocol="UDP")
    both = network.run_network_policy_manifest(spec, cfg(egress_denied_cidrs=["0.0.0.0/0", "::/0"]))
    assert [rule.get("to") for rule in both["spec"]["egress"]][2:] == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("10.0.0.0/8", "a list of CIDR blocks, not a string"),
        (["10.0.0.1/8"], "'10.0.0.1/8' is not a CIDR block (10.0.0.1/8 has host bits set)"),
        (["metadata"], "'metadata' is not a CIDR block"),
        ([8], "8 is not a CIDR block"),
        ({"cidr": "10.0.0.0/8"}, "must be a list of CIDR blocks"),
    ],
)
def test_egress_blocks_that_are_not_networks_are_refused(value, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        cfg(egress_denied_cidrs=value)
    assert reason in backend_config_problem("kubernetes", {"egress_denied_cidrs": value})


def test_egress_blocks_need_the_runs_policy():
    with pytest.raises(ValueError, match="egress_denied_cidrs needs network_policy"):
        cfg(egress_denied_cidrs=["10.0.0.0/8"], network_policy=False)


def test_nothing_a_user_submits_reaches_a_label_or_what_a_selector_reads():
    # Every field a user controls, written to pose as another run (gp-7-a1) and as the platform.
    posing = "gp-7-a1\ngpuplatform.io/run=gp-7-a1\napp.kubernetes.io/managed-by=gpuplatform"
    hostile = make_spec(
        name=posing,
        command=f"python train.py --label gpuplatform.io/run=gp-7-a1 '{posing}'",
        image="registry.example/gp-7-a1:gpuplatform",
        env={
            "GPUPLATFORM_RUN": "gp-7-a1",
            "GPUPLATFORM_JOB_ID": "7",
            "GPUPLATFORM_ATTEMPT": "1",
            "LABELS": "gpuplatform.io/run=gp-7-a1",
        },
    )
    plain = make_spec(name="x", command="python train.py", env={})
    victim = make_spec(job_id="7", attempt=1)
    victim_pod, _ = m.pod_manifests(victim, cfg())[0]
    victim_policy = network.run_network_policy_manifest(victim, cfg())
    for (pod, _), (plain_pod, _) in zip(
        m.pod_manifests(hostile, cfg()), m.pod_manifests(plain, cfg()), strict=True
    ):
        assert pod["metadata"]["labels"] == plain_pod["metadata"]["labels"]
        ours = {k: v for k, v in pod["metadata"]["annotations"].items() if k != m.ANN_JOB_NAME}
        assert ours == {
            k: v for k, v in plain_pod["metadata"]["annotations"].items() if k != m.ANN_JOB_NAME
        }
        # The platform's identity variables are the platform's, whatever the job's env says.
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["GPUPLATFORM_JOB_ID"], env["GPUPLATFORM_ATTEMPT"]) == ("42", "2")
        assert not admits(victim_policy, pod, victim_pod)
    # The selectors the platform relies on (policy, Service, its own pod lists) read only the
    # run and managed-by labels, which come from its own ids.
    policy = network.run_network_policy_manifest(hostile, cfg())
    service = m.rendezvous_service_manifest(hostile, cfg())
    assert policy["spec"] == network.run_network_policy_manifest(plain, cfg())["spec"]
    assert service["spec"]["selector"] == {m.LABEL_RUN: "gp-42-a2"}
    assert (m.run_selector("42", 2), m.managed_selector()) == (
        "gpuplatform.io/run=gp-42-a2",
        "app.kubernetes.io/managed-by=gpuplatform",
    )


def test_policies_of_runs_whose_pods_are_all_gone_are_orphans_once_old_enough():
    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)

    def policy(run: str, age_s: float | None, name: str | None = None) -> dict:
        meta = {"name": name or run, "labels": {"gpuplatform.io/run": run}}
        if age_s is not None:
            created = now - timedelta(seconds=age_s)
            meta["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"metadata": meta}

    policies = [
        policy("gp-1-a1", 3600),  # its run's pods are gone: an orphan
        policy("gp-2-a1", 3600),  # pods still there (a run stopping)
        policy("gp-3-a1", 30),  # just created, its pods are on their way
        policy("gp-4-a1", None),  # no creation time: left alone
        policy("gp-5-a1", 3600, name="default-deny-ingress"),  # not one of ours by name
    ]
    assert network.orphan_policy_runs(
        policies, runs_with_pods={"gp-2-a1"}, now=now, min_age_s=600
    ) == ["gp-1-a1"]


# The Pod Security Standards' checks (kubernetes.io/docs/concepts/security/pod-security-standards,
# "latest") on the fields a pod of ours could carry; the API server's admission plugin is not
# available here.
_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
_RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def pod_security_violations(pod: dict, level: str) -> set[str]:
    """The controls of ``level`` ("baseline" or "restricted") that ``pod`` fails."""
    spec = pod["spec"]
    pod_ctx = spec.get("securityContext") or {}
    containers = spec["containers"] + spec.get("initContainers", [])
    ctxs = [c.get("securityContext") or {} for c in containers]
    bad: set[str] = set()
    if any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        bad.add("hostNamespaces")
    if any(ctx.get("privileged") for ctx in ctxs):
        bad.add("privileged")
    if any(
        set((ctx.get("capabilities") or {}).get("add", [])) - _BASELINE_CAPABILITIES for ctx in ctxs
    ):
        bad.add("capabilities")
    if any("hostPath" in v for v in spec.get("volumes", [])):
        bad.add("hostPathVolumes")
    if any(p.get("hostPort") for c in containers for p in c.get("ports", [])):
        bad.add("hostPorts")
    profiles = [ctx.get("seccompProfile", {}).get("type") for ctx in [pod_ctx, *ctxs]]
    if "Unconfined" in profiles:
        bad.add("seccompProfile")
    if level == "baseline":
        return bad
    volume_types = {k for v in spec.get("volumes", []) for k in v if k != "name"}
    if volume_types - _RESTRICTED_VOLUMES:
        bad.add("volumeTypes")
    if any(ctx.get("allowPrivilegeEscalation") is not False for ctx in ctxs):
        bad.add("allowPrivilegeEscalation")
    non_root = [ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) for ctx in ctxs]
    if any(value is not True for value in non_root):
        bad.add("runAsNonRoot")
    if 0 in [ctx.get("runAsUser") for ctx in [pod_ctx, *ctxs]]:
        bad.add("runAsUser")
    pod_profile = pod_ctx.get("seccompProfile", {}).get("type")
    for ctx in ctxs:
        if ctx.get("seccompProfile", {}).get("type", pod_profile) not in (
            "RuntimeDefault",
            "Localhost",
        ):
            bad.add("seccompProfile")
    for ctx in ctxs:
        caps = ctx.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.add("capabilities")
    return bad


def test_pods_meet_baseline_and_what_restricted_adds_is_a_setting():
    pod, _ = m.pod_manifests(make_spec(), cfg())[0]
    assert pod_security_violations(pod, "baseline") == set()
    # Many CUDA images run as root and some entrypoints need root's capabilities: not by default.
    assert pod_security_violations(pod, "restricted") == {"runAsNonRoot", "capabilities"}
    assert "securityContext" not in pod["spec"]

    strict, _ = m.pod_manifests(make_spec(), cfg(pod_security="restricted"))[0]
    assert pod_security_violations(strict, "restricted") == set()
    container = strict["spec"]["containers"][0]["securityContext"]
    assert container["capabilities"] == {"drop": ["ALL"]} and container["runAsNonRoot"] is True
    assert "runAsUser" not in strict["spec"]["securityContext"]  # the image's own user

    as_user, _ = m.pod_manifests(make_spec(), cfg(pod_security="restricted", run_as_user=1000))[0]
    assert as_user["spec"]["securityContext"]["runAsUser"] == 1000
    assert pod_security_violations(as_user, "restricted") == set()


@pytest.mark.parametrize(
    "bad_setting",
    [
        {"pod_security": "privileged"},
        {"pod_security": "Restricted"},
        {"run_as_user": 0},  # root: what "restricted" forbids, and the default of a root image
        {"run_as_user": -1},
        {"run_as_user": 2**31},
        {"run_as_user": True},
        {"run_as_user": "1000"},
    ],
)
def test_pod_security_settings_are_checked(bad_setting):
    with pytest.raises(ValueError, match=f"{next(iter(bad_setting))} must be"):
        m.KubernetesConfig.from_mapping(bad_setting)


def test_platform_variables_win_over_the_jobs_own():
    pod, _ = m.pod_manifests(make_spec(env={"RANK": "7", "MY_FLAG": "1"}), cfg())[1]
    env = [(e["name"], e.get("value")) for e in pod["spec"]["containers"][0]["env"]]
    assert ("RANK", "1") in env and ("RANK", "7") not in env and ("MY_FLAG", "1") in env


def test_workers_packed_on_one_node_split_its_gpus():
    spec = make_spec(
        workers=3, gpus_per_worker=2, placement={"gpu-a": (0, 1, 2, 3), "gpu-b": (6, 7)}
    )
    pods = m.pod_manifests(spec, cfg())
    assert [
        (node, p["metadata"]["annotations"]["gpuplatform.io/gpu-indices"]) for p, node in pods
    ] == [
        ("gpu-a", "0,1"),
        ("gpu-a", "2,3"),
        ("gpu-b", "6,7"),
    ]
    assert {
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for p, _ in pods
    } == {"2"}


def test_node_name_mode_skips_the_scheduler():
    pod, _ = m.pod_manifests(make_spec(), cfg(bind_mode="nodeName"))[1]
    assert pod["spec"]["nodeName"] == "gpu-b"
    assert "schedulerName" not in pod["spec"]


def test_manifests_are_deterministic():
    assert m.pod_manifests(make_spec(), cfg()) == m.pod_manifests(make_spec(), cfg())


def kubelet_env(container: dict) -> dict[str, str]:
    """The environment the kubelet gives ``container``, by the rule of the EnvVar ``value``
    field's API documentation: in order, ``$(NAME)`` of a variable defined earlier becomes its
    value, ``$$`` becomes ``$``, any other ``$`` stays."""
    seen: dict[str, str] = {}
    for var in container["env"]:
        if "value" not in var:
            continue
        text, out, i = var["value"], [], 0
        while i < len(text):
            if text.startswith("$$", i):
                out.append("$")
                i += 2
            elif text.startswith("$(", i) and ")" in text[i:]:
                end = text.index(")", i)
                name = text[i + 2 : end]
                out.append(seen.get(name, text[i : end + 1]))
                i = end + 1
            else:
                out.append(text[i])
                i += 1
        seen[var["name"]] = "".join(out)
    return seen


def test_env_values_reach_the_container_as_written():
    env = {
        "A_PASSWORD": "pa$$word",
        "B_REF": "$(A_PASSWORD)/$(GPUPLATFORM_JOB_ID)",
        "C_SHELLISH": "$HOME and $$(x) and $(",
    }
    name = "sweep $(A_PASSWORD) $$"
    pod, _ = m.pod_manifests(make_spec(env=env, name=name), cfg())[0]
    seen = kubelet_env(pod["spec"]["containers"][0])
    assert {k: seen[k] for k in env} == env
    assert seen["GPUPLATFORM_JOB_NAME"] == name


def test_team_that_is_not_a_label_value_stays_in_the_annotation():
    pod, _ = m.pod_manifests(make_spec(team="Alice Lab/ML"), cfg())[0]
    assert "gpuplatform.io/team" not in pod["metadata"]["labels"]
    assert pod["metadata"]["annotations"]["gpuplatform.io/team"] == "Alice Lab/ML"


@pytest.mark.parametrize(
    "overrides",
    [
        {"job_id": "Job_42"},  # not a DNS-1123 name
        {"job_id": "x" * 70},  # run name longer than a label value
        {"workers": 3},  # 2 nodes of 4 GPUs cannot hold 3 workers of 4
        {"workers": 3, "gpus_per_worker": 3},  # 4 GPUs do not split into groups of 3
        {"image": ""},
        {"env": {"A=B": "x"}},  # not a variable name
        # The NVIDIA container runtime would hand the pod every GPU of the node.
        {"env": {"NVIDIA_VISIBLE_DEVICES": "all"}},
        # Slurm's pyxis takes these (the platform accepts them); no kubelet pulls them.
        {"image": "nvcr.io#nvidia/pytorch:24.05-py3"},
        {"image": "/shared/images/pytorch.sqsh"},
    ],
)
def test_specs_kubernetes_cannot_run_are_rejected_before_any_call(overrides):
    with pytest.raises(BackendRejected):
        m.pod_manifests(make_spec(**overrides), cfg())


def test_config_refuses_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match="unknown"):
        m.KubernetesConfig.from_mapping({"namespcae": "x"})
    with pytest.raises(ValueError, match="list"):
        m.KubernetesConfig.from_mapping({"gpu_taint_keys": "nvidia.com/gpu"})
    with pytest.raises(ValueError):
        m.KubernetesConfig.from_mapping({"bind_mode": "magic"})
    with pytest.raises(ValueError):
        m.KubernetesConfig.from_mapping({"namespace": "Bad_NS"})


# ------------------------------------------------------------------ node patches


def test_quarantine_keeps_foreign_taints_and_claims_only_its_own_cordon():
    node = node_object()
    patch = m.quarantine_patch(node, cfg(), "xid 79 on GPU 3")
    assert patch["metadata"]["resourceVersion"] == "77"  # optimistic concurrency precondition
    assert patch["spec"]["unschedulable"] is True
    assert patch["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "gpuplatform.io/quarantine", "value": "true", "effect": "NoSchedule"},
    ]
    assert patch["metadata"]["annotations"] == {
        "gpuplatform.io/quarantine-reason": "xid 79 on GPU 3",
        "gpuplatform.io/cordoned-by": "gpuplatform",
    }
    quarantined = m.strategic_merge(node, patch)
    assert m.quarantine_patch(quarantined, cfg(), "xid 79 on GPU 3") is None  # already done

    released = m.strategic_merge(quarantined, m.release_patch(quarantined, cfg()))
    assert "unschedulable" not in released["spec"]
    assert released["spec"]["taints"] == node["spec"]["taints"]
    assert released["metadata"]["annotations"] == {}
    assert m.release_patch(released, cfg()) is None  # already released


def test_release_leaves_a_cordon_someone_else_set():
    node = node_object(unschedulable=True)  # an admin ran kubectl cordon
    quarantined = m.strategic_merge(node, m.quarantine_patch(node, cfg(), "ecc"))
    assert "gpuplatform.io/cordoned-by" not in quarantined["metadata"]["annotations"]
    released = m.strategic_merge(quarantined, m.release_patch(quarantined, cfg()))
    assert released["spec"]["unschedulable"] is True
    assert [t["key"] for t in released["spec"]["taints"]] == ["nvidia.com/gpu"]


# ------------------------------------------------------------------ schema validation


def _every_manifest() -> list[dict]:
    out = []
    for config in (
        cfg(),
        full_cfg(),
        cfg(bind_mode="nodeName"),
        cfg(pod_security="restricted", run_as_user=1000),
    ):
        for spec in (make_spec(), make_spec(runtime_limit_s=None, env={}, command="")):
            # Workers differ only in index and node: worker 1 stands for all of them.
            pod, node = m.pod_manifests(spec, config)[1]
            out.append(pod)
    out.append(m.binding_manifest(pod["metadata"]["name"], config.namespace, node))
    out.append(m.rendezvous_service_manifest(make_spec(), cfg()))
    out.append(network.run_network_policy_manifest(make_spec(), cfg()))
    for denied in (
        ["169.254.169.254/32", "10.0.0.0/8", "fd00::/8"],
        ["0.0.0.0/0"],
        ["0.0.0.0/0", "::/0"],
    ):
        out.append(
            network.run_network_policy_manifest(make_spec(), cfg(egress_denied_cidrs=denied))
        )
    node = node_object()
    quarantined = m.strategic_merge(node, m.quarantine_patch(node, cfg(), "xid 79"))
    out += [quarantined, m.strategic_merge(quarantined, m.release_patch(quarantined, cfg()))]
    pod = out[0]
    for patch in (m.cancel_patch(), m.checkpoint_patch("20260101T000000.000000Z")):
        out.append(m.strategic_merge(pod, patch))
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_kubernetes(version):
    for manifest in _every_manifest():
        kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_rbac_manifests_are_valid_for_kubernetes(version):
    documents = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    assert {d["kind"] for d in documents} == {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_jobs_namespace_denies_ingress_by_default(version):
    (deny,) = [d for d in yaml.safe_load_all(NETWORK_POLICY.read_text()) if d]
    kubernetes_validate.validate(deny, version, strict=True)
    assert deny["kind"] == "NetworkPolicy"
    assert deny["metadata"]["namespace"] == m.KubernetesConfig().namespace
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    # Its name is no run's: the backend's sweep never mistakes it for a run's policy.
    assert not deny["metadata"]["name"].startswith("gp-")
    pod, _ = m.pod_manifests(make_spec(), cfg())[0]
    assert not admits(deny, pod, pod)


def test_rbac_grants_exactly_what_the_backend_uses():
    documents = {d["kind"]: d for d in yaml.safe_load_all(RBAC.read_text()) if d}
    role = {r["resources"][0]: set(r["verbs"]) for r in documents["Role"]["rules"]}
    assert role == {
        "pods": {"get", "list", "watch", "create", "patch", "delete"},
        "pods/binding": {"create"},
        "pods/log": {"get"},
        "services": {"get", "create", "delete"},
        "networkpolicies": {"get", "list", "create", "delete"},
    }
    groups = {r["resources"][0]: r["apiGroups"] for r in documents["Role"]["rules"]}
    assert groups["networkpolicies"] == ["networking.k8s.io"]
    (node_rule,) = documents["ClusterRole"]["rules"]
    assert node_rule["resources"] == ["nodes"] and set(node_rule["verbs"]) == {
        "get",
        "list",
        "patch",
    }
    assert documents["Role"]["metadata"]["namespace"] == m.KubernetesConfig().namespace


def test_the_validator_is_strict_enough_to_catch_a_wrong_field():
    pod, _ = m.pod_manifests(make_spec(), cfg())[0]
    pod["spec"]["containers"][0]["gpus"] = 4
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, VERSIONS[-1], strict=True)
