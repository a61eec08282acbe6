"""A team whose every allowed cluster is retired cannot submit (the lead's decision, as Slurm
refuses a submission to a DRAIN or INACTIVE partition): through the API, the estimate, an array,
the portal form and gpuctl, a 400 on ``routing.clusters`` when the submission names clusters,
else the non-field error, naming the retired clusters and what to do. Nothing is written, and a
job that was already pending stays pending with the loop's reason."""

from __future__ import annotations

import pytest

from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, Job, JobArray, Node, NodeState, TeamClusterAccess
from scheduler.retirement import cluster_reinstate, cluster_retire
from scheduler.states import JobState
from tenants.models import Membership, Team

pytestmark = pytest.mark.django_db

WHAT_TO_DO = "ask a platform admin to let the team use another cluster or to reinstate one"


@pytest.fixture
def held_to_old(platform, gpu_models, teams):
    """Vision's parent team may use only "old" (so vision too), a cluster of two H100 nodes."""
    old = Cluster.objects.create(name="old", backend_kind="simulated", backend_config={"seed": 2})
    for i in (1, 2):
        Node.objects.create(
            cluster=old, name=f"o{i}", gpu_model=gpu_models["h100"], gpu_count=8, rack="r9"
        )
    TeamClusterAccess.objects.create(team=teams["research"], cluster=old)
    return old


def _refusal(response) -> str:
    assert response.status_code == 400, response.content
    return " ".join(str(m) for m in response.json()["non_field_errors"])


def test_a_submission_of_a_team_allowed_only_retired_clusters_is_refused(
    platform, submit, api_as, held_to_old
):
    alice = platform["alice"]
    cluster_retire(user=platform["admin"], name="old", reason="moved to the new hall")

    refused = submit(alice, gpu_model="h100-80gb")
    message = _refusal(refused)
    assert "every cluster team vision may use is retired: old (retired)" in message
    assert WHAT_TO_DO in message
    estimate = api_as(alice).post(
        "/api/v1/jobs/estimate/",
        {"name": "e", "team": "vision", "workers": 1, "gpus_per_worker": 1},
        format="json",
    )
    assert "every cluster team vision may use is retired" in _refusal(estimate)
    assert not Job.objects.exists()

    # nlp, vision's sibling under research, is held to the same list; a team outside it is not.
    assert "every cluster team nlp may use is retired" in _refusal(
        submit(platform["bob"], team="nlp")
    )
    ops = Team.objects.create(slug="ops", name="Ops")
    Membership.objects.create(user=platform["bob"], team=ops, role="member")
    assert submit(platform["bob"], team="ops").status_code == 201
    # Vision submits again once "old" is back.
    cluster_reinstate(user=platform["admin"], name="old")
    assert submit(alice).status_code == 201


def test_a_submission_naming_clusters_is_refused_on_routing_clusters(platform, submit, held_to_old):
    cluster_retire(user=platform["admin"], name="old", reason="")
    # "test" is in service, but vision may not use it: the job could never start.
    refused = submit(platform["alice"], routing={"clusters": ["test"]})
    assert refused.status_code == 400
    reasons = refused.json()["routing.clusters"]
    assert any("every cluster team vision may use is retired: old" in r for r in reasons)
    assert not Job.objects.exists()


def test_a_cluster_being_retired_counts_and_a_cluster_in_service_lets_the_team_through(
    platform, submit, teams, held_to_old
):
    alice = platform["alice"]
    running = submit(alice, gpu_model="h100-80gb", gpus_per_worker=8)
    assert running.status_code == 201
    run_cycle()
    job = Job.objects.get(pk=running.json()["id"])
    assert job.state == JobState.RUNNING
    cluster_retire(user=platform["admin"], name="old", reason="")  # still runs a job there
    assert "old (being retired)" in _refusal(submit(alice))
    # Vision's own list adds "test", but its parent's list still holds it to "old".
    TeamClusterAccess.objects.create(team=teams["vision"], cluster=platform["cluster"])
    TeamClusterAccess.objects.create(team=teams["vision"], cluster=held_to_old)
    assert submit(alice).status_code == 400
    TeamClusterAccess.objects.create(team=teams["research"], cluster=platform["cluster"])
    assert submit(alice).status_code == 201


def test_an_array_of_such_a_team_is_refused_whole(platform, api_as, held_to_old):
    cluster_retire(user=platform["admin"], name="old", reason="")
    response = api_as(platform["alice"]).post(
        "/api/v1/job-arrays/",
        {
            "name": "sweep",
            "team": "vision",
            "template": {"workers": 1, "gpus_per_worker": 1},
            "items": [{}, {"env": {"LR": "0.1"}}, {"workers": 2}],
        },
        format="json",
    )
    message = _refusal(response)
    assert "every cluster team vision may use is retired: old (retired)" in message
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_the_portal_form_shows_the_refusal(platform, client, held_to_old):
    cluster_retire(user=platform["admin"], name="old", reason="")
    client.force_login(platform["alice"])
    page = client.post(
        "/jobs/new/",
        {"name": "train", "team": "vision", "workers": 1, "gpus_per_worker": 1},
    )
    assert page.status_code == 400
    assert "every cluster team vision may use is retired" in page.content.decode()
    assert not Job.objects.exists()


def test_a_job_already_pending_is_left_pending_with_the_loops_reason(platform, submit, held_to_old):
    # Two nodes' worth, one of old's two draining: it waits (a gang no cluster could ever hold
    # is refused at submission).
    Node.objects.filter(cluster=held_to_old, name="o1").update(state=NodeState.DRAINING)
    waiting = submit(platform["alice"], gpu_model="h100-80gb", gpus_per_worker=8, workers=2)
    assert waiting.status_code == 201
    run_cycle()
    cluster_retire(user=platform["admin"], name="old", reason="")
    run_cycle()
    job = Job.objects.get(pk=waiting.json()["id"])
    assert job.state == JobState.PENDING
    assert job.why_pending.startswith("every cluster team vision may use is retired: old")
