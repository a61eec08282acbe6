"""Job arrays through the REST API: all-or-nothing submission naming the bad index and field,
per-index parameters, grouped reads, group cancel and team isolation."""

import pytest

from scheduler.models import Allocation, Job, JobArray, JobEvent
from scheduler.states import JobState

pytestmark = pytest.mark.django_db

TEMPLATE = {"workers": 1, "gpus_per_worker": 1, "gpu_model": "h100-80gb", "env": {"EPOCHS": "3"}}


def post_array(client, **body):
    payload = {"name": "sweep", "team": "vision", "template": dict(TEMPLATE)}
    payload.update(body)
    return client.post("/api/v1/job-arrays/", payload, format="json")


def test_array_creates_one_job_per_index_with_its_parameters(platform, api_as):
    items = [{"env": {"LR": lr}} for lr in ("0.1", "0.01", "0.001")]
    items.append({"gpus_per_worker": 4, "name": "big"})
    response = post_array(api_as(platform["alice"]), items=items)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["size"] == 4 and body["team"] == "vision" and body["submitter"] == "alice"
    assert body["counts"]["pending"] == 4

    jobs = list(Job.objects.filter(array_id=body["id"]).order_by("array_index"))
    assert [j.array_index for j in jobs] == [0, 1, 2, 3]
    assert [j.name for j in jobs] == ["sweep-0", "sweep-1", "sweep-2", "big"]
    assert jobs[1].env == {"EPOCHS": "3", "LR": "0.01", "GPUPLATFORM_ARRAY_INDEX": "1"}
    assert [j.gpus_per_worker for j in jobs] == [1, 1, 1, 4]
    assert all(j.gpu_model.name == "h100-80gb" and j.state == JobState.PENDING for j in jobs)
    assert JobEvent.objects.filter(job__array_id=body["id"], kind="submitted").count() == 4


def test_count_makes_equal_indices(platform, api_as):
    response = post_array(api_as(platform["alice"]), count=25)
    assert response.status_code == 201, response.json()
    assert Job.objects.filter(array_id=response.json()["id"]).count() == 25


def test_a_template_deadline_is_every_members_and_kept_with_the_template(platform, api_as):
    from datetime import datetime, timedelta

    from django.utils import timezone

    due = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    template = dict(TEMPLATE, deadline=due.isoformat())
    response = post_array(api_as(platform["alice"]), template=template, count=3)
    assert response.status_code == 201, response.content
    array = JobArray.objects.get()
    assert [j.deadline for j in Job.objects.filter(array=array)] == [due] * 3
    assert datetime.fromisoformat(array.template["deadline"]) == due
    assert datetime.fromisoformat(response.json()["template"]["deadline"]) == due


def test_one_bad_index_refuses_the_whole_array_naming_index_and_field(platform, api_as):
    items = [{} for _ in range(6)]
    items[3] = {"gpus_per_worker": 16}
    response = post_array(api_as(platform["alice"]), items=items)
    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["items[3].gpus_per_worker"], body
    assert "more than a h100-80gb node has (8)" in body["items[3].gpus_per_worker"][0]
    assert Job.objects.count() == 0 and JobArray.objects.count() == 0
    assert JobEvent.objects.count() == 0


@pytest.mark.parametrize(
    "items,key,needle",
    [
        ([{}, {"workers": "many"}], "items[1].workers", "valid integer"),
        ([{}, {}, {"gpu_model": "tpu-v5"}], "items[2].gpu_model", "unknown GPU model"),
        ([{"priority_class": "urgent"}], "items[0].priority_class", "unknown priority class"),
        ([{}, {"team": "nlp"}], "items[1].team", "not a job field"),
        ([{"color": "red"}], "items[0].color", "not a job field"),
        (
            [{}, {"elastic": {"min_workers": 3, "max_workers": 2}}],
            "items[1].elastic.max_workers",
            "min_workers",
        ),
        # Index 0 is checked with the domain rules for the group of equal indices; these rules
        # hold for every index, not only the first of a group.
        ([{}, {"deadline": "2001-01-01T00:00:00Z"}], "items[1].deadline", "in the future"),
        ([{}, {"deadline": "2099-01-01T00:00:00Z"}], "items[1].deadline", "days ahead"),
        ([{}, {"deadline": "2099-01-01T00:00:00"}], "items[1].deadline", "time zone"),
        ([{}, {"dataset": "imagenet\u202e"}], "items[1].dataset", "bidirectional"),
        ([{}, {}, {"dataset_version": "v1\nv2"}], "items[2].dataset_version", "line break"),
    ],
)
def test_bad_item_shapes_and_rules_are_named(platform, api_as, items, key, needle):
    response = post_array(api_as(platform["alice"]), items=items)
    assert response.status_code == 400
    body = response.json()
    assert key in body, body
    assert needle in str(body[key])
    assert Job.objects.count() == 0 and JobArray.objects.count() == 0


def test_bad_template_is_named_once_as_template(platform, api_as):
    template = dict(TEMPLATE, gpu_model="tpu-v5")
    response = post_array(api_as(platform["alice"]), template=template, count=100)
    assert response.status_code == 400
    assert list(response.json()) == ["template.gpu_model"]
    assert Job.objects.count() == 0


def test_a_bad_template_deadline_is_named_once_as_template(platform, api_as):
    template = dict(TEMPLATE, deadline="2001-01-01T00:00:00Z")
    response = post_array(api_as(platform["alice"]), template=template, count=100)
    assert response.status_code == 400
    assert response.json() == {"template.deadline": ["must be in the future"]}
    assert Job.objects.count() == 0 and JobArray.objects.count() == 0


