"""``gpuctl estimate`` against a live test server: when a job would start and finish if it were
submitted now, and whether it would make its deadline; the same flags and exit codes as
``submit``, and nothing is submitted."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_that_fits_starts_now_and_makes_its_deadline(as_alice):
    due = (timezone.now() + timedelta(hours=3)).isoformat()
    result = as_alice(
        "estimate", "-J", "fits", "-N", "1", "--gpus-per-worker", "1", "--runtime-limit", "1h",
        "--deadline", due,
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.out.startswith("likely done by ")
    assert "(starts now, runs about 3600 s by your runtime limit)" in result.out
    assert "that is before its deadline" in result.out
    assert result.out.endswith("(nothing was submitted)\n")
    assert not Job.objects.exists()


def test_a_job_that_will_miss_its_deadline_is_told_and_json_says_so(as_alice):
    due = (timezone.now() + timedelta(hours=1)).isoformat()
    result = as_alice(
        "estimate", "-J", "late", "-N", "1", "--gpus-per-worker", "1", "--runtime-limit", "3h",
        "--deadline", due, "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert body["meets_deadline"] is False and body["starts_now"] is True
    assert not Job.objects.exists()


def test_bad_input_exits_2_naming_the_flag(as_alice):
    result = as_alice(
        "estimate", "-J", "bad", "-N", "1", "--gpus-per-worker", "1", "--region", "mars"
    )
    assert result.code == 2
    assert "--region" in result.err and "no cluster is in region 'mars'" in result.err
