"""API tokens of single sign-on users follow the directory: a token works only while the
provider confirmed its user (a login, or a successful silent re-check of a session) at most
``OIDC_TOKEN_CONFIRMATION_DAYS`` ago. Before, a user removed from the directory kept using the
API with their tokens for ever: tokens never go to the provider.

The provider is the real one of the browser test (the certified `oidc-provider` package run with
Node.js, tests/e2e/test_sso.py), driven here without a browser: the test follows its redirects
and fills its login form with an HTTP client, and hands the code back to the platform's
callback, so every login and re-check below is the platform's own code exchange with it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from datetime import timedelta
from urllib.parse import urljoin, urlsplit

import pytest
import requests
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIRequestFactory

from tenants.authentication import ApiTokenAuthentication
from tenants.models import ApiToken, SsoIdentity
from tenants.services import token_create
from tests.e2e.conftest import ROOT, _free_port, stop, wait_http
from tests.e2e.test_sso import (
    CLIENT_ID,
    CLIENT_SECRET,
    DORA_PASSWORD,
    PROVIDER_DIR,
    _install_provider,
    _require,
    _write_directory,
)

pytestmark = pytest.mark.django_db

CALLBACK = "http://testserver/oidc/callback/"  # the test client's host, as the views build it
STALE = timedelta(days=31)  # past the default limit of 30 days


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    """The real OpenID provider on a free port, dora in its directory (group ml-vision)."""
    _require(shutil.which("node") is not None, "node is missing: cannot run oidc-provider")
    _install_provider()
    work = tmp_path_factory.mktemp("idp")
    directory = work / "directory.json"
    _write_directory(directory, ["ml-vision"])
    port = _free_port()
    issuer = f"http://127.0.0.1:{port}"
    log = work / "provider.log"
    process = subprocess.Popen(
        ["node", "provider.mjs"],
        cwd=PROVIDER_DIR,
        env={
            **os.environ,
            "PORT": str(port),
            "ISSUER": issuer,
            "DIRECTORY": str(directory),
            "CLIENT_ID": CLIENT_ID,
            "CLIENT_SECRET": CLIENT_SECRET,
            "REDIRECT_URI": CALLBACK,
            "POST_LOGOUT_REDIRECT_URI": "http://testserver/login/",
        },
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"{issuer}/.well-known/openid-configuration", process, log, "oidc-provider")
        discovery = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=10).json()
        yield {"discovery": discovery, "directory": directory}
    finally:
        stop(process)


@pytest.fixture
def sso(settings, idp, rules):
    """Single sign-on configured for the provider as settings.py turns it on; dora in it."""
    discovery = idp["discovery"]
    _write_directory(idp["directory"], ["ml-vision"])
    settings.SSO_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_OP_ISSUER = discovery["issuer"]
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = discovery["authorization_endpoint"]
    settings.OIDC_OP_TOKEN_ENDPOINT = discovery["token_endpoint"]
    settings.OIDC_OP_USER_ENDPOINT = discovery["userinfo_endpoint"]
    settings.OIDC_OP_JWKS_ENDPOINT = discovery["jwks_uri"]
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_TOKEN_CONFIRMATION_DAYS = 30
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "tenants.sso.SsoBackend"]
    at = settings.MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE[:at],
        "tenants.sso.SessionRefresh",
        *settings.MIDDLEWARE[at:],
    ]
    yield settings
    _write_directory(idp["directory"], ["ml-vision"])


def _through_provider(client: Client, browser: requests.Session, location: str):
    """Follow ``location`` (the platform's redirect to the provider) as a browser would, signing
    in on the provider's form when it asks, until the provider sends the browser back to the
    callback; returns the platform's answer there."""
    url = location
    for _step in range(12):
        if url.startswith(CALLBACK):
            parts = urlsplit(url)
            return client.get(f"{parts.path}?{parts.query}")
        page = browser.get(url, allow_redirects=False, timeout=10)
        if page.is_redirect:
            url = urljoin(url, page.headers["Location"])
            continue
        form = re.search(r'<form method="post" action="([^"]+)"', page.text)
        assert form, f"the provider answered {page.status_code}: {page.text[:500]}"
        page = browser.post(
            urljoin(url, form.group(1)),
            data={"login": "dora", "password": DORA_PASSWORD},
            allow_redirects=False,
            timeout=10,
        )
        assert page.is_redirect, page.text[:500]
        url = urljoin(url, page.headers["Location"])
    raise AssertionError("the provider never sent the browser back")


def _sign_in(client: Client, browser: requests.Session) -> None:
    """dora signs in to the portal with single sign-on."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302, start
    done = _through_provider(client, browser, start["Location"])
    assert done.status_code == 302 and done["Location"] == "/", done
    assert "_auth_user_id" in client.session


def _age_confirmation(by: timedelta) -> None:
    SsoIdentity.objects.filter(user__username="dora").update(last_login_at=timezone.now() - by)


def _me(raw: str):
    return Client().get("/api/v1/auth/me", HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture
def dora_token(sso):
    """dora signed in through the provider (a portal session and its provider session) and a
    token she made."""
    client, browser = Client(), requests.Session()
    _sign_in(client, browser)
    dora = SsoIdentity.objects.get(user__username="dora").user
    token, raw = token_create(user=dora, name="laptop")
    return {"client": client, "browser": browser, "token": token, "raw": raw}


def test_a_token_needs_a_recent_sign_in_and_works_again_after_one(dora_token):
    raw = dora_token["raw"]
    assert _me(raw).status_code == 200
    used_at = ApiToken.objects.get(pk=dora_token["token"].pk).last_used_at

    _age_confirmation(STALE)
    ApiToken.objects.filter(pk=dora_token["token"].pk).update(last_used_at=None)
    refused = _me(raw)
    assert refused.status_code == 401
    body = refused.json()
    assert body["code"] == "sso_sign_in_required"
    assert body["detail"].startswith(
        "sign in to the portal to confirm your account; API tokens of single-sign-on users "
        "need a sign-in every 30 days"
    )
    # Refused, not revoked, and no use recorded for the refused request.
    token = ApiToken.objects.get(pk=dora_token["token"].pk)
    assert token.revoked_at is None
    assert token.last_used_at is None and used_at is not None

    # A new sign-in with the provider makes the same token work again.
    _sign_in(Client(), requests.Session())
    assert _me(raw).status_code == 200

    # Exactly at the limit it still works: "at most N days old".
    _age_confirmation(timedelta(days=30) - timedelta(minutes=1))
    assert _me(raw).status_code == 200


def test_a_silent_session_recheck_confirms_and_a_removed_user_stays_refused(dora_token, idp):
    """The session re-check with the provider (prompt=none) is a confirmation too; once the
    user is gone from the directory the re-check fails, and the token stays refused."""
    client, browser, raw = dora_token["client"], dora_token["browser"], dora_token["raw"]

    def recheck():
        session = client.session
        session["oidc_id_token_expiration"] = 0  # the re-check is due
        session.save()
        page = client.get("/teams/")
        assert page.status_code == 302 and "prompt=none" in page["Location"], page
        return _through_provider(client, browser, page["Location"])

    _age_confirmation(STALE)
    assert _me(raw).status_code == 401
    renewed = recheck()
    assert renewed.status_code == 302 and renewed["Location"] == "/teams/", renewed
    assert _me(raw).status_code == 200

    _write_directory(idp["directory"], None)  # dora removed at the provider
    _age_confirmation(STALE)
    failed = recheck()
    assert failed.status_code == 302 and failed["Location"].startswith("/login/"), failed
    assert "_auth_user_id" not in client.session
    assert _me(raw).status_code == 401


def test_the_tokens_page_says_until_when_they_work(dora_token, platform):
    """The rule is not a surprise: the tokens page tells a single sign-on user the date, and a
    password user sees no such line."""
    _age_confirmation(timedelta(days=10))
    until = SsoIdentity.objects.get(user__username="dora").last_login_at + timedelta(days=30)
    page = dora_token["client"].get("/teams/tokens/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "need a sign-in every 30 days" in text
    assert timezone.localtime(until).strftime("%Y-%m-%d %H:%M") in text

    alice = Client()
    alice.force_login(platform["alice"])
    assert "need a sign-in" not in alice.get("/teams/tokens/").content.decode()


def test_password_users_tokens_are_unaffected(sso, platform):
    """alice has no identity at the provider: her token works however old her last login."""
    alice = platform["alice"]
    _token, raw = token_create(user=alice, name="ci")
    type(alice).objects.filter(pk=alice.pk).update(last_login=timezone.now() - timedelta(days=400))
    assert _me(raw).status_code == 200


@pytest.mark.parametrize("off", [0, None], ids=["zero", "empty"])
def test_the_rule_is_off_with_zero_or_an_empty_setting(dora_token, sso, off):
    sso.OIDC_TOKEN_CONFIRMATION_DAYS = off
    _age_confirmation(timedelta(days=4000))
    assert _me(dora_token["raw"]).status_code == 200


def test_the_rule_is_off_while_single_sign_on_is_off(dora_token, sso):
    """With single sign-on switched off no provider can confirm anyone: the rule would stop every
    former single sign-on user's tokens with an instruction they cannot follow."""
    _age_confirmation(timedelta(days=31))
    assert _me(dora_token["raw"]).status_code == 401
    sso.SSO_ENABLED = False
    assert _me(dora_token["raw"]).status_code == 200


def test_the_rule_costs_no_query(dora_token):
    """The identity comes with the token's row: a token request makes the queries it made
    before the rule (the token with its user, and the last-use update at most once a minute)."""
    raw = dora_token["raw"]
    assert _me(raw).status_code == 200  # records the last use: the next one writes nothing
    request = APIRequestFactory().get("/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    with CaptureQueriesContext(connection) as queries:
        user, _token = ApiTokenAuthentication().authenticate(request)
    assert user.username == "dora"
    assert len(queries) == 1, [q["sql"] for q in queries]


@pytest.mark.django_db(transaction=True)
def test_gpuctl_prints_the_reason_and_exits_1(dora_token, live_server, gpuctl):
    raw = dora_token["raw"]
    login = gpuctl("login", "--url", live_server.url, "--token-stdin", stdin=raw + "\n")
    assert login.code == 0, login.err
    _age_confirmation(STALE)
    result = gpuctl("ls")
    assert result.code == 1  # gpuctl's exit for what the API refused (2 is bad input)
    assert "sign in to the portal to confirm your account" in result.err
    assert "need a sign-in every 30 days" in result.err
    # The token is good: no advice to make another one, which would be refused the same way.
    assert "no new token needed" in result.err and "gpuctl login" not in result.err
    assert raw not in result.out + result.err


def _start(value: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, "OIDC_TOKEN_CONFIRMATION_DAYS": value},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "OIDC_TOKEN_CONFIRMATION_DAYS: must be between 0 (off) and 3650 days, not -1"),
        ("3651", "OIDC_TOKEN_CONFIRMATION_DAYS: must be between 0 (off) and 3650 days, not 3651"),
        ("30d", "OIDC_TOKEN_CONFIRMATION_DAYS: '30d' is not a whole number of days"),
    ],
)
def test_a_bad_setting_stops_the_start(value, message):
    done = _start(value)
    # A configuration error: the one message and exit 2 (security/test_start_up_errors.py).
    assert done.returncode == 2
    assert done.stderr == f"gpuplatform: configuration error: {message}\n"


@pytest.mark.parametrize("value", ["0", "", "7"])
def test_good_settings_start(value):
    done = _start(value)
    assert done.returncode == 0, done.stderr[-2000:]
