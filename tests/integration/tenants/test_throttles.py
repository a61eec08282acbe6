"""Rate limits on job submission per user and per team: 429 with Retry-After when exceeded,
generous by default, not spendable on another team's budget."""

import copy

import pytest

from scheduler.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates(settings):
    def set_rates(user=None, team=None):
        rest = copy.deepcopy(settings.REST_FRAMEWORK)
        rest["DEFAULT_THROTTLE_RATES"] = {"job_submit_user": user, "job_submit_team": team}
        settings.REST_FRAMEWORK = rest

    return set_rates


def test_default_rates_are_generous(platform, submit):
    for _ in range(30):
        assert submit(platform["alice"]).status_code == 201


def test_user_rate_gives_429_with_retry_after(platform, submit, rates):
    rates(user="3/min")
    codes = [submit(platform["alice"]).status_code for _ in range(3)]
    assert codes == [201, 201, 201]
    refused = submit(platform["alice"])
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert Job.objects.count() == 3
    # Another user is not affected, and reading is never throttled.
    assert submit(platform["bob"], team="nlp").status_code == 201
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(platform["alice"])
    assert client.get("/api/v1/jobs/").status_code == 200


def test_team_rate_is_shared_by_its_members(platform, submit, rates, vera):
    rates(team="2/min")
    assert submit(platform["alice"]).status_code == 201
    assert submit(vera).status_code == 201
    assert submit(platform["alice"]).status_code == 429
    assert submit(platform["bob"], team="nlp").status_code == 201


def test_outsiders_cannot_spend_a_teams_budget(platform, submit, rates):
    rates(team="2/min")
    for _ in range(5):  # bob names vision: refused by the service, not counted for vision
        assert submit(platform["bob"], team="vision").status_code == 400
    assert submit(platform["alice"]).status_code == 201
    assert submit(platform["alice"]).status_code == 201


def test_password_exchange_is_throttled_per_address(platform, settings):
    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], "login": "3/min"}
    settings.REST_FRAMEWORK = rest
    from rest_framework.test import APIClient

    client = APIClient()
    body = {"username": "alice", "password": "wrong"}
    codes = [client.post("/api/v1/auth/token", body, format="json").status_code for _ in range(4)]
    assert codes == [400, 400, 400, 429]
