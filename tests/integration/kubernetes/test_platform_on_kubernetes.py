"""The whole platform on the Kubernetes backend, over real HTTP against the test API server
(``fake_apiserver.py``): a job submitted through the REST API becomes bound pods whose workers
carry the launcher variables (with the policy's grace as their termination grace), its pod log
reaches the logs API (tail, then follow by cursor; another team's job is a 404), and once it has
finished and its retention has passed the sync deletes its pods, Service and NetworkPolicy."""

from __future__ import annotations

import time

import pytest

from scheduler.backends import reset_backends
from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, Job
from scheduler.services import cluster_import_nodes
from tests.integration.kubernetes.fake_apiserver import FakeKubeApiServer

pytestmark = pytest.mark.django_db
NS = "gpuplatform-jobs"


@pytest.fixture
def kube(priorities, teams, settings):
    settings.SCHEDULER_POLICY = {"preemption_grace_s": 45}
    with FakeKubeApiServer(watch_hold_s=0.05) as server:
        server.add_node("gpu-a", rack="r1")
        server.add_node("gpu-b", rack="r1")
        reset_backends()
        cluster = Cluster.objects.create(
            name="kube",
            backend_kind="kubernetes",
            backend_config={"host": server.url, "retry_base_s": 0.05, "finished_run_ttl_s": 0},
        )
        assert cluster_import_nodes(cluster=cluster) == (2, 0)
        yield server
        reset_backends()


def test_import_skips_a_node_the_platform_cannot_hold_and_imports_the_others(db):
    # A valid Kubernetes node name (a DNS subdomain, up to 253 characters) longer than the
    # Node column, and a device plugin claiming more GPUs than a node may have.
    long_name = "gpu-" + "a" * 60 + "." + "b" * 60 + ".rack-07.dc-west.example.internal"
    with FakeKubeApiServer(watch_hold_s=0.05) as server:
        server.add_node("gpu-a")
        server.add_node(long_name)
        server.add_node("gpu-huge", gpus=2**40)
        reset_backends()
        cluster = Cluster.objects.create(
            name="kube", backend_kind="kubernetes", backend_config={"host": server.url}
        )
        try:
            assert cluster_import_nodes(cluster=cluster) == (1, 0)
        finally:
            reset_backends()
    assert list(cluster.nodes.values_list("name", "gpu_count")) == [("gpu-a", 8)]


