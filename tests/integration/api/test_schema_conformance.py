"""The OpenAPI document says what the API really answers.

Clients are generated from /api/schema/ (openapi-generator, openapi-python-client) and people
read it to learn the API, so every answer must be one the document declares: its status code, its
content type, and a body its schema accepts (no undeclared field, no number sent as a string
where the schema says number, no null where it says never null). Checked here over:

- every GET route of the REST API (walked from the URL configuration, so a route added later is
  checked too), as a member of a team with data and as a platform admin, on the isolation walk's
  world (tests/integration/security/test_route_isolation.py);
- the success answer of every write operation (POST, PUT, PATCH, DELETE), sent with a valid body
  from the table in ``write_bodies.py`` (an operation with no entry there fails the test);
- one bad field in the body of every POST, PUT and PATCH that takes one: a 400 of the declared
  shape;
- an id nobody has in every operation with a path parameter: a 404 of the declared shape;
- no answer and no request body is declared as a bare "an object" (anything would conform).
"""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from django.utils import timezone

from scheduler.models import Job, Node
from tenants.models import AuditEntry
from tests.integration.security.routes import concrete_path, fill_values, iter_routes
from tests.integration.security.test_route_isolation import A_PK

from .openapi import Document, schema_document
from .write_bodies import CONFLICTS, SKIPPED, WRITES

pytestmark = pytest.mark.django_db

# Routes of the API that are no operations of it: the document itself and its viewers.
NOT_OPERATIONS = {"api-root", "api-schema", "api-docs", "api-redoc", "api-redoc-bundle"}
# Names of objects that exist, for routes whose keyword the walk's table fills with another's
# (and the cluster's and a node's id, in _a_values).
ROUTE_VALUES = {
    "cluster-admin-detail": {"name": "test"},
    "cluster-admin-retire": {"name": "test"},
    "cluster-admin-reinstate": {"name": "test"},
    "gpu-model-detail": {"name": "h100-80gb"},
}


@pytest.fixture(scope="module")
def document():
    # Generating the document takes a second or two: once for the module.
    return schema_document()


@pytest.fixture
def rich_world(world, gpu_models):
    """The isolation walk's world, with team A's objects each route shows filled in: a job that
    ran (cluster, GPU model, an allocation and its attempt's record), a price, a dataset and a
    what-if run."""
    from billing.models import PriceRate
    from policyversions.models import PolicyVersion, WhatIfRun
    from scheduler.backends.base import BackendJobSpec
    from scheduler.models import Allocation, AttemptRecord, Dataset
    from scheduler.reproducibility import record_build

    now = timezone.now()
    cluster = world["cluster"]
    node = Node.objects.filter(gpu_model=gpu_models["h100"]).first()
    job = Job.objects.get(pk=A_PK)
    ran = Job.objects.create(
        team=job.team,
        submitter=world["alice"],
        name="alpha-secret-running",
        workers=1,
        gpus_per_worker=1,
        gpu_model=gpu_models["h100"],
        priority_class=job.priority_class,
        submitted_at=now - timedelta(hours=2),
        started_at=now - timedelta(hours=1),
        state="running",
        cluster=cluster,
        attempts=1,
    )
    Allocation.objects.create(job=ran, node=node, gpu_index=0, started_at=ran.started_at)
    # The record as the loop writes it when the backend accepts the attempt.
    spec = BackendJobSpec(
        job_id=str(job.pk),
        attempt=1,
        name=job.name,
        team=job.team.slug,
        image="registry.example.com/train:1.0",
        command=job.command,
        workers=1,
        gpus_per_worker=1,
        placement={node.name: (0,)},
        env={"WANDB_API_KEY": "alpha-secret-key", "EPOCHS": "3"},
    )
    record = record_build(
        job=job,
        spec=spec,
        provenance={"kind": "simulated", "backend_ref": "sim-1", "runtime": {}},
        now=now,
    )
    AttemptRecord.objects.create(job=job, attempt=1, recorded_at=now, record=record)
    PriceRate.objects.create(
        pk=A_PK,
        gpu_model=gpu_models["h100"],
        capacity="on_demand",
        effective_from=now - timedelta(days=30),
        rate_per_gpu_hour=Decimal("2.50"),
    )
    Dataset.objects.create(pk=A_PK, name="imagenet", size_gb=150.0)
    PolicyVersion.objects.create(
        number=1,
        created_at=now,
        created_by=world["admin"],
        created_by_name="root",
        reason="first",
        source="edit",
    )
    # A platform-wide action: its audit entry names no team.
    AuditEntry.objects.create(
        time=now,
        actor=world["admin"],
        actor_name="root",
        action="node.drain",
        target_type="node",
        target_id=str(node.pk),
        comment="maintenance",
    )
    WhatIfRun.objects.create(
        pk=A_PK,
        cluster=cluster,
        created_at=now,
        created_by=world["admin"],
        created_by_name="root",
        since=now - timedelta(days=7),
        until=now,
        status="succeeded",
    )
    return world


