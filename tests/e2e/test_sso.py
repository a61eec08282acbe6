"""Single sign-on in a real browser against a real OpenID provider: the certified `oidc-provider`
package (tests/e2e/oidc_provider, installed with `npm ci` from its lock file when missing) run
with Node.js, whose account directory the test edits to change a user's groups at the provider.

The platform runs with local password login off. A platform admin signs in through the
break-glass page and maps provider groups to teams in the portal; dora signs in with single
sign-on (authorization code + PKCE), lands in the team her group maps to, submits a job; her
group changes at the provider and her next login moves her; while she stays signed in, the
silent re-check with the provider (prompt=none) moves her too; every change is in the audit log.
The password form is gone from the login page, and a non-admin's password is refused. A tab that
only holds websockets is re-checked too: its sockets close when the check is due and the page
loads itself again, renewed silently, or signed out once the provider no longer knows her.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import (
    PASSWORD,
    ROOT,
    _free_port,
    _server_env,
    seeded_server,
    shot,
    stop,
    wait_http,
    wait_live,
)

pytestmark = pytest.mark.e2e

PROVIDER_DIR = ROOT / "tests" / "e2e" / "oidc_provider"
CLIENT_ID, CLIENT_SECRET = "gpuplatform", "test-client-secret"
DORA_PASSWORD = "dora-idp-password"
RENEW_S = 6  # how often the platform re-checks a single sign-on session with the provider


def _require(condition: bool, message: str) -> None:
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (required in CI)")
    pytest.skip(message)


def _install_provider() -> None:
    """``npm ci`` from the committed lock file, once per checkout."""
    if (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        return
    _require(shutil.which("npm") is not None, "npm is missing: cannot install oidc-provider")
    done = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=PROVIDER_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _write_directory(path: Path, groups: list[str] | None) -> None:
    """dora's account at the provider with ``groups``; None: she is no longer in the directory."""
    dora = {
        "password": DORA_PASSWORD,
        "email": "dora@example.com",
        "name": "Dora Directory",
        "groups": groups,
    }
    accounts = {} if groups is None else {"dora": dora}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"accounts": accounts}))
    tmp.replace(path)


@pytest.fixture(scope="module")
def sso_platform(chromium_path, tmp_path_factory):
    """A real OpenID provider and a platform server configured for it, local login off."""
    _require(shutil.which("node") is not None, "node is missing: cannot run oidc-provider")
    _install_provider()
    work = tmp_path_factory.mktemp("sso")
    directory = work / "directory.json"
    _write_directory(directory, ["ml-vision"])
    op_port, rp_port = _free_port(), _free_port()
    issuer, rp = f"http://127.0.0.1:{op_port}", f"http://127.0.0.1:{rp_port}"
    op_log = work / "provider.log"
    provider = subprocess.Popen(
        ["node", "provider.mjs"],
        cwd=PROVIDER_DIR,
        env={
            **os.environ,
            "PORT": str(op_port),
            "ISSUER": issuer,
            "DIRECTORY": str(directory),
            "CLIENT_ID": CLIENT_ID,
            "CLIENT_SECRET": CLIENT_SECRET,
            "REDIRECT_URI": f"{rp}/oidc/callback/",
            "POST_LOGOUT_REDIRECT_URI": f"{rp}/login/",
        },
        stdout=op_log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"{issuer}/.well-known/openid-configuration", provider, op_log, "oidc-provider")
        with urllib.request.urlopen(f"{issuer}/.well-known/openid-configuration") as response:
            discovery = json.load(response)
        assert "S256" in discovery["code_challenge_methods_supported"]
        env = _server_env(work / "sso.sqlite3")
        env.update(
            OIDC_RP_CLIENT_ID=CLIENT_ID,
            OIDC_RP_CLIENT_SECRET=CLIENT_SECRET,
            OIDC_OP_AUTHORIZATION_ENDPOINT=discovery["authorization_endpoint"],
            OIDC_OP_TOKEN_ENDPOINT=discovery["token_endpoint"],
            OIDC_OP_USER_ENDPOINT=discovery["userinfo_endpoint"],
            OIDC_OP_JWKS_ENDPOINT=discovery["jwks_uri"],
            OIDC_OP_LOGOUT_ENDPOINT=discovery["end_session_endpoint"],
            OIDC_OP_ISSUER=discovery["issuer"],
            OIDC_RP_SCOPES="openid email profile groups",
            SSO_PROVIDER_NAME="Test IdP",
            LOCAL_LOGIN_ENABLED="false",
            OIDC_RENEW_SECONDS=str(RENEW_S),
            # Stream sockets re-read their session every second (60 s by default), so one whose
            # check is due closes within the test's patience.
            STREAM_RECHECK_SECONDS="1",
        )
        with seeded_server(env, work, rp_port) as url:
            assert url == rp
            yield {"url": rp, "issuer": issuer, "directory": directory}
    finally:
        stop(provider)


