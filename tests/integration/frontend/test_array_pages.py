"""Job arrays in the portal: grouped under one header in the job list, the array page (counts,
members by page, "Cancel all" for roles that may cancel), its JSON state, and array submission
from the new-job form, all or nothing."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from scheduler.arrays import ArrayRequest, array_submit
from scheduler.models import Job, JobArray
from scheduler.services import JobRequest, job_submit

pytestmark = pytest.mark.django_db

FORM = {
    "name": "lr-sweep",
    "team": "vision",
    "image": "registry/train:1.4",
    "command": "python train.py",
    "workers": "1",
    "gpus_per_worker": "2",
    "gpu_model": "h100-80gb",
    "priority_class": "research",
}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def make_array(user, n=3, team="vision", name="lr", **template):
    return array_submit(
        user=user,
        request=ArrayRequest(
            name=name,
            team=team,
            template={"workers": 1, "gpus_per_worker": 1, **template},
            items=[{"env": {"LR": str(10**-i)}} for i in range(n)],
        ),
    )


def post_form(user, **changes):
    data = {**FORM, **changes}
    return client_for(user).post("/jobs/new/", {k: v for k, v in data.items() if v is not None})


def errors_for(html: str, field: str) -> list[str]:
    block = re.search(rf'data-errors-for="{field}">(.*?)</ul>', html, re.S)
    return re.findall(r"<li>(.*?)</li>", block.group(1)) if block else []


# --- job list ----------------------------------------------------------------------------------


def test_job_list_groups_array_members_under_a_header_with_counts(platform):
    alice = platform["alice"]
    job_submit(
        user=alice, request=JobRequest(name="solo", team="vision", workers=1, gpus_per_worker=1)
    )
    array = make_array(alice, n=3)
    Job.objects.filter(array=array, array_index=0).update(state="cancelled")
    make_array(platform["bob"], team="nlp", name="bobs-secret-sweep")

    html = client_for(alice).get("/jobs/").content.decode()
    headers = re.findall(r'<tr class="array-group" data-array="(\d+)">(.*?)</tr>', html, re.S)
    assert [int(pk) for pk, _ in headers] == [array.pk]
    header = headers[0][1]
    assert f'href="/arrays/{array.pk}/"' in header and "lr" in header
    assert re.findall(r'data-count="(\w+)">(\d+)', header) == [("pending", "2"), ("cancelled", "1")]
    assert html.count('class="array-member"') == 3 and html.count("data-job=") == 4
    assert "shown" not in header  # the whole array is listed
    assert "bobs-secret-sweep" not in html
    # Filtered, the header keeps the array's totals and says how much of it the list shows.
    filtered = client_for(alice).get("/jobs/?state=cancelled").content.decode()
    assert "1 job shown, indices 0–0" in filtered and 'data-count="pending">2' in filtered


# --- array page --------------------------------------------------------------------------------


def test_array_page_shows_template_counts_members_and_cancel_for_members(platform):
    array = make_array(platform["alice"], n=3, gpu_model="h100-80gb")
    response = client_for(platform["alice"]).get(f"/arrays/{array.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "<h1>lr " in html and "h100-80gb" in html
    assert re.search(r'data-count="pending">3 pending', html)
    assert re.search(r'data-count="running">0 running', html)
    members = re.findall(
        r'<tr data-job="(\d+)" data-array="\d+">\s*<td class="num">(\d+)</td>', html
    )
    assert [int(index) for _pk, index in members] == [0, 1, 2]
    assert "<code>LR=0.01</code>" in html
    assert f'action="/arrays/{array.pk}/cancel/"' in html and "Yes, cancel 3 jobs" in html


def test_array_page_paginates_members_by_index(platform):
    array = make_array(platform["alice"], n=60)
    client = client_for(platform["alice"])
    first = client.get(f"/arrays/{array.pk}/").content.decode()
    second = client.get(f"/arrays/{array.pk}/?page=2").content.decode()
    index = r'<tr data-job="\d+" data-array="\d+">\s*<td class="num">(\d+)</td>'
    assert [int(i) for i in re.findall(index, first)] == list(range(50))
    assert [int(i) for i in re.findall(index, second)] == list(range(50, 60))
    assert "1–50 of 60" in first and "Page 2 of 2" in second


def test_viewer_sees_no_cancel_button_and_their_post_is_403(platform):
    array = make_array(platform["alice"])
    charlie = client_for(platform["charlie"])
    html = charlie.get(f"/arrays/{array.pk}/").content.decode()
    assert "data-count" in html and "cancel/" not in html
    response = charlie.post(f"/arrays/{array.pk}/cancel/")
    assert response.status_code == 403
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"pending"}
    assert JobArray.objects.get(pk=array.pk).cancelled_at is None


@pytest.mark.parametrize("path", ["", "state/"])
def test_another_teams_array_is_404(platform, path):
    array = make_array(platform["alice"])
    assert client_for(platform["bob"]).get(f"/arrays/{array.pk}/{path}").status_code == 404
    assert client_for(platform["bob"]).get(f"/arrays/{array.pk + 999}/{path}").status_code == 404
    assert client_for(platform["admin"]).get(f"/arrays/{array.pk}/{path}").status_code == 200


def test_another_teams_cancel_is_404_and_cancels_nothing(platform):
    array = make_array(platform["alice"])
    assert client_for(platform["bob"]).post(f"/arrays/{array.pk}/cancel/").status_code == 404
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"pending"}


def test_cancel_all_cancels_every_live_member_and_keeps_finished_ones(platform):
    array = make_array(platform["alice"], n=4)
    Job.objects.filter(array=array, array_index=3).update(state="succeeded")
    client = client_for(platform["alice"])
    response = client.post(f"/arrays/{array.pk}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/arrays/{array.pk}/"
    states = dict(Job.objects.filter(array=array).values_list("array_index", "state"))
    assert states == {0: "cancelled", 1: "cancelled", 2: "cancelled", 3: "succeeded"}
    html = client.get(response["Location"]).content.decode()
    assert "every live job cancelled" in html and "Cancel all" not in html
    # A second cancel is refused with a message, not an error page.
    again = client.post(f"/arrays/{array.pk}/cancel/", follow=True)
    assert again.status_code == 200 and "Not cancelled: no job of this array is live" in (
        again.content.decode()
    )


def test_array_state_json_gives_totals_per_state(platform):
    array = make_array(platform["alice"], n=3)
    Job.objects.filter(array=array, array_index=1).update(state="running")
    data = client_for(platform["charlie"]).get(f"/arrays/{array.pk}/state/").json()
    assert data["array"] == array.pk and data["size"] == 3
    assert data["counts"]["pending"] == 2 and data["counts"]["running"] == 1
    assert data["counts"]["cancelled"] == 0


def test_array_page_queries_do_not_grow_with_the_page(platform):
    small = make_array(platform["alice"], n=5)
    big = make_array(platform["alice"], n=50)
    client = client_for(platform["alice"])

    def count(array):
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/arrays/{array.pk}/").status_code == 200
        return len(captured.captured_queries)

    few, many = count(small), count(big)
    assert many <= few, (few, many)
    assert many <= 8, many


def test_job_list_queries_do_not_grow_with_the_number_of_arrays(platform):
    client = client_for(platform["alice"])
    make_array(platform["alice"], n=2)

    def count():
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/jobs/").status_code == 200
        return len(captured.captured_queries)

    few = count()
    for _ in range(20):
        make_array(platform["alice"], n=2)
    many = count()
    assert many <= few, (few, many)


# --- submission from the form ------------------------------------------------------------------


def test_form_submits_an_array_with_per_index_env_and_fields(platform):
    response = post_form(
        platform["alice"],
        array_count="3",
        array_params="lr=0.1, 0.01,0.001\nruntime_limit_s=60,120,180\n",
    )
    array = JobArray.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/arrays/{array.pk}/"
    assert (array.name, array.size, array.team.slug, array.submitter) == (
        "lr-sweep",
        3,
        "vision",
        platform["alice"],
    )
    jobs = list(Job.objects.filter(array=array).order_by("array_index"))
    assert [j.name for j in jobs] == ["lr-sweep-0", "lr-sweep-1", "lr-sweep-2"]
    assert [j.env["lr"] for j in jobs] == ["0.1", "0.01", "0.001"]
    assert [j.env["GPUPLATFORM_ARRAY_INDEX"] for j in jobs] == ["0", "1", "2"]
    assert [j.runtime_limit_s for j in jobs] == [60, 120, 180]
    assert {(j.gpus_per_worker, j.gpu_model.name, j.image) for j in jobs} == {
        (2, "h100-80gb", "registry/train:1.4")
    }


def test_form_submits_an_array_with_a_deadline(platform):
    from datetime import timedelta

    from django.utils import timezone

    due = (timezone.now() + timedelta(days=1)).replace(second=0, microsecond=0)
    response = post_form(
        platform["alice"], array_count="2", deadline=due.strftime("%Y-%m-%dT%H:%M")
    )
    array = JobArray.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/arrays/{array.pk}/"
    assert [j.deadline for j in Job.objects.filter(array=array)] == [due, due]


def test_form_array_size_defaults_to_the_parameter_count(platform):
    post_form(platform["alice"], array_params="seed=1,2,3,4")
    assert JobArray.objects.get().size == 4 and Job.objects.count() == 4


def test_form_count_alone_makes_n_equal_jobs(platform):
    post_form(platform["alice"], array_count="5")
    assert Job.objects.filter(array__size=5).count() == 5


def test_form_without_array_fields_still_submits_one_job(platform):
    response = post_form(platform["alice"])
    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/" and job.array_id is None
    assert not JobArray.objects.exists()


def test_one_bad_index_shows_its_error_and_creates_nothing(platform):
    response = post_form(platform["alice"], array_count="3", array_params="gpus_per_worker=2,16,4")
    html = response.content.decode()
    assert response.status_code == 400
    errors = errors_for(html, "array_params")
    assert errors == [
        "index 1: gpus_per_worker: 16 GPUs per worker is more than a h100-80gb node has (8)"
    ]
    assert "Nothing was submitted" in html and 'role="alert"' in html
    assert not Job.objects.exists() and not JobArray.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"array_count": "3", "array_params": "lr=0.1,0.01"},
            "array_params",
            "lr has 2 values but the array has 3 indices",
        ),
        ({"array_params": "lr"}, "array_params", "line 1: write NAME=value0,value1,…"),
        (
            {"array_params": "9lives=1,2"},
            "array_params",
            "neither a job field nor a valid environment variable",
        ),
        (
            {"array_params": "workers=1,two"},
            "array_params",
            "index 1: workers must be an integer, not &#x27;two&#x27;",
        ),
        (
            {"array_params": "image=registry/a:1," + "x" * 301},
            "array_params",
            "index 1: image must be at most 300 characters (it has 301)",
        ),
        (
            {"array_params": "dataset=" + "d" * 201 + ",imagenet"},
            "array_params",
            "index 0: dataset must be at most 200 characters (it has 201)",
        ),
        (
            {"name": "n" * 199, "array_count": "12"},
            "name",
            "at most 197 characters for an array of 12",
        ),
        (
            {"array_params": "dataset_version=v1,v2"},
            "array_params",
            "line 1: dataset_version is a job field that cannot vary by index here",
        ),
        ({"array_count": "0"}, "array_count", "greater than or equal to 1"),
        ({"array_count": "10001"}, "array_count", "less than or equal to 10000"),
        ({"array_count": "2", "gpu_model": "tpu-v5"}, "gpu_model", "unknown GPU model"),
        ({"array_count": "2", "team": "nlp"}, "team", "you are not a member of a team"),
    ],
)
def test_bad_array_input_is_inline_and_creates_nothing(platform, changes, field, message):
    response = post_form(platform["alice"], **changes)
    html = response.content.decode()
    assert response.status_code == 400
    assert any(message in e for e in errors_for(html, field)), errors_for(html, field)
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_viewer_cannot_submit_an_array(platform):
    response = post_form(platform["charlie"], array_count="2")
    assert "viewers cannot submit jobs" in " ".join(errors_for(response.content.decode(), "team"))
    assert not JobArray.objects.exists() and not Job.objects.exists()