def _a_values(world) -> dict[str, str]:
    """Path values naming team A's objects (the isolation walk's table names team B's)."""
    return dict(
        world["values"],
        pk=str(A_PK),
        job_id=str(A_PK),
        array_id=str(A_PK),
        object_id=str(A_PK),
        webhook_id=str(A_PK),
        slug="vision",
        username="alice",
        id=str(world["alice"].pk),
        run_id=str(A_PK),
    )


def _route_values(world) -> dict[str, dict[str, str]]:
    node = Node.objects.order_by("pk").first()
    return {
        **ROUTE_VALUES,
        "cluster-detail": {"pk": str(world["cluster"].pk)},
        "node-detail": {"pk": str(node.pk)},
    }


def _api_routes():
    return [
        r
        for r in iter_routes()
        if r.is_api and not r.is_format_variant and r.name not in NOT_OPERATIONS
    ]


def _send(world, who: str, method: str, path: str, body):
    if who == "node agent":
        from telemetry.services import node_token_issue

        token = node_token_issue(node=Node.objects.order_by("pk").first())[1]
        client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {token}")
    else:
        client = _client(world[who])
    return getattr(client, method)(path, json.dumps(body), content_type="application/json")


def _client(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_every_get_answer_is_one_the_document_declares(rich_world, document, capsys):
    world = rich_world
    doc = Document(document)
    values = _a_values(world)
    overrides = _route_values(world)
    problems: list[str] = []
    checked: set[str] = set()
    answers = 0
    for who in ("alice", "admin"):
        client = _client(world[who])
        for route in _api_routes():
            route_values = {**values, **overrides.get(route.name, {})}
            path = concrete_path(route, fill_values(route, route_values))
            response = client.get(path)
            operation = doc.operation(path, "get")
            if operation is None:
                # A route the document lacks, or a GET it does not offer (permissions are
                # checked before the method, so a member's GET of an admin action is a 403).
                if doc.template_of(path) is None or response.status_code < 300:
                    problems.append(f"{who} GET {path}: {response.status_code}, not documented")
                continue
            answers += 1
            checked.add(operation.path)
            problems += [f"{who}: {p}" for p in doc.check(operation, response)]
    assert not problems, "\n".join(problems)
    unanswered = {op.path for op in doc.operations() if op.method == "get"} - checked
    assert not unanswered, f"GET operations no route reached: {sorted(unanswered)}"
    with capsys.disabled():
        print(f"\n[schema] {len(checked)} GET operations, {answers} answers: as declared")


def test_every_write_success_is_one_the_document_declares(rich_world, document, capsys):
    """Each write operation, sent a valid body by the caller it is for, succeeds (2xx) with an
    answer the document declares. Each runs in a savepoint rolled back afterwards, so every
    operation sees the same world (a DELETE does not take away what the next one needs)."""
    world = rich_world
    doc = Document(document)
    writes = [op for op in doc.operations() if op.method != "get"]
    missing = [
        f"{op.method.upper()} {op.path}"
        for op in writes
        if (op.method, op.path) not in WRITES and (op.method, op.path) not in SKIPPED
    ]
    assert not missing, f"write operations with no valid body in write_bodies.py: {missing}"
    stale = (set(WRITES) | set(SKIPPED)) - {(op.method, op.path) for op in writes}
    assert not stale, f"write_bodies.py names operations the document lacks: {sorted(stale)}"
    values = _a_values(world)
    overrides = _route_values(world)
    problems: list[str] = []
    checked = 0
    for operation in writes:
        write = WRITES.get((operation.method, operation.path))
        if write is None:
            continue
        extra = write.values(world) if callable(write.values) else write.values
        path = _paths(doc, {**values, **extra}, overrides)[operation.path]
        body = write.body(world) if callable(write.body) else write.body
        savepoint = transaction.savepoint()
        # Rate limits (job submission, the token exchange) count in the cache.
        cache.clear()
        try:
            if write.before is not None:
                write.before(world)
            response = _write(world, write.who, operation.method, path, body)
        finally:
            transaction.savepoint_rollback(savepoint)
        checked += 1
        where = f"{write.who} {operation.method.upper()} {path}"
        if not 200 <= response.status_code < 300:
            problems.append(f"{where}: {response.status_code}: {_body_text(response)[:300]}")
        problems += [f"{where}: {p}" for p in doc.check(operation, response)]
    assert not problems, "\n".join(problems)
    with capsys.disabled():
        print(f"\n[schema] {checked} write operations: declared successes")


def test_a_state_that_refuses_the_action_is_a_declared_409(rich_world, document, capsys):
    """An action the object's state does not allow (cancel a finished job, approve a decided
    request, reinstate what is not retired) is a 409 of the declared shape."""
    world = rich_world
    doc = Document(document)
    values = _a_values(world)
    overrides = _route_values(world)
    problems: list[str] = []
    for (method, template), write in CONFLICTS.items():
        operation = doc.operation(template, method)
        assert operation is not None, f"{method.upper()} {template}: not in the document"
        extra = write.values(world) if callable(write.values) else write.values
        path = _paths(doc, {**values, **extra}, overrides)[template]
        savepoint = transaction.savepoint()
        cache.clear()
        try:
            if write.before is not None:
                write.before(world)
            response = _write(world, write.who, method, path, write.body)
        finally:
            transaction.savepoint_rollback(savepoint)
        where = f"{write.who} {method.upper()} {path}"
        if response.status_code != 409:
            problems.append(
                f"{where}: {response.status_code}, not 409: {_body_text(response)[:200]}"
            )
        problems += [f"{where}: {p}" for p in doc.check(operation, response)]
    assert not problems, "\n".join(problems)
    with capsys.disabled():
        print(f"\n[schema] {len(CONFLICTS)} refusals for the state: declared 409s")


def _write(world, who: str | None, method: str, path: str, body):
    if who is None or who == "node agent":
        if who is None:
            client = Client(raise_request_exception=False)
        else:
            return _send(world, who, method, path, body)
    else:
        client = _client(world[who])
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, json.dumps(body), content_type="application/json")


