"""The portal include that groups job-array members under one header row (no extra queries)."""

import pytest
from django.template.loader import render_to_string

from scheduler.arrays import ArrayRequest, array_submit
from scheduler.selectors import job_list
from scheduler.services import JobRequest, job_submit

pytestmark = pytest.mark.django_db


def test_array_members_are_grouped_and_single_jobs_listed_plainly(
    platform, django_assert_num_queries
):
    alice = platform["alice"]
    job_submit(
        user=alice, request=JobRequest(name="solo", team="vision", workers=1, gpus_per_worker=1)
    )
    array = array_submit(
        user=alice,
        request=ArrayRequest(
            name="lr", team="vision", template={"workers": 1, "gpus_per_worker": 1}, items=[{}] * 3
        ),
    )
    jobs = list(job_list(user=alice))
    with django_assert_num_queries(0):
        html = render_to_string(
            "frontend/_array_group.html", {"jobs": jobs, "show_submitter": True}
        )
    assert html.count('class="array-group"') == 1
    assert f"Job array #{array.pk}" in html and "3 jobs shown, indices 0–2" in html
    assert html.count('class="array-member"') == 3
    assert "solo" in html and html.count("data-job=") == 4
