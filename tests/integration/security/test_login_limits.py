"""Password guessing is slowed at both doors, and the address a guess is counted under is the
client's, not one it chooses (issue 26, finding 7; tokens' no-store from finding 14)."""

from __future__ import annotations

import copy

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates(settings):
    def set_rates(**scopes):
        rest = copy.deepcopy(settings.REST_FRAMEWORK)
        rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], **scopes}
        settings.REST_FRAMEWORK = rest

    return set_rates


def _portal_login(client, password, **extra):
    return client.post("/login/", {"username": "alice", "password": password}, **extra)


def test_the_portal_login_refuses_the_right_password_after_too_many_wrong_ones(platform):
    client = Client()
    codes = [_portal_login(client, "wrong").status_code for _ in range(40)]
    assert codes[:10] == [200] * 10  # the form again, "wrong username or password"
    assert set(codes[10:]) == {429}
    right = _portal_login(client, "pw-alice")
    assert right.status_code == 429 and int(right["Retry-After"]) >= 1
    assert "Too many sign-in attempts" in right.content.decode()
    assert "_auth_user_id" not in client.session  # not signed in
    # Another user at the same address is not locked out by alice's attacker...
    bob = Client().post("/login/", {"username": "bob", "password": "pw-bob"})
    assert bob.status_code == 302


def test_both_doors_share_one_budget(platform, rates):
    rates(login="4/min")
    client = Client()
    for _ in range(2):
        assert _portal_login(client, "wrong").status_code == 200
    body = {"username": "alice", "password": "wrong"}
    api = [
        client.post("/api/v1/auth/token", body, content_type="application/json").status_code
        for _ in range(3)
    ]
    assert api == [400, 400, 429]
    assert _portal_login(client, "pw-alice").status_code == 429


def test_an_address_spraying_usernames_is_limited_too(platform, rates):
    rates(login="100/min", login_address="5/min")
    client = Client()
    codes = [
        client.post("/login/", {"username": f"user{i}", "password": "x"}).status_code
        for i in range(7)
    ]
    assert codes == [200] * 5 + [429] * 2


def test_a_client_chosen_forwarded_for_is_ignored_without_a_trusted_proxy(platform, rates):
    rates(login="5/min")
    client = Client()
    body = {"username": "alice", "password": "wrong"}
    codes = [
        client.post(
            "/api/v1/auth/token",
            body,
            content_type="application/json",
            HTTP_X_FORWARDED_FOR=f"10.0.0.{i}",
        ).status_code
        for i in range(7)
    ]
    assert codes == [400] * 5 + [429] * 2  # before the fix: seven 400s, no 429


def test_a_trusted_proxy_reports_the_client_and_only_its_own_entry_counts(
    platform, rates, settings
):
    settings.TRUSTED_PROXIES = ["127.0.0.0/8"]  # the test client's peer address is 127.0.0.1
    rates(login="3/min")
    body = {"username": "alice", "password": "wrong"}

    def attempt(forwarded):
        return Client().post(
            "/api/v1/auth/token",
            body,
            content_type="application/json",
            HTTP_X_FORWARDED_FOR=forwarded,
        )

    # The proxy appended the real client (198.51.100.7); what the client put left of it is noise.
    codes = [attempt(f"203.0.113.{i}, 198.51.100.7").status_code for i in range(4)]
    assert codes == [400, 400, 400, 429]
    # A different real client behind the same proxy has its own budget.
    assert attempt("198.51.100.8").status_code == 400


def test_client_address_rules(settings, rf):
    from tenants.throttles import client_address

    settings.TRUSTED_PROXIES = []
    request = rf.get("/", REMOTE_ADDR="192.0.2.1", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert client_address(request) == "192.0.2.1"
    settings.TRUSTED_PROXIES = ["192.0.2.0/24", "10.1.1.1"]
    assert client_address(request) == "203.0.113.5"
    chained = rf.get(
        "/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="spoof, 203.0.113.5, 192.0.2.9"
    )
    assert client_address(chained) == "203.0.113.5"
    garbage = rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="not-an-ip")
    assert client_address(garbage) == "10.1.1.1"
    untrusted_peer = rf.get("/", REMOTE_ADDR="198.51.100.1", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert client_address(untrusted_peer) == "198.51.100.1"


def test_token_responses_are_never_cached(platform):
    created = Client().post(
        "/api/v1/auth/token",
        {"username": "alice", "password": "pw-alice"},
        content_type="application/json",
    )
    assert created.status_code == 201
    assert "no-store" in created["Cache-Control"] and "private" in created["Cache-Control"]
    client = Client()
    client.force_login(platform["alice"])
    api = client.post("/api/v1/tokens/", {"name": "cli"}, content_type="application/json")
    assert "no-store" in api["Cache-Control"]
    page = client.post("/teams/tokens/", {"name": "portal"})
    assert "no-store" in page["Cache-Control"]


def test_only_failed_attempts_count(platform):
    for _ in range(15):  # a user (or a script) signing in often is never held back
        assert (
            Client().post("/login/", {"username": "alice", "password": "pw-alice"}).status_code
            == 302
        )
    assert _portal_login(Client(), "wrong").status_code == 200