def _body_text(response) -> str:
    if getattr(response, "streaming", False):
        return "(streamed)"
    return response.content.decode(errors="replace")


def _free_object(schema: dict, doc: Document) -> bool:
    """Whether ``schema`` is (a list of) "an object" with no declared field: anything conforms."""
    if "$ref" in schema:
        schema = doc.raw["components"]["schemas"][schema["$ref"].split("/")[-1]]
    if schema.get("type") == "array":
        return _free_object(schema.get("items", {}), doc)
    return schema.get("type") == "object" and not schema.get("properties")


def test_no_answer_or_body_is_declared_as_any_object(document):
    """A body declared only as "an object" checks nothing and gives generated clients an untyped
    dict: every answer and every request body of the API declares its fields. (Values inside a
    body may still be free-form maps where the API says so, e.g. a job's ``env``.)"""
    doc = Document(document)
    loose = []
    for operation in doc.operations():
        request = _request_schema(operation, doc)
        if request is not None and _free_object(request, doc):
            loose.append(f"{operation.method.upper()} {operation.path} request body")
        for status, answer in operation.spec.get("responses", {}).items():
            schema = answer.get("content", {}).get("application/json", {}).get("schema")
            if schema is not None and _free_object(schema, doc):
                loose.append(f"{operation.method.upper()} {operation.path} {status}")
    assert not loose, "declared as any object:\n" + "\n".join(loose)


