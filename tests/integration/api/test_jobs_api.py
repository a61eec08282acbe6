"""Job submission, validation, listing, cancel and events through the REST API."""

import pytest

from scheduler.models import Job, JobEvent

pytestmark = pytest.mark.django_db


def test_submit_returns_the_job_in_contract_field_names(platform, submit):
    response = submit(
        platform["alice"],
        name="resnet",
        workers=2,
        gpus_per_worker=4,
        gpu_model="h100-80gb",
        priority_class="research",
        checkpoint_interval_s=600,
        elastic={"min_workers": 1, "max_workers": 2},
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["team"] == "vision" and body["state"] == "pending"
    assert body["workers"] == 2 and body["gpus_per_worker"] == 4 and body["total_gpus"] == 8
    assert body["gpu_model"] == "h100-80gb" and body["priority_class"] == "research"
    assert body["elastic"] == {"min_workers": 1, "max_workers": 2}
    assert body["why"]
    job = Job.objects.get(pk=body["id"])
    assert job.submitter == platform["alice"]
    assert JobEvent.objects.filter(job=job, kind="submitted").exists()


@pytest.mark.parametrize(
    "fields,field,needle",
    [
        ({"workers": 0}, "workers", "greater than or equal to 1"),
        (
            {"gpus_per_worker": 9, "gpu_model": "h100-80gb"},
            "gpus_per_worker",
            "more than a h100-80gb node has (8)",
        ),
        ({"gpus_per_worker": 16}, "gpus_per_worker", "more than any node has (8)"),
        # A gang no cluster holds whole waited for good (sbatch refuses it): two 8-GPU nodes of
        # each model, and a gang runs on one model.
        (
            {"workers": 3, "gpus_per_worker": 8, "gpu_model": "h100-80gb"},
            "workers",
            "3 workers of 8 GPUs can never run at once: one cluster's h100-80gb nodes hold at "
            "most 2",
        ),
        ({"workers": 5, "gpus_per_worker": 4}, "workers", "nodes of one GPU model hold at most 4"),
        (
            {"workers": 3, "gpus_per_worker": 8, "elastic": {"min_workers": 3, "max_workers": 4}},
            "elastic.min_workers",
            "3 workers of 8 GPUs can never run at once",
        ),
        ({"gpu_model": "tpu-v5"}, "gpu_model", "unknown GPU model 'tpu-v5'"),
        ({"priority_class": "urgent"}, "priority_class", "unknown priority class 'urgent'"),
        ({"team": "nlp"}, "team", "not a member of a team 'nlp'"),
        ({"team": "no-such-team"}, "team", "not a member"),
        ({"workers": "many"}, "workers", "valid integer"),
        ({"elastic": {"min_workers": 3, "max_workers": 2}}, "elastic", "min_workers"),
        (
            {"workers": 5, "elastic": {"min_workers": 1, "max_workers": 2}},
            "workers",
            "elastic range",
        ),
        ({"checkpoint_interval_s": 0}, "checkpoint_interval_s", "greater than or equal to 1"),
        ({"deadline": "2001-01-01T00:00:00Z"}, "deadline", "must be in the future"),
        ({"deadline": "2999-01-01T00:00:00Z"}, "deadline", "at most 90 days ahead"),
        ({"deadline": "friday"}, "deadline", "Datetime has wrong format"),
        # docs/jobspec.md: "with a time zone"; read as UTC it would be off by the user's offset
        ({"deadline": "2099-01-01T18:00:00"}, "deadline", "must include a time zone"),
    ],
)
def test_bad_submission_is_400_naming_the_field_and_writes_nothing(
    platform, submit, fields, field, needle
):
    response = submit(platform["alice"], **fields)
    assert response.status_code == 400
    body = response.json()
    assert field in body, body
    assert needle in str(body[field]), body
    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0


def test_viewer_cannot_submit(platform, submit):
    response = submit(platform["charlie"])
    assert response.status_code == 400
    assert "viewers cannot submit" in str(response.json()["team"])
    assert Job.objects.count() == 0


def test_anonymous_is_refused(platform, api_as):
    assert api_as().get("/api/v1/jobs/").status_code in (401, 403)
    assert api_as().post("/api/v1/jobs/", {}, format="json").status_code in (401, 403)


def test_list_filters_by_state_team_and_submitter(platform, submit, api_as):
    submit(platform["alice"], name="a1")
    submit(platform["alice"], name="a2")
    client = api_as(platform["alice"])
    names = {j["name"] for j in client.get("/api/v1/jobs/?state=pending").json()["results"]}
    assert names == {"a1", "a2"}
    assert client.get("/api/v1/jobs/?state=running").json()["results"] == []
    # charlie: a member of alice's team with no jobs (bob, of another team, is a 400 below)
    assert client.get("/api/v1/jobs/?submitter=charlie").json()["results"] == []
    assert len(client.get("/api/v1/jobs/?team=vision").json()["results"]) == 2


def test_a_submitter_filter_naming_no_one_the_caller_sees_is_a_400(platform, submit, api_as):
    """``squeue -u nosuch`` says "Invalid user"; ``?submitter=nosuch`` answered an empty list, as
    for a user without jobs. A name that is no one the caller sees is a 400 on ``submitter``, and
    a member of another team only (bob) gets the very same answer: whether a name exists
    elsewhere is not told."""
    assert submit(platform["bob"], name="b1", team="nlp").status_code == 201
    client = api_as(platform["alice"])
    for name in ("nosuch", "bob"):
        response = client.get("/api/v1/jobs/", {"submitter": name})
        assert response.status_code == 400, name
        assert response.json() == {"submitter": [f"no member of your teams is called '{name}'"]}


def test_a_submitter_filter_takes_anyone_whose_jobs_the_caller_sees(platform, submit, api_as):
    """The caller, their team-mates, and someone who left the team since submitting to it (their
    jobs stay in the team's list); a platform admin sees every user, and is told "no user"."""
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Team

    dora = get_user_model().objects.create_user(username="dora", password="pw-dora")
    member = Membership.objects.create(
        user=dora, team=Team.objects.get(slug="vision"), role="member"
    )
    assert submit(dora, name="d1").status_code == 201
    member.delete()
    assert submit(platform["bob"], name="b1", team="nlp").status_code == 201
    alice = api_as(platform["alice"])
    for name, jobs in (("alice", []), ("charlie", []), ("dora", ["d1"])):
        response = alice.get("/api/v1/jobs/", {"submitter": name})
        assert response.status_code == 200, (name, response.json())
        assert [j["name"] for j in response.json()["results"]] == jobs, name
    admin = api_as(platform["admin"])
    listed = admin.get("/api/v1/jobs/", {"submitter": "bob"}).json()["results"]
    assert [j["name"] for j in listed] == ["b1"]
    response = admin.get("/api/v1/jobs/", {"submitter": "nosuch"})
    assert response.status_code == 400
    assert response.json() == {"submitter": ["no user is called 'nosuch'"]}


def test_cancel_moves_a_pending_job_to_cancelled_once(platform, submit, api_as):
    job_id = submit(platform["alice"]).json()["id"]
    client = api_as(platform["alice"])
    response = client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert again.status_code == 409 and "already cancelled" in str(again.json())
    kinds = list(client.get(f"/api/v1/jobs/{job_id}/events/").json())
    assert [e["kind"] for e in kinds] == ["submitted", "cancelled"]


def test_viewer_cannot_cancel(platform, submit, api_as):
    job_id = submit(platform["alice"]).json()["id"]
    response = api_as(platform["charlie"]).post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 403 and "viewers cannot cancel" in str(response.json())
    assert Job.objects.get(pk=job_id).state == "pending"


def test_another_teams_job_is_404_for_every_verb(platform, submit, api_as):
    job_id = submit(platform["alice"], name="secret-vision-job").json()["id"]
    bob = api_as(platform["bob"])
    assert bob.get(f"/api/v1/jobs/{job_id}/").status_code == 404
    assert bob.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404
    assert bob.get(f"/api/v1/jobs/{job_id}/events/").status_code == 404
    listing = bob.get("/api/v1/jobs/").json()
    assert listing["count"] == 0 and "secret-vision-job" not in str(listing)
    assert Job.objects.get(pk=job_id).state == "pending"


def test_team_in_body_cannot_smuggle_a_job_into_another_team(platform, submit):
    response = submit(platform["bob"], team="vision")
    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_teams_endpoint_lists_only_mine(platform, api_as):
    (nlp,) = api_as(platform["bob"]).get("/api/v1/teams/").json()["results"]
    # its parent, research, is a team bob is no member of: hidden, as in the portal's tree
    assert nlp["slug"] == "nlp" and nlp["parent"] is None
    assert api_as(platform["bob"]).get("/api/v1/teams/nlp/").json()["parent"] is None
    teams = api_as(platform["admin"]).get("/api/v1/teams/").json()["results"]
    assert {t["slug"]: t["parent"] for t in teams}["nlp"] == "research"


def test_nul_bytes_in_a_filter_are_a_400_not_a_500(platform, api_as):
    response = api_as(platform["alice"]).get("/api/v1/jobs/", {"team": "vis\x00ion"})
    assert response.status_code == 400 and "team" in response.json()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("through", ["job", "array"])
def test_a_submission_racing_the_deletion_of_its_priority_class_is_a_400(
    platform, submit, api_as, through
):
    """A platform admin deletes an unused priority class while a member submits with it. The
    deletion saw no job using the class and went through; the submission, validated against
    the class a moment before, failed at commit on its foreign key: a 500. It is now the 400 on
    ``priority_class`` a submission naming a class that does not exist gets, and nothing of it
    is written."""
    from tenants.entitlements import priority_class_delete
    from tenants.models import PriorityClass
    from tests.integration.concurrency import race

    def submission():
        if through == "job":
            return submit(platform["alice"], priority_class="best-effort")
        body = {
            "name": "sweep",
            "team": "vision",
            "template": {"workers": 1, "gpus_per_worker": 1, "priority_class": "best-effort"},
            "count": 3,
        }
        return api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")

    response = race(
        lambda: priority_class_delete(user=platform["admin"], name="best-effort"), submission
    )
    assert response.status_code == 400, response.content
    assert "priority_class" in response.json()
    assert not Job.objects.exists() and not JobEvent.objects.exists()
    assert not PriorityClass.objects.filter(name="best-effort").exists()