def _context(browser, base_url: str):
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    return context


def _sso_login(page, platform: dict, password: str = DORA_PASSWORD) -> None:
    page.goto("/login/")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    page.wait_for_url(re.compile(re.escape(platform["issuer"]) + r"/interaction/.*"))
    page.fill("#idp-login", "dora")
    page.fill("#idp-password", password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(platform["url"] + "/")


def _my_teams(page) -> list[dict]:
    """The signed-in session's teams, asked of the API with the browser's cookies."""
    return page.request.get("/api/v1/auth/me", headers={"Accept": "application/json"}).json()[
        "teams"
    ]


def test_sso_login_maps_groups_to_teams_and_follows_the_provider(browser, sso_platform):
    url = sso_platform["url"]
    admin = _context(browser, url)
    page = admin.new_page()

    # Local login is off: the login page offers single sign-on only.
    page.goto("/login/")
    assert page.get_by_role("link", name="Sign in with Test IdP").is_visible()
    assert page.locator("#id_password").count() == 0
    shot(page, "sso-01-login-without-password-form")

    # A non-admin's password is refused even on the break-glass page; a platform admin's works.
    page.goto("/login/break-glass/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    assert page.locator("#login-error").is_visible()
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(url + "/")

    # The admin maps provider groups to teams in the portal.
    page.goto("/teams/manage/sso/")
    for group, team in (("ml-vision", "vision"), ("ml-nlp", "nlp")):
        page.fill("#id_group", group)
        page.select_option("#id_team", team)
        page.select_option("#id_role", "member")
        page.get_by_role("button", name="Add rule").click()
        page.wait_for_url(url + "/teams/manage/sso/")
    rules = page.locator("#sso-rules").inner_text()
    assert "ml-vision" in rules and "ml-nlp" in rules
    shot(page, "sso-02-group-rules")

    # dora signs in with single sign-on (created on first login) and lands in vision.
    dora = _context(browser, url)
    page_d = dora.new_page()
    _sso_login(page_d, sso_platform)
    assert page_d.locator(".who").inner_text() == "dora"
    assert [(t["team"], t["role"], t["source"]) for t in _my_teams(page_d)] == [
        ("vision", "member", "sso")
    ]

    # ...and submits a job to her team through the portal.
    page_d.goto("/jobs/new/")
    page_d.fill("#id_name", "dora-sso-job")
    page_d.select_option("#id_team", "vision")
    page_d.fill("#id_workers", "1")
    page_d.fill("#id_gpus_per_worker", "1")
    page_d.get_by_role("button", name="Submit job").click()
    page_d.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    assert "dora-sso-job" in page_d.locator("main").inner_text()
    shot(page_d, "sso-03-job-submitted")

    # Her notification settings (email goes to the address the provider gave).
    page_d.goto("/notifications/settings/")
    assert "dora@example.com" in page_d.locator("main").inner_text()
    page_d.uncheck('input[value="job.failed|email"]')
    page_d.get_by_role("button", name="Save").click()
    page_d.wait_for_url(url + "/notifications/settings/")
    assert not page_d.is_checked('input[value="job.failed|email"]')
    shot(page_d, "sso-04-notification-settings")

    # Her group changes at the provider; logging out ends the provider's session too.
    _write_directory(sso_platform["directory"], ["ml-nlp"])
    page_d.get_by_role("button", name="Log out").click()
    page_d.wait_for_url(re.compile(re.escape(sso_platform["issuer"]) + r"/session/end.*"))
    page_d.get_by_role("button", name=re.compile("Yes, sign me out", re.I)).click()
    page_d.wait_for_url(url + "/login/")

    # At the next login (the provider asks for her password again) she is in nlp, not vision.
    _sso_login(page_d, sso_platform)
    assert [(t["team"], t["role"]) for t in _my_teams(page_d)] == [("nlp", "member")]
    page_d.goto("/teams/")
    teams_page = page_d.locator("main").inner_text()
    assert "nlp" in teams_page and "vision" not in teams_page.lower()

    # While she stays signed in, the session is re-checked with the provider every
    # OIDC_RENEW_SECONDS: she joins ml-vision too, and the next page load after that moves her
    # silently (prompt=none: no password typed, no provider page shown).
    _write_directory(sso_platform["directory"], ["ml-nlp", "ml-vision"])
    # Off the portal while the check falls due: an open page would load itself again once its
    # sockets close (the next test), and this is about the next page load she makes.
    page_d.goto("about:blank")
    time.sleep(RENEW_S + 1)
    seen: list[str] = []
    page_d.on("request", lambda request: seen.append(request.url))
    page_d.goto("/teams/")
    page_d.wait_for_url(url + "/teams/")
    assert any("prompt=none" in u for u in seen), seen
    assert not any("/interaction/" in u for u in seen), seen
    assert sorted(t["team"] for t in _my_teams(page_d)) == ["nlp", "vision"]

    # Every membership change is audited.
    page.goto("/teams/audit/")
    audit = page.locator("main").inner_text()
    for action in ("user.sso_create", "membership.sso_add", "membership.sso_remove"):
        assert action in audit, action
    shot(page, "sso-05-audit")
    dora.close()
    admin.close()


def test_a_tab_holding_only_sockets_is_rechecked_with_the_provider(browser, sso_platform):
    """A tab that makes no page load was never re-checked with the provider: a user the provider
    no longer signs in went on hearing her teams' live updates until the Django session ended.
    Once the check is due its socket closes (4440) and the page loads itself again (unless she
    typed into it): while the provider still signs dora in, silently and back to a live page;
    once she is gone from the directory, to the login page, signed out."""
    url, directory = sso_platform["url"], sso_platform["directory"]
    _write_directory(directory, ["ml-vision"])
    context = _context(browser, url)
    page = context.new_page()
    try:
        _sso_login(page, sso_platform)
        wait_live(page)
        seen: list[str] = []
        page.on("request", lambda request: seen.append(request.url))
        patience = (RENEW_S + 10) * 1000

        # She does nothing; the page goes to the provider by itself and comes back live.
        page.wait_for_event(
            "request", lambda request: "prompt=none" in request.url, timeout=patience
        )
        page.wait_for_url(url + "/")
        wait_live(page)
        assert not any("/interaction/" in u for u in seen), seen
        assert page.locator(".who").inner_text() == "dora"

        # A page she has typed into is not reloaded under her: the socket stops and says so,
        # what she typed stays, and her next page load re-checks.
        page.goto("/jobs/new/")
        wait_live(page)
        page.fill("#id_name", "half-typed")
        page.wait_for_selector("#live-status[data-state=closed]", timeout=patience)
        assert "reload" in page.locator("#live-status").inner_text()
        assert page.url == url + "/jobs/new/"
        assert page.input_value("#id_name") == "half-typed"
        page.goto("/")
        wait_live(page)

        # Removed at the provider: the next check signs her out, with nothing typed or clicked.
        _write_directory(directory, None)
        page.wait_for_url(re.compile(re.escape(url) + r"/login/.*"), timeout=patience)
        assert page.locator(".who").count() == 0
        me = page.request.get("/api/v1/auth/me", headers={"Accept": "application/json"})
        assert me.status in (401, 403)
        shot(page, "sso-06-removed-at-the-provider-signed-out")
    finally:
        _write_directory(directory, ["ml-vision"])
        context.close()
