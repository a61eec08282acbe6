"""Rate limits with the cache (Redis in production) down fail open: job submissions and password
sign-ins (portal form and the API's token exchange) go on, unlimited and logged, until the cache
is back. A limit is there against floods and guessing; an outage of the cache must not stop the
platform taking work or lock out the admins who sign in to repair it. What a password attempt
costs (the hash) still bounds guessing meanwhile."""

from __future__ import annotations

import copy
import logging

import pytest
from django.test import Client

from scheduler.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def strict_rates(settings):
    """Limits that the requests below would pass at once with a working cache."""
    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {
        **rest["DEFAULT_THROTTLE_RATES"],
        "job_submit_user": "1/min",
        "job_submit_team": "1/min",
        "login": "1/min",
        "login_address": "1/min",
    }
    settings.REST_FRAMEWORK = rest


def test_job_submissions_go_on_unlimited_with_the_cache_down(
    platform, submit, strict_rates, cache_down, caplog
):
    with caplog.at_level(logging.WARNING, logger="tenants.throttles"):
        codes = [submit(platform["alice"]).status_code for _ in range(3)]
    assert codes == [201, 201, 201]
    assert Job.objects.count() == 3
    assert "rate limit job_submit_user skipped: cache unavailable" in caplog.messages


def test_password_sign_ins_go_on_with_the_cache_down(platform, strict_rates, cache_down, caplog):
    client = Client()
    with caplog.at_level(logging.WARNING, logger="tenants.throttles"):
        wrong = [
            client.post("/login/", {"username": "alice", "password": "x"}).status_code
            for _ in range(3)
        ]
        assert wrong == [200, 200, 200]  # the form again, not a 429 or a 500
        assert (
            client.post("/login/", {"username": "alice", "password": "pw-alice"}).status_code == 302
        )
        assert "_auth_user_id" in client.session
        body = {"username": "alice", "password": "pw-alice"}
        token = Client().post("/api/v1/auth/token", body, content_type="application/json")
    assert token.status_code == 201, token.content
    assert "password limit login skipped: cache unavailable" in caplog.messages
    assert "password limit login not counted: cache unavailable" in caplog.messages


def test_the_job_page_and_the_loops_rates_answer_with_the_cache_down(platform, submit, cache_down):
    """The checkpoint advice (the job page, the loop's enforce stage) and the routing facts (the
    snapshot) read rates the cache keeps; with the cache down they are computed from the database
    instead of raising the cache client's error."""
    from django.utils import timezone

    from scheduler.checkpoint_advice import observed_rates
    from scheduler.routing_facts import spot_interruption_rates

    job_id = submit(platform["alice"]).json()["id"]
    client = Client()
    client.force_login(platform["alice"])
    assert client.get(f"/jobs/{job_id}/").status_code == 200
    now = timezone.now()
    assert observed_rates(now=now) == {}
    assert spot_interruption_rates(now=now) == {}