def _bad_value(schema: dict, doc: Document):
    """A value of the wrong type for a property ``schema`` (an object where a scalar is due,
    a number where a string or an object is due)."""
    if "$ref" in schema:
        return _bad_value(doc.raw["components"]["schemas"][schema["$ref"].split("/")[-1]], doc)
    for key in ("allOf", "oneOf", "anyOf"):
        if key in schema:
            return _bad_value(schema[key][0], doc)
    if schema.get("type") in ("object", "array"):
        return 12
    if "enum" in schema:
        return "no-such-choice"
    return {"not": "a scalar"}


def _request_schema(operation, doc: Document) -> dict | None:
    """The JSON body schema of ``operation`` (None: it takes no JSON body)."""
    content = operation.spec.get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema and "$ref" in schema:
        schema = doc.raw["components"]["schemas"][schema["$ref"].split("/")[-1]]
    return schema


def _bad_body(schema: dict, doc: Document):
    """A body with one bad field: the first declared field with a value of the wrong type; for
    a body the document leaves free-form, a field it does not take; for a list, a number where
    an item is due."""
    if schema.get("type") == "array":
        return [12]
    if not schema.get("properties"):
        return {"no_such_field": 1}
    field = sorted(schema["properties"])[0]
    return {field: _bad_value(schema["properties"][field], doc)}


def _every_field_bad(schema: dict, doc: Document):
    """A body whose every declared field has a value of the wrong type (see :func:`_bad_body`
    for a list or a free-form body)."""
    if schema.get("type") == "array" or not schema.get("properties"):
        return _bad_body(schema, doc)
    return {name: _bad_value(value, doc) for name, value in schema["properties"].items()}


def test_one_bad_field_is_a_declared_400(rich_world, document, capsys):
    world = rich_world
    doc = Document(document)
    values = _a_values(world)
    problems: list[str] = []
    checked = 0
    overrides = _route_values(world)
    paths = _paths(doc, values, overrides)
    for operation in doc.operations():
        if operation.method not in ("post", "put", "patch"):
            continue
        schema = _request_schema(operation, doc)
        if schema is None:
            continue
        body = _bad_body(schema, doc)
        path = paths[operation.path]
        write = WRITES.get((operation.method, operation.path))
        if write is not None and write.values:
            # The object the valid write addresses (a node): a missing one is a 404 first.
            extra = write.values(world) if callable(write.values) else write.values
            path = _paths(doc, {**values, **extra}, overrides)[operation.path]
        for who in ("vera", "admin", "node agent"):
            response = _send(world, who, operation.method, path, body)
            # Team admin, then platform admin (their routes are a 403 or a 404 to others), then
            # a node agent (the telemetry ingest is theirs alone).
            if response.status_code not in (401, 403, 404):
                break
        checked += 1
        where = f"{who} {operation.method.upper()} {path} {body}"
        if response.status_code != 400:
            problems.append(f"{where}: {response.status_code}, not 400: {response.content[:200]}")
        problems += [f"{where}: {p}" for p in doc.check(operation, response)]
    assert not problems, "\n".join(problems)
    with capsys.disabled():
        print(f"\n[schema] {checked} bad bodies: declared 400s")


