"""``POST /api/v1/jobs/estimate/``: the submit form's finish estimate for the API and gpuctl.
Same checks as a submission, nothing written."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Job

pytestmark = pytest.mark.django_db


def estimate(api_as, user, **fields):
    body = {"name": "train", "team": "vision", "workers": 1, "gpus_per_worker": 1}
    body.update(fields)
    return api_as(user).post("/api/v1/jobs/estimate/", body, format="json")


def test_a_job_that_fits_starts_now_and_makes_its_deadline(platform, api_as):
    due = timezone.now() + timedelta(hours=3)
    response = estimate(api_as, platform["alice"], runtime_limit_s=3600, deadline=due.isoformat())
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["starts_now"] is True and body["meets_deadline"] is True
    assert (body["runtime_s"], body["runtime_source"]) == (3600.0, "your runtime limit")
    assert not Job.objects.exists()


def test_a_job_that_cannot_make_its_deadline_is_told_before_it_exists(platform, api_as):
    due = timezone.now() + timedelta(hours=1)
    response = estimate(
        api_as, platform["alice"], runtime_limit_s=3 * 3600, deadline=due.isoformat()
    )
    assert response.status_code == 200
    assert response.json()["meets_deadline"] is False
    assert not Job.objects.exists()


def test_bad_input_is_the_submissions_400(platform, api_as):
    response = estimate(api_as, platform["alice"], gpus_per_worker=0)
    assert response.status_code == 400
    assert "gpus_per_worker" in response.json()
    other_team = estimate(api_as, platform["alice"], team="nosuch")
    assert other_team.status_code == 400
    assert other_team.json()["team"] == ["you are not a member of a team 'nosuch'"]
    assert estimate(api_as, None).status_code in (401, 403)