def test_the_array_name_leaves_room_for_the_index_in_its_jobs_names(platform):
    from core.errors import FieldErrors
    from scheduler.arrays import ArrayRequest, array_submit

    def submit(name, items):
        request = ArrayRequest(name=name, team="vision", template=dict(TEMPLATE), items=items)
        return array_submit(user=platform["alice"], request=request)

    with pytest.raises(FieldErrors) as refused:
        submit("a" * 198, [{} for _ in range(11)])  # "a…a-10" would be 201 characters
    assert refused.value.errors == {
        "name": [
            "at most 197 characters for an array of 11 (its jobs are named <name>-<index>, "
            "at most 200 characters)"
        ]
    }
    assert Job.objects.count() == 0 and JobArray.objects.count() == 0

    assert submit("a" * 198, [{} for _ in range(10)]).size == 10
    # Jobs that name themselves take nothing from the array's name.
    assert submit("b" * 200, [{"name": "one"}, {"name": "two"}]).size == 2
    assert max(len(name) for name in Job.objects.values_list("name", flat=True)) == 200


def test_many_bad_indices_are_summarised(platform, api_as):
    items = [{"gpus_per_worker": 16} for _ in range(120)]
    response = post_array(api_as(platform["alice"]), items=items)
    assert response.status_code == 400
    body = response.json()
    assert sum(key.startswith("items[") for key in body) == 50
    assert "120 index errors" in body["items"][0]
    assert Job.objects.count() == 0


def test_other_team_and_viewer_are_refused(platform, api_as):
    response = post_array(api_as(platform["bob"]), count=2)
    assert response.status_code == 400 and "team" in response.json()
    response = post_array(api_as(platform["charlie"]), count=2)
    assert response.status_code == 400 and "viewers cannot submit" in str(response.json()["team"])
    assert Job.objects.count() == 0


def test_arrays_are_listed_grouped_and_scoped_to_the_team(platform, api_as):
    alice, bob = api_as(platform["alice"]), api_as(platform["bob"])
    array_id = post_array(alice, count=3).json()["id"]
    assert bob.get(f"/api/v1/job-arrays/{array_id}/").status_code == 404
    assert bob.get("/api/v1/job-arrays/").json()["results"] == []
    assert bob.post(f"/api/v1/job-arrays/{array_id}/cancel/").status_code == 404

    listed = alice.get("/api/v1/job-arrays/").json()["results"]
    assert [a["id"] for a in listed] == [array_id]
    members = alice.get(f"/api/v1/job-arrays/{array_id}/jobs/").json()
    assert members["count"] == 3
    assert [j["name"] for j in members["results"]] == ["sweep-0", "sweep-1", "sweep-2"]


def test_group_cancel_cancels_every_live_member_and_frees_gpus(platform, api_as):
    from scheduler.loop.cycle import run_cycle

    alice = api_as(platform["alice"])
    array_id = post_array(alice, count=4).json()["id"]
    run_cycle(sync=False)  # 4 one-GPU jobs fit: they start and hold GPUs
    running = Job.objects.filter(array_id=array_id, state=JobState.RUNNING).count()
    assert running == 4
    done = Job.objects.filter(array_id=array_id).order_by("array_index").first()
    Job.objects.filter(pk=done.pk).update(state=JobState.SUCCEEDED)
    Allocation.objects.filter(job=done).update(ended_at=done.submitted_at)

    assert (
        api_as(platform["charlie"]).post(f"/api/v1/job-arrays/{array_id}/cancel/").status_code
        == 403
    )
    response = alice.post(f"/api/v1/job-arrays/{array_id}/cancel/")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["counts"]["cancelled"] == 3 and body["counts"]["succeeded"] == 1
    assert body["cancelled_at"]
    assert not Allocation.objects.filter(job__array_id=array_id, ended_at__isnull=True).exists()
    assert JobEvent.objects.filter(job__array_id=array_id, kind="cancelled").count() == 3
    # Cancelling again: nothing live is left.
    assert alice.post(f"/api/v1/job-arrays/{array_id}/cancel/").status_code == 409


def test_array_submission_is_one_bulk_write_not_n(platform, api_as, django_assert_max_num_queries):
    client = api_as(platform["alice"])
    items = [{"env": {"SEED": str(i)}} for i in range(200)]
    with django_assert_max_num_queries(40):
        response = post_array(client, items=items)
    assert response.status_code == 201
    assert Job.objects.count() == 200


@pytest.mark.engines
def test_an_array_member_is_the_job_a_single_submission_makes(platform, api_as, submit):
    # Members are written by COPY on PostgreSQL and by bulk INSERT elsewhere, single jobs by
    # save(): every column must come out the same (defaults included).
    fields = {
        "workers": 2,
        "gpus_per_worker": 2,
        "gpu_model": "h100-80gb",
        "priority_class": "research",
        "checkpoint_interval_s": 600,
        "runtime_limit_s": 7200,
        "dataset": "imagenet",
        "elastic": {"min_workers": 1, "max_workers": 4},
        "simulated_duration_s": 90.0,
        "image": "pytorch:2",
        "command": "python train.py",
    }
    single = submit(platform["alice"], **fields)
    assert single.status_code == 201, single.json()
    array = post_array(api_as(platform["alice"]), template=fields, count=1)
    assert array.status_code == 201, array.json()

    def columns(job):
        row = {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}
        for differs in ("id", "name", "env", "submitted_at", "array_id", "array_index"):
            row.pop(differs)
        return row

    member = Job.objects.get(array_id=array.json()["id"])
    assert columns(member) == columns(Job.objects.get(pk=single.json()["id"]))
    assert member.env == {"GPUPLATFORM_ARRAY_INDEX": "0"} and member.array_index == 0
