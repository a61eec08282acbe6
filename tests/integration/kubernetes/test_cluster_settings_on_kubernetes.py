"""A Kubernetes cluster's ``namespace`` is not changed while a run's pods live in the old one
(over real HTTP against the test API server). Saved anyway, the pod watcher listed the new
namespace alone: the poll said UNKNOWN, the job was requeued as attempt 2 in the new namespace,
and attempt 1's pods kept their GPUs in the old one, where no sweep looked
(``scheduler.backend_settings``)."""

from __future__ import annotations

import json

import pytest

from scheduler.backends import reset_backends
from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, Job
from scheduler.services import cluster_import_nodes
from scheduler.states import JobState
from tests.integration.kubernetes.fake_apiserver import FakeKubeApiServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube(priorities, teams):
    with FakeKubeApiServer(watch_hold_s=0.05) as server:
        server.add_node("gpu-a", rack="r1")
        reset_backends()
        cluster = Cluster.objects.create(
            name="kube",
            backend_kind="kubernetes",
            backend_config={"host": server.url, "retry_base_s": 0.05},
        )
        assert cluster_import_nodes(cluster=cluster) == (1, 0)
        yield server, cluster
        reset_backends()


def test_a_namespace_change_is_refused_while_pods_run_and_the_run_is_polled_as_before(
    kube, alice, submit, platform_admin, client
):
    server, cluster = kube
    job_id = submit(
        alice, name="train", workers=1, gpus_per_worker=8, image="registry.example/train:1"
    ).json()["id"]
    run_cycle()
    server.set_pod_phase(f"gp-{job_id}-a1-w0", "Running")
    run_cycle()
    client.force_login(platform_admin)
    moved = {**cluster.backend_config, "namespace": "elsewhere"}
    post = {
        "name": "kube",
        "region": "",
        "interconnect": cluster.interconnect,
        "backend_kind": "kubernetes",
        "backend_config": json.dumps(moved),
        "enabled": "on",
    }

    response = client.post(f"/admin/scheduler/cluster/{cluster.pk}/change/", post)

    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["backend_config"]
    assert error.startswith("namespace cannot change while 1 job holds or is starting GPUs")
    cluster.refresh_from_db()
    assert "namespace" not in cluster.backend_config
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempts) == (JobState.RUNNING, 1)
    assert not job.events.filter(kind="requeued").exists()
