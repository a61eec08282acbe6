"""gpuctl, for a team whose every allowed cluster is retired: the server's refusal is shown as
a usage error (exit 2) that says why and what to do, and nothing is submitted."""

from __future__ import annotations

import pytest

from scheduler.models import Cluster, Job, Node, TeamClusterAccess
from scheduler.retirement import cluster_retire

pytestmark = pytest.mark.django_db(transaction=True)


def test_gpuctl_submit_is_refused_with_exit_2(platform, as_alice, gpu_models, teams):
    old = Cluster.objects.create(name="old", backend_kind="simulated", backend_config={"seed": 2})
    Node.objects.create(cluster=old, name="o1", gpu_model=gpu_models["h100"], gpu_count=8)
    TeamClusterAccess.objects.create(team=teams["vision"], cluster=old)
    cluster_retire(user=platform["admin"], name="old", reason="")

    result = as_alice("submit", "-J", "t", "--team", "vision", "-N", "1",
                      "--gpus-per-worker", "1", "--", "echo", "hi")  # fmt: skip
    assert result.code == 2, (result.out, result.err)
    assert "every cluster team vision may use is retired: old (retired)" in result.err
    assert "ask a platform admin" in result.err
    assert not Job.objects.exists()
