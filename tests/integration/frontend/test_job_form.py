"""The job submission form (frontend.forms + the job_new view): a valid form queues exactly the
job asked for; every refusal comes from job_submit, shows next to its field, writes nothing and
is never a 500."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from scheduler.models import Job

pytestmark = pytest.mark.django_db

VALID = {
    "name": "resnet-sweep",
    "team": "vision",
    "image": "registry/train:1.4",
    "command": "python train.py",
    "workers": "2",
    "gpus_per_worker": "4",
    "gpu_model": "h100-80gb",
    "priority_class": "research",
    "preemptible": "no",
    "checkpoint_interval_s": "600",
    "runtime_limit_s": "7200",
    "dataset": "imagenet",
    "elastic_min_workers": "1",
    "elastic_max_workers": "3",
    "simulated_duration_s": "90",
}


def post(user, **changes):
    client = Client()
    client.force_login(user)
    data = {**VALID, **changes}
    return client.post("/jobs/new/", {k: v for k, v in data.items() if v is not None})


def errors_for(html: str, field: str) -> list[str]:
    block = re.search(rf'data-errors-for="{field}">(.*?)</ul>', html, re.S)
    return re.findall(r"<li>(.*?)</li>", block.group(1)) if block else []


def test_form_offers_only_my_teams_and_labels_every_field(platform):
    client = Client()
    client.force_login(platform["alice"])
    html = client.get("/jobs/new/").content.decode()
    assert re.findall(
        r'<option value="([^"]*)"', html.split('name="team"')[1].split("</select>")[0]
    ) == ["vision"]
    for field in VALID:
        assert f'<label for="id_{field}">' in html, field
    assert 'id="gpu-preview"' in html


def test_valid_form_queues_the_job_and_opens_its_page(platform):
    response = post(platform["alice"])
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.name, job.team.slug, job.submitter.username) == ("resnet-sweep", "vision", "alice")
    assert (job.workers, job.gpus_per_worker, job.gpu_model.name) == (2, 4, "h100-80gb")
    assert (job.priority_class.name, job.preemptible) == ("research", False)
    assert (job.checkpoint_interval_s, job.runtime_limit_s, job.dataset) == (600, 7200, "imagenet")
    assert job.elastic == {"min_workers": 1, "max_workers": 3}
    assert job.simulated_duration_s == 90.0 and job.state == "pending"


def test_preemptible_default_follows_the_priority_class(platform):
    post(platform["alice"], preemptible="", priority_class="production")
    assert Job.objects.get().preemptible is False  # production is not preemptible by default


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"gpus_per_worker": "16"}, "gpus_per_worker", "more than a h100-80gb node has (8)"),
        ({"team": "nlp"}, "team", "you are not a member of a team"),
        ({"gpu_model": "tpu-v5"}, "gpu_model", "unknown GPU model"),
        ({"priority_class": "vip"}, "priority_class", "unknown priority class"),
        ({"workers": "0"}, "workers", "must be &gt;= 1"),
        ({"workers": "5"}, "workers", "must lie within the elastic range 1..3"),
        (
            {"elastic_max_workers": ""},
            "elastic_max_workers",
            "must be an integer &gt;= min_workers",
        ),
        ({"elastic_min_workers": ""}, "elastic_min_workers", "must be an integer &gt;= 1"),
        ({"runtime_limit_s": "0"}, "runtime_limit_s", "must be &gt;= 1 second"),
    ],
)
def test_service_errors_show_inline_and_write_nothing(platform, changes, field, message):
    response = post(platform["alice"], **changes)
    html = response.content.decode()
    assert response.status_code == 400
    assert any(message in error for error in errors_for(html, field)), errors_for(html, field)
    tag = re.search(rf'<(?:input|select)\b[^>]*id="id_{field}"[^>]*>', html).group(0)
    assert 'aria-invalid="true"' in tag and f"id_{field}_errors" in tag
    assert 'role="alert"' in html
    assert not Job.objects.exists()


def test_typing_errors_are_inline_and_the_form_keeps_the_input(platform):
    response = post(platform["alice"], workers="two", name="")
    html = response.content.decode()
    assert response.status_code == 400
    assert errors_for(html, "workers") == ["Enter a whole number."]
    assert errors_for(html, "name") == ["This field is required."]
    assert 'value="registry/train:1.4"' in html
    assert not Job.objects.exists()


def test_viewer_cannot_submit(platform):
    response = post(platform["charlie"])
    assert "viewers cannot submit jobs" in " ".join(errors_for(response.content.decode(), "team"))
    assert not Job.objects.exists()


def test_the_preview_counts_gpus(platform):
    html = post(platform["alice"], gpus_per_worker="16").content.decode()
    assert re.search(r'id="gpu-preview"[^>]*>32 GPUs \(elastic 16–48\)', html)
