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


@pytest.fixture(autouse=True)
def vision_may_opt_out_of_preemption(teams):
    """The specs and forms here ask for preemptible: false in a class whose jobs are
    preemptible, which needs the team's permission (its quota settings)."""
    from tenants.models import TeamEntitlements

    TeamEntitlements.objects.create(team=teams["vision"], may_opt_out_of_preemption=True)


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
        ({"workers": "0"}, "workers", "greater than or equal to 1"),
        ({"workers": "5"}, "workers", "must lie within the elastic range 1..3"),
        (
            {"elastic_max_workers": ""},
            "elastic_max_workers",
            "is required for an elastic job",
        ),
        ({"elastic_min_workers": ""}, "elastic_min_workers", "is required for an elastic job"),
        (
            {"elastic_min_workers": "3", "elastic_max_workers": "2"},
            "elastic_max_workers",
            "must be &gt;= min_workers",
        ),
        ({"runtime_limit_s": "0"}, "runtime_limit_s", "greater than or equal to 1"),
        ({"runtime_limit_s": "99999999999"}, "runtime_limit_s", "less than or equal to 31622400"),
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


def test_estimate_finish_says_when_at_current_load_and_writes_nothing(platform):
    from datetime import timedelta

    from django.utils import timezone

    # An empty cluster: it would start now and, by its 2 h limit, finish in 2 h.
    due = (timezone.now() + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M")
    response = post(platform["alice"], estimate="1", deadline=due)
    html = response.content.decode()
    assert response.status_code == 200, html
    finish = timezone.now() + timedelta(hours=2)
    assert f"Likely done by {finish:%a %H:}" in html
    assert "by your runtime limit" in html and "That is before its deadline" in html
    assert "Nothing was submitted" in html and Job.objects.count() == 0

    # A deadline 1 h away cannot be met by a 2 h job.
    soon = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    html = post(platform["alice"], estimate="1", deadline=soon).content.decode()
    assert "data-deadline-miss" in html and Job.objects.count() == 0


def test_a_deadline_in_the_past_is_refused_next_to_its_field(platform):
    response = post(platform["alice"], deadline="2001-01-01T10:00")
    assert response.status_code == 400
    assert errors_for(response.content.decode(), "deadline") == ["must be in the future"]
    assert Job.objects.count() == 0


def test_the_deadline_is_stored_with_the_job(platform):
    from datetime import timedelta

    from django.utils import timezone

    due = (timezone.now() + timedelta(days=1)).replace(second=0, microsecond=0)
    response = post(platform["alice"], deadline=due.strftime("%Y-%m-%dT%H:%M"))
    assert response.status_code == 302
    assert Job.objects.get().deadline == due
