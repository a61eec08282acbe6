"""Single sign-on when things go wrong, as a site lives with it: the provider down, hanging or
answering garbage at the code exchange (a clear login page, never a 500, and API tokens keep
working); a user deactivated in the portal or removed from the directory (their open sessions
stop acting: pages, forms and the API).

The provider here is a local HTTP server playing its token, JWKS and userinfo endpoints, so
that each can fail the way real ones do; the browser flow against a real OpenID provider is
tests/e2e/test_sso.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tenants.services import token_create
from tests.integration.identity.test_sso import ISSUER

pytestmark = pytest.mark.django_db

CLIENT_ID = "gpuplatform"
TRICKLE = 0.2  # seconds between bytes: far below OIDC_TIMEOUT (1 s here), so no read times out
TRICKLE_FOR = 15.0


class Provider:
    """The provider's back-channel endpoints on a local port. ``answers[path]`` is what that
    endpoint answers: ``(status, content_type, body)``; ``delay`` seconds pass before every
    answer (a provider that hangs); ``trickle[path]`` names the part of that endpoint's answer
    (``"headers"`` or ``"body"``) it sends one byte every ``TRICKLE`` seconds, for at most
    ``TRICKLE_FOR`` seconds (a provider that keeps each read short of the timeout); ``hits``
    counts the requests to each path. By default it answers as a working provider: a token
    whose ID token it signs with its own key (``kid``), that key in its JWKS, and the user's
    claims."""

    def __init__(self):
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.nonce = "n-1"
        self.claims = {"sub": "u-123", "preferred_username": "dora", "groups": ["ml-vision"]}
        self.kid = "k1"
        self.delay = 0.0
        self.trickle: dict[str, str] = {}
        self.hits: Counter[str] = Counter()
        self.answers: dict[str, tuple[int, str, bytes]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def id_token(self, **claims) -> str:
        payload = {
            "iss": ISSUER,
            "aud": CLIENT_ID,
            "sub": self.claims["sub"],
            "nonce": self.nonce,
            "iat": int(time.time()),
            "exp": int(time.time()) + 300,
            **claims,
        }
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})

    def jwks(self) -> dict:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def _default(self, path: str) -> tuple[int, str, bytes]:
        if path == "/token":
            body = {"access_token": "at-1", "token_type": "Bearer", "id_token": self.id_token()}
        elif path == "/jwks":
            body = self.jwks()
        else:
            body = self.claims
        return 200, "application/json", json.dumps(body).encode()

    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(provider.delay)
                path = self.path.split("?")[0]
                provider.hits[path] += 1
                status, content_type, body = provider.answers.get(path) or provider._default(path)
                if path in provider.trickle:
                    self._trickle(provider.trickle[path], status, content_type, body)
                    return
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the platform gave up waiting
                    pass

            def _trickle(self, part: str, status: int, content_type: str, body: bytes):
                head = (
                    f"HTTP/1.1 {status} OK\r\nContent-Type: {content_type}\r\n"
                    f"X-Padding: {'x' * 200}\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode()
                slow, rest = (head, body) if part == "headers" else (body, b"")
                if part == "body":
                    self.wfile.write(head)
                until = time.monotonic() + TRICKLE_FOR
                try:
                    for i in range(len(slow)):
                        if time.monotonic() > until:
                            self.wfile.write(slow[i:])
                            break
                        self.wfile.write(slow[i : i + 1])
                        time.sleep(TRICKLE)
                    self.wfile.write(rest)
                except OSError:  # the platform gave up waiting
                    pass
                self.close_connection = True

            do_GET = do_POST = _answer  # noqa: N815 (http.server's API)

            def log_message(self, *args):
                pass

        return Handler

    def close(self):
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def provider():
    server = Provider()
    yield server
    server.close()


@pytest.fixture
def sso(settings, provider):
    """Single sign-on configured against ``provider``, the way settings.py turns it on."""
    settings.SSO_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = "secret"
    settings.OIDC_OP_ISSUER = ISSUER
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = "https://idp.example.com/auth"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{provider.url}/token"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{provider.url}/jwks"
    settings.OIDC_OP_USER_ENDPOINT = f"{provider.url}/userinfo"
    settings.OIDC_TIMEOUT = 1
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "tenants.sso.SsoBackend"]
    at = settings.MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE[:at],
        "tenants.sso.SessionRefresh",
        *settings.MIDDLEWARE[at:],
    ]
    return settings


def _callback(client: Client, provider: Provider):
    """The browser coming back from the provider with a code, as after the start view."""
    session = client.session
    session["oidc_states"] = {
        "st-1": {"nonce": provider.nonce, "code_verifier": "v" * 64, "added_on": time.time()}
    }
    session.save()
    return client.get("/oidc/callback/?code=c-1&state=st-1")


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_a_working_provider_signs_in(rules, sso, provider):
    """The counterpart itself: with nothing broken the callback signs dora in."""
    client = Client()
    response = _callback(client, provider)
    assert response.status_code == 302 and response["Location"] == "/"
    assert _signed_in(client)
    assert get_user_model().objects.get(username="dora").memberships.count() == 1


GARBAGE = {
    "token endpoint is down (500)": ("/token", (500, "text/html", b"<h1>Bad gateway</h1>")),
    "token answer is an HTML page": ("/token", (200, "text/html", b"<html>login</html>")),
    "token answer is a JSON list": ("/token", (200, "application/json", b"[1, 2]")),
    "id token is no JWT": (
        "/token",
        (200, "application/json", b'{"access_token": "a", "id_token": "not-a-jwt"}'),
    ),
    "no id token": ("/token", (200, "application/json", b'{"access_token": "a"}')),
    "JWKS is down (503)": ("/jwks", (503, "text/plain", b"unavailable")),
    "JWKS has no keys member": ("/jwks", (200, "application/json", b"{}")),
    "JWKS key is no key": (
        "/jwks",
        (200, "application/json", b'{"keys": [{"kid": "k1", "kty": "RSA", "n": "x"}]}'),
    ),
    "userinfo is down (502)": ("/userinfo", (502, "text/plain", b"bad gateway")),
    "userinfo is not JSON": ("/userinfo", (200, "application/json", b"{oops")),
}


@pytest.mark.parametrize("path, answer", GARBAGE.values(), ids=GARBAGE.keys())
def test_a_provider_answering_garbage_gives_a_clear_login_page(rules, sso, provider, path, answer):
    """Each of these was a 500 at the callback: the library lets the provider's HTTP errors,
    unparsable answers and malformed tokens through. Now the login page says the provider
    did not answer usably, and nobody is signed in or created."""
    provider.answers[path] = answer
    client = Client(raise_request_exception=False)
    response = _callback(client, provider)
    assert response.status_code == 302
    assert response["Location"] == "/login/?sso=unavailable"
    assert not _signed_in(client)
    assert not get_user_model().objects.filter(username="dora").exists()
    page = client.get(response["Location"]).content.decode()
    assert "did not answer, or answered something the platform cannot use" in page


def test_an_unreachable_or_hanging_provider_gives_a_clear_login_page(rules, sso, provider):
    """Nothing listening (the provider is down) and a provider slower than OIDC_TIMEOUT_SECONDS:
    both end at the login page saying so, not a 500 or a request held open."""
    client = Client(raise_request_exception=False)
    provider.delay = 3  # OIDC_TIMEOUT is 1 in the fixture
    assert _callback(client, provider)["Location"] == "/login/?sso=unavailable"
    provider.delay = 0
    sso.OIDC_OP_TOKEN_ENDPOINT = "http://127.0.0.1:9/token"  # discard port: refused
    assert _callback(client, provider)["Location"] == "/login/?sso=unavailable"
    assert not _signed_in(client)


TRICKLED = {
    "token answer's headers": ("/token", "headers"),
    "token answer's body": ("/token", "body"),
    "JWKS body": ("/jwks", "body"),
    "userinfo body": ("/userinfo", "body"),
}


@pytest.mark.parametrize("path, part", TRICKLED.values(), ids=TRICKLED.keys())
def test_a_provider_trickling_its_answer_is_cut_off_at_the_deadline(
    rules, sso, provider, path, part
):
    """A provider sending a byte every 0.2 s never let a read reach OIDC_TIMEOUT (1 s): the
    login held the web worker for as long as the answer trickled (15 s here, unbounded for a
    real one). Now each call is answered in full within OIDC_TIMEOUT or given up: the login
    page says the provider did not answer, and nobody is signed in."""
    provider.trickle[path] = part
    client = Client(raise_request_exception=False)
    started = time.monotonic()
    response = _callback(client, provider)
    elapsed = time.monotonic() - started
    assert response["Location"] == "/login/?sso=unavailable"
    assert not _signed_in(client)
    assert not get_user_model().objects.filter(username="dora").exists()
    assert provider.hits[path] == 1
    # The deadline (1 s) and a generous margin for a loaded machine; the trickle lasts 15 s.
    assert elapsed < 8, elapsed


def test_the_jwks_is_fetched_once_for_many_logins(rules, sso, provider):
    """Each login fetched the provider's JWKS: one more call per login that could hang or fail.
    Now it is cached (OIDC_JWKS_CACHE_SECONDS), and a JWKS endpoint down after the first login
    does not stop the next ones while the cached keys verify their tokens."""
    for _ in range(2):
        client = Client()
        assert _callback(client, provider)["Location"] == "/"
        assert _signed_in(client)
    assert provider.hits["/jwks"] == 1
    assert provider.hits["/token"] == 2
    provider.answers["/jwks"] = (503, "text/plain", b"unavailable")
    client = Client(raise_request_exception=False)
    assert _callback(client, provider)["Location"] == "/"
    assert _signed_in(client)
    assert provider.hits["/jwks"] == 1


def test_a_rotated_key_fetches_the_jwks_once_more(rules, sso, provider):
    """The provider rotates its signing key (a new key id) while the old set is cached: the
    login fetches the JWKS again, once, and signs in with the new key. A token whose key id the
    fresh set lacks either is refused after that one fetch."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    assert _callback(Client(), provider)["Location"] == "/"
    provider.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    provider.kid = "k2"
    client = Client()
    assert _callback(client, provider)["Location"] == "/"
    assert _signed_in(client)
    assert provider.hits["/jwks"] == 2
    assert _callback(Client(), provider)["Location"] == "/"
    assert provider.hits["/jwks"] == 2
    unknown = provider.id_token()
    forged = jwt.encode(
        jwt.decode(unknown, options={"verify_signature": False}),
        provider.key,
        algorithm="RS256",
        headers={"kid": "k3"},
    )
    body = json.dumps({"access_token": "a", "id_token": forged}).encode()
    provider.answers["/token"] = (200, "application/json", body)
    client = Client(raise_request_exception=False)
    assert _callback(client, provider)["Location"] == "/login/?sso=failed"
    assert not _signed_in(client)
    assert provider.hits["/jwks"] == 3


