"""Non-finite numbers in JSON bodies, on every route that takes one.

Python's ``json`` reads the tokens ``NaN``, ``Infinity`` and ``-Infinity`` (none of them JSON),
and reads ``1e400`` (valid JSON) as infinity. Every route of the OpenAPI schema with a JSON body
gets each of them in each numeric field it declares (and inside each free-form object): the
answer is a 400 naming the field's path and nothing is stored. The rule is the parser's
(``core.jsonlimits``), so a route added later is covered without a change here; this walk is
what shows that no route reads its body some other way.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.apps import apps
from django.test import Client
from django.utils import timezone

from billing.models import Statement
from core.jsonlimits import JsonRefused, loads_bounded
from notifications.models import Webhook
from policyversions.models import WhatIfRun
from policyversions.services import policy_version_seed
from scheduler.models import Dataset, Job, Node
from telemetry.tokens import node_token_issue
from tenants import quotas as quota_services
from tenants.models import Quota

pytestmark = pytest.mark.django_db

TOKENS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]
_MARK = "__non_finite__"
# Fields whose value is a whole body of its own kind (a free-form object): the token goes one
# level down, where a number would sit.
_FREE_FORM_KEY = "x"


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = schema["components"]["schemas"][name]
    for key in ("allOf", "oneOf", "anyOf"):
        if key in node:
            parts = [_resolve(schema, part) for part in node[key]]
            objects = [p for p in parts if p.get("type") == "object" or "properties" in p]
            return objects[0] if objects else parts[0]
    return node


def numeric_paths(schema: dict, node: dict, prefix: tuple = (), depth: int = 0) -> list[tuple]:
    """Every path to a number (or into a free-form object) of the request schema ``node``."""
    node = _resolve(schema, node)
    kind = node.get("type")
    if kind in ("integer", "number"):
        return [prefix]
    if depth > 4:
        return []
    if kind == "array" and "items" in node:
        return numeric_paths(schema, node["items"], (*prefix, 0), depth + 1)
    properties = node.get("properties")
    if properties:
        paths: list[tuple] = []
        for name, child in properties.items():
            if _resolve(schema, child).get("readOnly"):
                continue
            paths.extend(numeric_paths(schema, child, (*prefix, name), depth + 1))
        return paths
    if kind == "object" or node.get("additionalProperties") not in (None, False):
        return [(*prefix, _FREE_FORM_KEY)]
    return []


def body_with(path: tuple, token: str) -> str:
    """A JSON document with ``token`` (written as a bare JSON token) at ``path``."""
    value: Any = _MARK
    for part in reversed(path):
        value = [value] if isinstance(part, int) else {part: value}
    return json.dumps(value).replace(f'"{_MARK}"', token)


def shown(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@pytest.fixture
def objects(platform, submit, teams, gpu_models):
    """One real object behind each kind of id in a route, so that every route reaches its body
    (a detail route looks its object up first and answers 404 without reading the body)."""
    admin = platform["admin"]
    job = submit(platform["alice"]).json()
    version = policy_version_seed()  # version 1, the one to roll back to
    now = timezone.now()
    run = WhatIfRun.objects.create(
        cluster=platform["cluster"],
        created_at=now,
        created_by=admin,
        created_by_name="root",
        since=now - dt.timedelta(days=1),
        until=now,
        status="succeeded",
        candidates={"c": {}},
    )
    request = quota_services.quota_request_create(
        user=admin,
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=1,
        reason="more",
    )
    quota, _ = Quota.objects.get_or_create(team=teams["vision"], gpu_model=gpu_models["h100"])
    return {
        "/api/v1/admin/clusters/{name}": platform["cluster"].name,
        "/api/v1/admin/datasets/{id}": Dataset.objects.create(name="c4").pk,
        "/api/v1/admin/nodes/{id}": Node.objects.order_by("pk").first().pk,
        "/api/v1/admin/team-clusters/{slug}": "vision",
        "/api/v1/billing/statements/{id}": Statement.objects.create(
            team=teams["vision"], month=dt.date(2026, 11, 1)
        ).pk,
        "/api/v1/jobs/{job_id}": job["id"],
        "/api/v1/jobs/{id}": job["id"],
        "/api/v1/notifications/webhooks/{id}": Webhook.objects.create(
            owner=admin, name="hook", url="https://example.com/h"
        ).pk,
        "/api/v1/policy/versions/{number}": version.number,
        "/api/v1/policy/whatif/{run_id}": run.pk,
        "/api/v1/quota-requests/{id}": request.pk,
        "/api/v1/quotas/{id}": quota.pk,
        "/api/v1/teams/{slug}": "vision",
        "/api/v1/job-arrays/{id}": 1,
    }


def _row_counts() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models() if m._meta.managed}


def json_body_operations(schema: dict):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method not in ("post", "put", "patch"):
                continue
            content = (operation.get("requestBody") or {}).get("content", {})
            if "application/json" in content:
                yield method, path, content["application/json"]["schema"]


def test_every_json_body_route_refuses_non_finite_numbers_by_field(platform, objects):
    from tenants.services import token_create

    _token, raw = token_create(user=platform["admin"], name="walk")
    admin_headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    # Node agents sign in with a node token, and only to the telemetry routes.
    node_raw = node_token_issue(node=Node.objects.order_by("pk").first())[1]
    agent_headers = {"HTTP_AUTHORIZATION": f"Bearer {node_raw}"}
    client = Client(raise_request_exception=False)
    schema = client.get("/api/schema/", {"format": "json"}).json()
    before = _row_counts()
    wrong: list[str] = []
    routes = cases = 0
    for method, template, request_schema in json_body_operations(schema):
        routes += 1
        url = template
        for prefix, value in objects.items():
            if template.startswith(prefix):
                url = prefix.rsplit("/", 1)[0] + f"/{value}" + template[len(prefix) :]
                break
        assert "{" not in url, f"no object for the ids of {template}: add one to the fixture"
        headers = agent_headers if url.startswith("/api/v1/telemetry/") else admin_headers
        fields = numeric_paths(schema, request_schema) or [("unexpected_field",)]
        for field in fields:
            for token in TOKENS:
                cases += 1
                response = getattr(client, method)(
                    url, body_with(field, token), content_type="application/json", **headers
                )
                detail = response.json().get("detail", "") if response.status_code == 400 else ""
                if response.status_code != 400 or shown(field) not in str(detail):
                    wrong.append(
                        f"{method.upper()} {url} {shown(field)}={token}: "
                        f"{response.status_code} {response.content[:160]!r}"
                    )
    assert routes >= 30 and cases >= routes * len(TOKENS)
    assert not wrong, f"{len(wrong)} of {cases} cases:\n" + "\n".join(wrong[:40])
    assert _row_counts() == before
    assert not Job.objects.exclude(pk=objects["/api/v1/jobs/{id}"]).exists()


@pytest.mark.parametrize(
    ("text", "where", "spelled"),
    [
        ('{"workers": 1e400}', "workers", "1e400"),
        ('{"a": [1, {"b": -1E+999}]}', "a[1].b", "-1E+999"),
        ('{"a": NaN}', "a", "NaN"),
        ('{"env": {"A B": Infinity}}', 'env["A B"]', "Infinity"),
        ("[-Infinity]", "[0]", "-Infinity"),
        ("1e400", "the body", "1e400"),
    ],
)
def test_the_parser_names_where_a_non_finite_number_is(text, where, spelled):
    with pytest.raises(JsonRefused) as refused:
        loads_bounded(text, max_bytes=1000)
    assert refused.value.reason == "number"
    message = str(refused.value)
    assert where in message and spelled in message and "finite" in message, message


def test_the_parser_keeps_small_and_large_finite_numbers():
    assert loads_bounded("[1e308, -1e308, 1e-400, 2.5, 10]", max_bytes=100) == [
        1e308,
        -1e308,
        0.0,
        2.5,
        10,
    ]