def env_of(server, pod: str) -> dict[str, str]:
    container = server.pods[(NS, pod)]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_job_runs_as_pods_with_launcher_variables_logs_and_is_purged(
    kube, alice, bob, submit, api_as
):
    job_id = submit(
        alice,
        name="torchrun",
        workers=2,
        gpus_per_worker=8,
        image="registry.example/train:1",
        command="torchrun --nproc-per-node=8 train.py",
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == "running" and job.backend_ref == f"{NS}/gp-{job_id}-a1"
    run = f"gp-{job_id}-a1"
    w0, w1 = f"{run}-w0", f"{run}-w1"
    assert {kube.pods[(NS, w)]["spec"]["nodeName"] for w in (w0, w1)} == {"gpu-a", "gpu-b"}
    # Its workers accept connections from each other only (rendezvous has no authentication).
    isolation = kube.network_policies[(NS, run)]["spec"]
    assert isolation["podSelector"]["matchLabels"]["gpuplatform.io/run"] == run
    env = env_of(kube, w1)
    assert {k: env[k] for k in ("RANK", "NODE_RANK", "WORLD_SIZE", "PET_NNODES")} == {
        "RANK": "1",
        "NODE_RANK": "1",
        "WORLD_SIZE": "2",
        "PET_NNODES": "2",
    }
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == f"w0.{run}"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"
    assert env["PET_NODE_RANK"] == env["GPUPLATFORM_WORKER"] == "1"
    assert env["GPUPLATFORM_CHECKPOINT_GRACE_S"] == "45"  # the policy's preemption grace
    assert kube.pods[(NS, w1)]["spec"]["terminationGracePeriodSeconds"] == 45

    for pod in (w0, w1):
        kube.set_pod_phase(pod, "Running")
    kube.write_log(w0, "step 1 loss 0.91\nstep 2 loss 0.84\n")
    alice_api = api_as(alice)
    tail = alice_api.get(f"/api/v1/jobs/{job_id}/logs/").json()
    assert (tail["attempt"], tail["finished"], tail["text"]) == (
        1,
        False,
        "step 1 loss 0.91\nstep 2 loss 0.84\n",
    )
    kube.write_log(w0, "step 3 loss 0.77\n")
    more = alice_api.get(f"/api/v1/jobs/{job_id}/logs/", {"cursor": tail["cursor"]}).json()
    assert more["text"] == "step 3 loss 0.77\n"
    assert api_as(bob).get(f"/api/v1/jobs/{job_id}/logs/").status_code == 404

    for pod in (w0, w1):
        kube.set_pod_phase(pod, "Succeeded")
    deadline = time.monotonic() + 10
    while (NS, w0) in kube.pods or (NS, run) in kube.services or kube.network_policies:
        assert time.monotonic() < deadline, "the finished run was never purged"
        run_cycle()
        time.sleep(0.2)
    job.refresh_from_db()
    assert job.state == "succeeded" and job.exit_code == 0
    assert kube.pods == {} and kube.services == {} and kube.network_policies == {}
    # Its final state stays known from the pod watch's tombstones: nothing is requeued.
    run_cycle()
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("succeeded", 1)


def test_no_field_of_a_submitted_job_lets_its_pods_into_another_teams_run(kube, alice, bob, submit):
    """Pod labels, and so the run's NetworkPolicy and the platform's own pod lists, come from
    the platform's ids: a job cannot ask for labels, and what it may set (name, command, env)
    never becomes one."""
    image = "registry.example/train:1"
    victim_id = submit(bob, team="nlp", name="victim", gpus_per_worker=4, image=image).json()["id"]
    victim_run = f"gp-{victim_id}-a1"
    for smuggled in ({"labels": {"gpuplatform.io/run": victim_run}}, {"annotations": {"a": "b"}}):
        refused = submit(alice, gpus_per_worker=4, image=image, **smuggled)
        assert refused.status_code == 400
        assert refused.json() == {next(iter(smuggled)): ["not a job field"]}
    posing = f"gpuplatform.io/run={victim_run}"
    attacker_id = submit(
        alice,
        name=posing,
        command=f"python train.py --label {posing}",
        env={"GPUPLATFORM_JOB_ID": str(victim_id), "RUN": victim_run},
        gpus_per_worker=4,
        image=image,
    ).json()["id"]
    assert Job.objects.count() == 2
    run_cycle()
    attacker_pod = kube.pods[(NS, f"gp-{attacker_id}-a1-w0")]
    assert attacker_pod["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpuplatform",
        "gpuplatform.io/run": f"gp-{attacker_id}-a1",
        "gpuplatform.io/job-id": str(attacker_id),
        "gpuplatform.io/attempt": "1",
        "gpuplatform.io/worker-index": "0",
        "gpuplatform.io/team": "vision",
    }
    victim_policy = kube.network_policies[(NS, victim_run)]["spec"]
    (peer,) = victim_policy["ingress"][0]["from"]
    labels = attacker_pod["metadata"]["labels"]
    assert any(labels.get(k) != v for k, v in peer["podSelector"]["matchLabels"].items())


def test_a_pull_that_keeps_failing_puts_the_job_back_in_the_queue_unbilled(
    kube, alice, submit, settings
):
    """A wrong tag or a registry refusing the cluster leaves the pods in ImagePullBackOff. The
    platform counted the run as running (GPUs held, billed) for as long as nobody looked; past
    the grace for runs the cluster holds, the run is cancelled and the job requeued, not billed
    and not placed again at once."""
    from datetime import timedelta

    from django.utils import timezone

    settings.SCHEDULER_BACKEND_PENDING_GRACE_SECONDS = 120
    job_id = submit(alice, name="typo", gpus_per_worker=8, image="registry.example/tain:1").json()[
        "id"
    ]
    run_cycle()
    run = f"gp-{job_id}-a1"
    kube.set_pod_phase(f"{run}-w0", "Pending", waiting_reason="ImagePullBackOff")
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == "running" and job.cluster_pending_since is not None
    assert "ImagePullBackOff" in job.events.get(kind="held_pending").message
    Job.objects.filter(pk=job_id).update(
        cluster_pending_since=timezone.now() - timedelta(seconds=121)
    )
    run_cycle()
    job.refresh_from_db()
    requeue = job.events.get(kind="requeued")
    assert requeue.data["never_ran"] is True and "ImagePullBackOff" in requeue.data["reason"]
    assert (job.state, job.lost_gpu_seconds) == ("pending", 0.0)
    assert job.retry_after is not None and job.retry_after > timezone.now()
