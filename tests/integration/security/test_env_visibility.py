"""A job's environment values, one rule on every surface: those who may submit to the team see
them; a viewer of the team sees the names, every value ``(hidden)``. The stored record (which is
exported) also never holds a secret-named value, for anyone. A command's secrets (``--token=``
arguments, URL passwords, API tokens) are redacted for viewers wherever the command shows, as
the record redacts them for everyone."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from core.streams import JobsStatusPayload, JobStatusPayload
from scheduler.loop.cycle import run_cycle
from scheduler.models import Job

pytestmark = pytest.mark.django_db

# A value whose name says nothing secret: only the role rule hides it from a viewer.
PRIVATE = "s3-bucket-of-project-nightingale"
SECRET = "wandb-s3cr3t"
ENV = {"DATA_BUCKET": PRIVATE, "WANDB_API_KEY": SECRET}
COMMAND = "python train.py --wandb-token=tok-hunter2 --lr 0.1"


@pytest.fixture
def started_job(platform, submit):
    response = submit(
        platform["alice"], name="envjob", env=ENV, command=COMMAND, simulated_duration_s=10_000
    )
    assert response.status_code == 201, response.json()
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == "running"
    return job


@pytest.fixture
def array_id(platform, api_as):
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {
            "workers": 1,
            "gpus_per_worker": 1,
            "env": {"DATA_BUCKET": PRIVATE},
            "command": COMMAND,
        },
        "items": [{"env": {"LR_SCHEDULE": "cosine-private-0"}}, {"env": {"LR_SCHEDULE": "x"}}],
    }
    created = api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")
    assert created.status_code == 201, created.json()
    return created.json()["id"]


def _viewer_surfaces(job_id: int, array_id: int, api, portal) -> dict[str, str]:
    """Every job-related surface a viewer reaches, as text."""
    responses = {
        "api job": api.get(f"/api/v1/jobs/{job_id}/"),
        "api jobs": api.get("/api/v1/jobs/"),
        "api events": api.get(f"/api/v1/jobs/{job_id}/events/"),
        "api records": api.get(f"/api/v1/jobs/{job_id}/records/"),
        "api record": api.get(f"/api/v1/jobs/{job_id}/records/1/"),
        "api array": api.get(f"/api/v1/job-arrays/{array_id}/"),
        "api arrays": api.get("/api/v1/job-arrays/"),
        "api array jobs": api.get(f"/api/v1/job-arrays/{array_id}/jobs/"),
        "job page": portal.get(f"/jobs/{job_id}/"),
        "job list": portal.get("/jobs/"),
        "record export": portal.get(f"/jobs/{job_id}/records/1.json"),
        "array page": portal.get(f"/arrays/{array_id}/"),
    }
    for surface, response in responses.items():
        assert response.status_code == 200, surface
    return {surface: response.content.decode() for surface, response in responses.items()}


def test_a_viewer_sees_no_env_value_on_any_surface(platform, api_as, started_job, array_id):
    # The record (API, job page, export, gpuctl record) showed a viewer every value whose name
    # said nothing secret (DATA_BUCKET), where the array pages hid every value from them.
    portal = Client()
    portal.force_login(platform["charlie"])
    shown = _viewer_surfaces(started_job.pk, array_id, api_as(platform["charlie"]), portal)
    for surface, text in shown.items():
        assert PRIVATE not in text and SECRET not in text, surface
        assert "cosine-private-0" not in text, surface
        assert "tok-hunter2" not in text, surface
    assert json.loads(shown["api job"])["command"] == (
        "python train.py --wandb-token=[redacted] --lr 0.1"
    )
    record = json.loads(shown["api record"])
    assert record["env"]["DATA_BUCKET"] == "(hidden)"
    assert record["resubmit"]["env"] == {"DATA_BUCKET": "(hidden)", "WANDB_API_KEY": "(hidden)"}
    assert json.loads(shown["api records"])["records"][0]["env"] == record["env"]
    assert json.loads(shown["record export"])["env"] == record["env"]
    assert "DATA_BUCKET=(hidden)" in shown["job page"]
    assert "LR_SCHEDULE=(hidden)" in shown["array page"]


def test_a_member_sees_the_values_the_record_keeps(platform, api_as, started_job, array_id):
    api = api_as(platform["alice"])
    record = api.get(f"/api/v1/jobs/{started_job.pk}/records/1/").json()
    assert record["env"]["DATA_BUCKET"] == PRIVATE
    assert record["env"]["WANDB_API_KEY"] == "[redacted]"  # the stored record's own rule
    portal = Client()
    portal.force_login(platform["alice"])
    assert f"DATA_BUCKET={PRIVATE}" in portal.get(f"/jobs/{started_job.pk}/").content.decode()
    assert "cosine-private-0" in portal.get(f"/arrays/{array_id}/").content.decode()
    assert api.get(f"/api/v1/jobs/{started_job.pk}/").json()["command"] == COMMAND
    assert "tok-hunter2" in portal.get(f"/jobs/{started_job.pk}/").content.decode()
    assert api.get(f"/api/v1/job-arrays/{array_id}/").json()["template"]["command"] == COMMAND


def test_another_teams_member_gets_404_not_a_redacted_record(platform, api_as, started_job):
    api = api_as(platform["bob"])
    assert api.get(f"/api/v1/jobs/{started_job.pk}/records/1/").status_code == 404
    assert api.get(f"/api/v1/jobs/{started_job.pk}/records/").status_code == 404


def test_live_job_updates_carry_no_env():
    # Viewers join their team's group: a payload with env would reach them unredacted.
    assert "env" not in JobStatusPayload.__annotations__
    assert "env" not in JobsStatusPayload.__annotations__