def test_a_key_replaced_under_its_key_id_is_fetched_again_not_refused(rules, sso, provider):
    """The provider replaces its signing key and keeps the key id (or a new provider takes the
    address of the one whose keys are cached): the cached key failed every signature, so every
    login was refused until the cache expired. Now a failure against a cached key fetches the
    JWKS once more."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    assert _callback(Client(), provider)["Location"] == "/"
    provider.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client = Client(raise_request_exception=False)
    assert _callback(client, provider)["Location"] == "/"
    assert _signed_in(client)
    assert provider.hits["/jwks"] == 2
    assert _callback(Client(), provider)["Location"] == "/"
    assert provider.hits["/jwks"] == 2


def test_an_expired_or_wrongly_signed_id_token_is_refused_with_a_page(rules, sso, provider):
    """An ID token past its expiry (the provider's clock behind ours) was a 500 too: the login
    page says the provider's answer was unusable. One signed with another key was a bare 400:
    it is a refused login on the login page."""
    client = Client(raise_request_exception=False)
    expired = provider.id_token(iat=int(time.time()) - 600, exp=int(time.time()) - 300)
    body = json.dumps({"access_token": "a", "id_token": expired}).encode()
    provider.answers["/token"] = (200, "application/json", body)
    assert _callback(client, provider)["Location"] == "/login/?sso=unavailable"
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {
            "iss": ISSUER,
            "aud": CLIENT_ID,
            "sub": "u-123",
            "nonce": provider.nonce,
            "exp": int(time.time()) + 300,
        },
        other,
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    body = json.dumps({"access_token": "a", "id_token": forged}).encode()
    provider.answers["/token"] = (200, "application/json", body)
    response = _callback(client, provider)
    assert response.status_code == 302 and response["Location"] == "/login/?sso=failed"
    assert not get_user_model().objects.filter(username="dora").exists()


def test_a_failed_re_check_ends_the_session_and_api_tokens_keep_working(rules, sso, provider):
    """A signed-in user whose silent re-check cannot complete (the provider down at the code
    exchange) is signed out, not left signed in with a check that stays due (each page load
    went round to the provider and back to the login page). Their API token does not depend on
    the provider and keeps working meanwhile."""
    client = Client(raise_request_exception=False)
    _callback(client, provider)
    assert _signed_in(client)
    dora = get_user_model().objects.get(username="dora")
    _token, raw = token_create(user=dora, name="ci")
    provider.answers["/token"] = (500, "text/plain", b"down")
    assert _callback(client, provider)["Location"] == "/login/?sso=unavailable"
    assert not _signed_in(client)
    me = Client().get("/api/v1/auth/me", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert me.status_code == 200 and me.json()["username"] == "dora"


def test_a_user_deactivated_in_the_portal_loses_their_open_sessions(rules, sso, provider):
    """The library's get_user returns a deactivated user, so a single sign-on session of a user
    an admin deactivated kept loading pages and posting forms (only the API, which checks
    is_active itself, refused them)."""
    client = Client()
    _callback(client, provider)
    assert client.get("/jobs/").status_code == 200
    dora = get_user_model().objects.get(username="dora")
    dora.is_active = False
    dora.save()
    page = client.get("/jobs/")
    assert page.status_code == 302 and page["Location"].startswith("/login/")
    submitted = client.post(
        "/api/v1/jobs/",
        {"name": "x", "team": "vision", "workers": 1, "gpus_per_worker": 1},
        content_type="application/json",
    )
    assert submitted.status_code in (401, 403)
    from scheduler.models import Job

    assert not Job.objects.exists()


def _due(client: Client) -> None:
    session = client.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()


def test_a_session_due_for_its_check_cannot_act_until_a_page_load_renews_it(rules, sso, provider):
    """A user removed from the directory is signed out at the first page load after
    OIDC_RENEW_SECONDS. But the library re-checks GET page loads only: the same session kept
    submitting jobs through the API (201) and the portal's forms until the cookie expired.
    Now the API and the JSON state reads treat it as signed out until a page load renews it,
    and a form POST goes to the provider as a page load does."""
    from scheduler.models import Job

    client = Client()
    _callback(client, provider)
    _due(client)
    submitted = client.post(
        "/api/v1/jobs/",
        {"name": "x", "team": "vision", "workers": 1, "gpus_per_worker": 1},
        content_type="application/json",
    )
    assert submitted.status_code == 401, submitted.content
    assert not Job.objects.exists()
    states = client.get("/jobs/states/")
    assert states.status_code == 302 and states["Location"].startswith("/login/")
    form = client.post("/jobs/new/", {"name": "x"})
    assert form.status_code == 302
    assert form["Location"].startswith("https://idp.example.com/auth?")
    assert "prompt=none" in form["Location"]
    assert client.session["oidc_login_next"] == "/jobs/new/"
    assert not Job.objects.exists()
    # Still signed in: the page load's check with the provider decides (it renews here).
    assert _signed_in(client)
    assert _callback(client, provider)["Location"] == "/jobs/new/"
    assert client.get("/api/v1/auth/me").status_code == 200
    # A token is not a session: a request carrying one is answered for its token.
    _token, raw = token_create(user=get_user_model().objects.get(username="dora"), name="ci")
    _due(client)
    me = client.get("/api/v1/auth/me", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert me.status_code == 200
