"""The policy form and the what-if form word a refused engine configuration by its reason, as
the API does: ``1e400`` is "the number at <path> is 1e400, which is not a finite number", a NUL
escape is "the string at <path> holds a NUL character", each naming the path the API names for
the same value; depth is "nested deeper than N levels"; only text that does not parse is called
not valid JSON. Both forms said "not JSON (...)" for
every refusal, ``1e400`` (valid JSON) included."""

from __future__ import annotations

import html

import pytest

from policyversions.models import PolicyVersion, WhatIfRun

pytestmark = pytest.mark.django_db

# The engine configuration as typed into the form, for each reason core.jsonlimits refuses.
CONFIGS = {
    "number": '{"las": {"long_run_s": 1e400}}',
    "text": '{"queue_aging_s": "a\\u0000b"}',
}
NESTED = '{"las": ' + "[" * 40 + "]" * 40 + "}"


@pytest.fixture
def admin(platform, client, settings):
    settings.SCHEDULER_POLICY = {"queue_aging_s": 7200}
    client.force_login(platform["admin"])
    return client


def _policy_form(client, config: str) -> str:
    form = client.get("/policy/").context["form"]
    data = {name: form[name].value() for name in form.fields}
    data = {k: v for k, v in data.items() if v not in (False, None)}
    data.update(engine_config=config, reason="try")
    response = client.post("/policy/", data)
    assert response.status_code == 400
    return html.unescape(response.content.decode())


def _whatif_form(client, config: str) -> str:
    body = {"cluster": "test", "window_days": "2", "candidate_name": "c1"}
    response = client.post("/policy/whatif/", dict(body, candidate_config=config))
    assert response.status_code == 400
    return html.unescape(response.content.decode())


def _api_words(client, body: str, path: str) -> str:
    response = client.post(path, body, content_type="application/json")
    assert response.status_code == 400, response.content
    return response.json()["detail"].removeprefix("JSON parse error - ")


@pytest.mark.parametrize("reason", sorted(CONFIGS))
def test_the_policy_form_says_what_the_api_says(admin, reason):
    config = CONFIGS[reason]
    said = _api_words(
        admin, f'{{"reason": "try", "engine_config": {config}}}', "/api/v1/policy/versions"
    )
    assert "engine_config." in said and "not JSON" not in said
    page = _policy_form(admin, config)
    assert said in page and "not JSON" not in page
    assert PolicyVersion.objects.count() == 1


@pytest.mark.parametrize("reason", sorted(CONFIGS))
def test_the_whatif_form_says_what_the_api_says(admin, reason):
    config = CONFIGS[reason]
    said = _api_words(
        admin,
        f'{{"window_days": 2, "candidates": {{"c1": {{"engine_config": {config}}}}}}}',
        "/api/v1/policy/whatif",
    )
    assert "candidates.c1.engine_config." in said
    page = _whatif_form(admin, config)
    assert said in page and "not JSON" not in page
    assert not WhatIfRun.objects.exists()


def test_depth_and_syntax_are_worded_by_their_reason(admin):
    # Nested one level inside the API's body: the form allows what the API would.
    deep = _policy_form(admin, NESTED)
    assert "engine_config: nested deeper than 31 levels" in deep and "not JSON" not in deep
    deep = _whatif_form(admin, NESTED)
    assert "candidate_config: nested deeper than 29 levels" in deep
    broken = _policy_form(admin, '{"queue_aging_s": ')
    assert "engine_config: not valid JSON: Expecting value" in broken
    assert PolicyVersion.objects.count() == 1
