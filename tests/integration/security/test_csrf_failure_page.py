"""The CSRF failure page (settings.CSRF_FAILURE_VIEW): still a 403 that lets nothing through,
but in the portal's own page, with Django's reason, and, when the request came over plain http
while the cookies are HTTPS-only (DJANGO_SECURE_COOKIES, the production default), the cause and
the fix. A new site reached over http from another machine met Django's bare "CSRF cookie not
set" page on every login (docs/deploy.md, "First start"). Clients asking for JSON get JSON."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-enough-password-1"
HTTP_CAUSE = "DJANGO_SECURE_COOKIES=false"


@pytest.fixture
def carol():
    return get_user_model().objects.create_user("carol", password=PASSWORD)


@pytest.fixture
def secure_cookies(settings):
    settings.CSRF_COOKIE_SECURE = True
    settings.SESSION_COOKIE_SECURE = True
    return settings


def _login(client: Client, *, secure: bool, **headers) -> object:
    """A login posted the way a browser does when it kept no CSRF cookie: over http a browser
    drops a Secure cookie (localhost aside), so nothing comes back with the form. The test
    client would send it, so this client never fetched the form."""
    extra = {"HTTP_REFERER": "https://testserver/login/"} if secure else {}
    return client.post(
        "/login/",
        {"username": "carol", "password": PASSWORD},
        secure=secure,
        **extra,
        **headers,
    )


def test_the_login_form_sets_an_https_only_cookie_over_http(secure_cookies):
    """The cause itself: over http the form hands out a cookie the browser will not return."""
    page = Client(enforce_csrf_checks=True).get("/login/")
    assert page.status_code == 200
    assert page.cookies["csrftoken"]["secure"] is True


def test_over_http_with_secure_cookies_the_page_names_the_cause_and_the_fix(secure_cookies, carol):
    client = Client(enforce_csrf_checks=True)
    refused = _login(client, secure=False)
    assert refused.status_code == 403
    assert refused["Content-Type"].startswith("text/html")
    body = refused.content.decode()
    # The portal's page (base.html), not Django's bare one.
    assert "<title>Form refused · gpuplatform</title>" in body
    assert 'class="topbar"' in body and "/static/frontend/app.css" in body
    assert "CSRF cookie not set." in body
    # The cause and both fixes, with where the docs say more.
    assert "plain http" in body and "HTTPS-only" in body
    assert "over https" in body and HTTP_CAUSE in body and "docs/deploy.md" in body
    # Still refused: nobody signed in.
    assert "_auth_user_id" not in client.session
    assert "sessionid" not in refused.cookies


def test_over_https_the_page_gives_the_reason_without_the_http_cause(secure_cookies, carol):
    client = Client(enforce_csrf_checks=True)
    refused = _login(client, secure=True)
    assert refused.status_code == 403
    body = refused.content.decode()
    assert "<title>Form refused · gpuplatform</title>" in body
    assert "CSRF cookie not set." in body
    assert HTTP_CAUSE not in body and "plain http" not in body
    # The retry works: the refusal handed out a fresh cookie (the page's own logout form
    # carries a token), so reloading the form and posting again signs in.
    client.get("/login/", secure=True)
    token = client.cookies["csrftoken"].value
    signed_in = client.post(
        "/login/",
        {"username": "carol", "password": PASSWORD, "csrfmiddlewaretoken": token},
        secure=True,
        HTTP_REFERER="https://testserver/login/",
    )
    assert signed_in.status_code == 302
    assert client.session["_auth_user_id"] == str(carol.pk)


def test_over_http_without_secure_cookies_there_is_no_http_cause(settings, carol):
    settings.CSRF_COOKIE_SECURE = False
    settings.SESSION_COOKIE_SECURE = False
    client = Client(enforce_csrf_checks=True)
    refused = _login(client, secure=False)
    assert refused.status_code == 403
    body = refused.content.decode()
    assert "CSRF cookie not set." in body and HTTP_CAUSE not in body


def test_a_missing_token_with_a_cookie_is_refused_with_its_reason(secure_cookies, carol):
    """Not the cookie: a form posted without its token (another site's form, a stale page)."""
    client = Client(enforce_csrf_checks=True)
    client.get("/login/", secure=True)
    refused = _login(client, secure=True)
    assert refused.status_code == 403
    body = refused.content.decode()
    assert "CSRF token missing." in body and HTTP_CAUSE not in body
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("secure", [False, True])
def test_a_json_client_gets_a_json_403_with_the_reason(secure_cookies, carol, secure):
    client = Client(enforce_csrf_checks=True)
    refused = _login(client, secure=secure, HTTP_ACCEPT="application/json")
    assert refused.status_code == 403
    assert refused["Content-Type"] == "application/json"
    body = refused.json()
    assert body["detail"] == "CSRF verification failed; the request was refused"
    assert body["reason"] == "CSRF cookie not set."
    if secure:
        assert "fix" not in body
    else:
        assert HTTP_CAUSE in body["fix"] and "https" in body["fix"]
    assert "_auth_user_id" not in client.session


def _api_write(client: Client, *, secure: bool, **headers) -> object:
    """A session's write to the API (a token for the caller), as a browser's script sends it."""
    extra = {"HTTP_REFERER": "https://testserver/teams/tokens/"} if secure else {}
    return client.post(
        "/api/v1/tokens/",
        {"name": "cli"},
        content_type="application/json",
        secure=secure,
        **extra,
        **headers,
    )


def _api_refusal(response) -> str:
    """The refusal's one message, checked to be in the API's error shape (``{"detail": ...}``,
    the component ``Error``), not the portal's JSON (``detail``, ``reason``, ``fix``)."""
    from tests.integration.api.openapi import Document, schema_document

    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"detail"}, body
    document = Document(schema_document())
    operation = document.operation("/api/v1/tokens/", "post")
    assert operation is not None and document.check(operation, response) == []
    return body["detail"]


@pytest.mark.parametrize("secure", [False, True])
def test_the_apis_session_refusal_says_the_reason_and_over_http_the_fix(
    secure_cookies, carol, secure
):
    """DRF's own words were "CSRF Failed: CSRF cookie not set.": the reason, but not the cause
    the portal's refusal names over http with HTTPS-only cookies, nor its fix."""
    from tenants.models import ApiToken

    client = Client(enforce_csrf_checks=True)
    client.force_login(carol)
    detail = _api_refusal(_api_write(client, secure=secure))
    assert detail.startswith("CSRF verification failed; the request was refused")
    assert "CSRF cookie not set." in detail
    if secure:
        assert HTTP_CAUSE not in detail and "plain http" not in detail
    else:
        assert "plain http" in detail and HTTP_CAUSE in detail and "over https" in detail
    assert not ApiToken.objects.exists()


def test_the_apis_session_refusal_of_a_missing_token_says_where_it_goes(secure_cookies, carol):
    from tenants.models import ApiToken

    client = Client(enforce_csrf_checks=True)
    client.force_login(carol)
    client.get("/teams/tokens/", secure=True)  # the page hands out the CSRF cookie
    detail = _api_refusal(_api_write(client, secure=True))
    assert "CSRF token missing." in detail and HTTP_CAUSE not in detail
    assert "X-CSRFToken" in detail and "Authorization: Bearer" in detail
    assert not ApiToken.objects.exists()
    # With the token in the header the same write is done: CSRF is as strict as it was.
    token = client.cookies["csrftoken"].value
    done = _api_write(client, secure=True, HTTP_X_CSRFTOKEN=token)
    assert done.status_code == 201 and ApiToken.objects.filter(name="cli").exists()
