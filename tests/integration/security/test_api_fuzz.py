"""Fuzz the REST API from its own OpenAPI schema (schemathesis): every operation, valid and
invalid inputs, signed in with real API tokens of a team member and of a platform admin. No
response may be a 5xx. Bounded: a few examples per operation (well under a minute in total); the
number of cases run is printed."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode

from tenants import services
from tenants.models import ApiToken

pytestmark = pytest.mark.django_db

# Examples per operation: (valid inputs, invalid inputs), as a team member and a platform admin.
# API_FUZZ_SCALE=10 fuzzes ten times deeper (locally, before a release).
_SCALE = int(os.environ.get("API_FUZZ_SCALE", "1"))
EXAMPLES = {"alice": (2 * _SCALE, 1 * _SCALE), "root": (1 * _SCALE, 1 * _SCALE)}


@pytest.fixture
def wsgi_app():
    """Django's WSGI app, sharing the test's database transaction: like Django's test client,
    do not close the connection at the start or end of each request (nor probe it: a health
    check that fails inside the test's transaction would close it mid-test).

    The signals are disconnected again at every call because Django's own test client (used by
    the ``submit`` fixture) reconnects ``close_old_connections`` after each of its requests; the
    next fuzzed request would then close the test's connection (a no-op on SQLite's in-memory
    database, "the connection is closed" on PostgreSQL)."""
    from django.db import connection

    handler = WSGIHandler()

    def app(environ, start_response):
        request_started.disconnect(close_old_connections)
        request_finished.disconnect(close_old_connections)
        return handler(environ, start_response)

    saved_health_check = connection.health_check_enabled
    connection.health_check_enabled = False
    try:
        yield app
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
        connection.health_check_enabled = saved_health_check


def fuzz_operation(operation, mode, examples, *, app, token, raw, statuses, failures, label):
    """Run ``examples`` generated cases of one operation; record status classes and any 5xx
    (with a curl line to reproduce it)."""
    headers = {"Authorization": f"Bearer {raw}"}

    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        response = case.call(app=app, headers=headers)
        statuses[f"{response.status_code // 100}xx"] += 1
        if response.status_code >= 500:
            failures.append(f"{label}: {case.as_curl_command()} -> {response.status_code}")
        # The fuzzer may revoke the very token it signs in with; keep it usable.
        ApiToken.objects.filter(pk=token.pk).update(revoked_at=None)

    try:
        run()
    except Exception as exc:  # some operations admit no invalid input at all
        if "Unsatisfiable" not in type(exc).__name__:
            raise


@pytest.mark.engines
def test_fuzz_the_api_from_its_schema(platform, wsgi_app, submit, capsys):
    submit(platform["alice"])  # something to find
    submit(platform["bob"], team="nlp")
    raw_schema = Client().get("/api/schema/", {"format": "json"}).json()
    schema = schemathesis.openapi.from_dict(raw_schema)
    operations = [result.ok() for result in schema.get_all_operations()]
    statuses: Counter[str] = Counter()
    failures: list[str] = []
    for username, examples in EXAMPLES.items():
        user = platform["admin"] if username == "root" else platform[username]
        token, raw = services.token_create(user=user, name="fuzz")
        for operation in operations:
            for mode, count in zip(
                (GenerationMode.POSITIVE, GenerationMode.NEGATIVE), examples, strict=True
            ):
                fuzz_operation(
                    operation,
                    mode,
                    count,
                    app=wsgi_app,
                    token=token,
                    raw=raw,
                    statuses=statuses,
                    failures=failures,
                    label=username,
                )
    total = sum(statuses.values())
    with capsys.disabled():
        print(
            f"\n[fuzz] {len(operations)} operations, {total} cases as {', '.join(EXAMPLES)}: "
            + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items()))
        )
    assert not failures, "\n".join(failures[:20])
    assert total >= len(operations) * 4