def test_a_missing_object_is_a_declared_404(world, document, capsys):
    doc = Document(document)
    missing = dict(
        _a_values(world),
        pk="987654",
        job_id="987654",
        array_id="987654",
        webhook_id="987654",
        number="987654",
        run_id="987654",
        slug="no-such-team",
        name="no-such-name",
        username="nobody",
    )
    problems: list[str] = []
    checked = 0
    paths = _paths(doc, missing, {})
    # The platform admin sees every object; a team admin is refused the platform's (403).
    callers = {"admin": (404,), "vera": (403, 404)}
    for operation in doc.operations():
        if "{" not in operation.path:
            continue
        path = paths[operation.path]
        bodies: list[object] = [None]
        if operation.method in ("post", "put", "patch"):
            # Empty, and every field bad (or, for an action taking no body, a field it lacks):
            # the object is looked up first, whatever the body.
            schema = _request_schema(operation, doc)
            bodies = [{}, _every_field_bad(schema, doc) if schema else {"no_such_field": 1}]
        for who, expected in callers.items():
            client = _client(world[who])
            for body in bodies:
                kwargs = {}
                if body is not None:
                    kwargs = {"data": json.dumps(body), "content_type": "application/json"}
                response = getattr(client, operation.method)(path, **kwargs)
                checked += 1
                where = f"{who} {operation.method.upper()} {path} {'' if body is None else body}"
                if response.status_code not in expected:
                    problems.append(
                        f"{where}: {response.status_code}, not {expected}: {response.content[:200]}"
                    )
                problems += [f"{where}: {p}" for p in doc.check(operation, response)]
    assert not problems, "\n".join(problems)
    with capsys.disabled():
        print(f"\n[schema] {checked} requests on a missing object: declared 404s")


def _paths(doc: Document, values: dict[str, str], overrides: dict) -> dict[str, str]:
    """Each path template of the document as a concrete path with ``values`` (and a route's own
    in ``overrides``), through the URL configuration's routes."""
    out = {}
    for route in _api_routes():
        path = concrete_path(route, fill_values(route, {**values, **overrides.get(route.name, {})}))
        template = doc.template_of(path)
        if template is not None:
            out[template] = path
    return out


def test_the_document_is_valid_openapi_without_a_warning(db, tmp_path):
    """What `manage.py spectacular --validate --fail-on-warn` checks: the document is valid
    OpenAPI 3 and drf-spectacular guessed nothing (a guess is a warning: a view it could not
    read, a field of unknown type). No warning today; a view added without annotations fails
    here."""
    from django.core.management import call_command

    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert out.stat().st_size > 10_000


def test_too_many_password_attempts_is_a_declared_429(platform, document, settings):
    """The token exchange limits failed password attempts itself (not with a DRF throttle, which
    the schema class would see): its 429 is declared by hand, and must stay so."""
    doc = Document(document)
    operation = doc.operation("/api/v1/auth/token", "post")
    # An address of its own: the limit counts failures per address in the cache, which outlives
    # the test, and every other test signs in from 127.0.0.1 (they were refused for a minute).
    client = Client(raise_request_exception=False, REMOTE_ADDR="192.0.2.77")
    body = json.dumps({"username": "alice", "password": "wrong"})
    try:
        for _ in range(30):
            response = client.post("/api/v1/auth/token", body, content_type="application/json")
            if response.status_code == 429:
                break
            assert doc.check(operation, response) == []
        assert response.status_code == 429
        assert doc.check(operation, response) == []
        local = Client(raise_request_exception=False).post(
            "/api/v1/auth/token", body, content_type="application/json"
        )
        assert local.status_code == 400, "another address's sign-ins are not held back"
    finally:
        cache.clear()
