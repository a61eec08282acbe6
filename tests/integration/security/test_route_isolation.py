"""Tenant isolation, asserted over every route of the URL configuration (a route added later is
walked automatically): anonymous callers are refused; users of team A (a member and a team admin)
never read or change team B's objects, get 404 for them, and cannot plant rows in team B by
smuggling ``team`` (or a user) into a body; every REST list shows exactly the caller's rows and
each hidden row's detail is a 404.

Team B's objects carry the marker ``bravo-secret`` (and team A's ``alpha-secret``): no response
to the other side may contain it, whatever the route renders.
"""

from __future__ import annotations

import json
import re
from datetime import date, timedelta

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.test import Client, RequestFactory
from django.utils import timezone
from rest_framework.request import Request

from notifications.models import DeliveryAttempt, Event, Message, Preference, Webhook
from scheduler.models import Allocation, Job, JobArray, JobEvent, Node
from tenants.models import (
    ApiToken,
    AuditEntry,
    Membership,
    PriorityClass,
    Quota,
    QuotaRequest,
    Team,
    hash_token,
)
from tests.integration.roles import make_user

from .routes import Route, concrete_path, fill_values, iter_routes

pytestmark = pytest.mark.django_db

A_PK, B_PK = 8001, 9001
PUBLIC_ROUTE_NAMES = {
    "login",
    "login-break-glass",
    "logout",
    "oidc_authentication_init",
    "oidc_authentication_callback",
    "api-token",
    "api-schema",
    "api-docs",
    "api-redoc",
    "api-redoc-bundle",  # the Redoc script, content-addressed
    "plotly-js",
    "csp-report",  # browsers post violation reports without a session
}
# Keywords whose value (in the table below) names an object of team B.
B_KWARGS = {"pk", "job_id", "array_id", "slug", "username", "object_id", "id", "webhook_id"}
# Generating the OpenAPI schema takes a second or two: fetched once, anonymously.
EXPENSIVE_ROUTE_NAMES = {"api-schema"}
# Models every signed-in user may list (the cluster and the price book are shared).
SHARED_MODELS = {
    "catalogue.gpumodel",
    "scheduler.node",
    "scheduler.cluster",
    "tenants.priorityclass",
    "billing.pricerate",
}
SMUGGLED = {
    "team": "nlp",
    "user": None,
    "username": "bob",
    "submitter": "bob",
    "role": "admin",
    "name": "smuggled",
    "workers": 1,
    "gpus_per_worker": 1,
    "gpu_model": "h100-80gb",
    "guaranteed_gpus": 1,
    "borrow_limit_gpus": 0,
    "reason": "smuggled",
    "comment": "smuggled",
    "amount": "100",
    "month": "2026-12-01",
    "fair_share_weight": 5,
    "value": 1,
}


def _notifications(team, pk, user, admin, side):
    """A team webhook (managed by ``admin``), a personal one of ``user``, a delivered message to
    each with its attempt, an email message and a preference: the walk must never show another
    side's settings, hooks or delivery log."""
    now = timezone.now()
    team_hook = Webhook.objects.create(
        pk=pk,
        team=team,
        name=f"{side}-secret-hook",
        url=f"https://{side}-secret.example.com/hook",
        created_by=admin,
    )
    own_hook = Webhook.objects.create(
        pk=pk + 1, owner=user, name=f"{side}-secret-own-hook", url="https://example.com/own"
    )
    event = Event.objects.create(
        kind="job.failed",
        team=team,
        job_id=pk,
        created_at=now,
        fanned_out_at=now,
        title=f"Job {side}-secret-job failed",
    )
    for offset, (channel, hook, who) in enumerate(
        [("webhook", team_hook, None), ("webhook", own_hook, None), ("email", None, user)]
    ):
        message = Message.objects.create(
            pk=pk + offset,
            channel=channel,
            webhook=hook,
            user=who,
            target=f"{channel}:{pk + offset}",
            status="delivered",
            created_at=now,
            send_after=now,
            subject=f"Job {side}-secret-job failed",
            event_count=1,
        )
        message.events.add(event)
        DeliveryAttempt.objects.create(
            message=message, number=1, started_at=now, ok=True, error=f"{side}-secret-answer"
        )
    Preference.objects.create(user=user, event="job.preempted", channel="email", enabled=True)


def _try_billing(team, pk, user):
    """Billing rows for the team when the billing app has them (its routes are walked too),
    after the team's job ``pk`` exists."""
    try:
        budget_model = apps.get_model("billing", "Budget")
        statement_model = apps.get_model("billing", "Statement")
        alert_model = apps.get_model("billing", "BudgetAlert")
    except LookupError:
        return
    budget = budget_model.objects.create(pk=pk, team=team, month=date(2026, 12, 1), amount=100)
    statement_model.objects.create(pk=pk, team=team, month=date(2026, 12, 1))
    alert_model.objects.create(
        pk=pk, budget=budget, threshold=50, spend=60, fired_at=timezone.now()
    )
    # The job's usage this month: the dashboards and the cost API name their top jobs.
    apps.get_model("billing", "UsageJobMonth").objects.create(
        job_id=pk, month=timezone.now().date().replace(day=1), team=team, gpu_seconds=3600, cost=1
    )


@pytest.fixture
def world(platform, teams, gpu_models, priorities, vera, nick):
    now = timezone.now()
    sides = (
        ("alpha", teams["vision"], platform["alice"], vera, A_PK),
        ("bravo", teams["nlp"], platform["bob"], nick, B_PK),
    )
    for side, team, user, admin, pk in sides:
        team.name = f"{side}-secret-team"
        team.save()
        array = JobArray.objects.create(
            pk=pk,
            team=team,
            submitter=user,
            name=f"{side}-secret-array",
            size=1,
            template={"command": f"{side}-secret-template"},
            submitted_at=now,
        )
        job = Job.objects.create(
            pk=pk,
            array=array,
            array_index=0,
            team=team,
            submitter=user,
            name=f"{side}-secret-job",
            workers=1,
            gpus_per_worker=1,
            priority_class=priorities["research"],
            submitted_at=now,
            command=f"{side}-secret-command",
        )
        JobEvent.objects.create(job=job, time=now, kind="submitted", message=f"{side}-secret-ev")
        Quota.objects.create(pk=pk, team=team, gpu_model=gpu_models["h100"], guaranteed_gpus=2)
        QuotaRequest.objects.create(
            pk=pk,
            team=team,
            gpu_model=gpu_models["h100"],
            requested_by=admin,
            guaranteed_gpus=4,
            borrow_limit_gpus=0,
            reason=f"{side}-secret-reason",
        )
        ApiToken.objects.create(
            pk=pk,
            user=user,
            name=f"{side}-secret-token",
            key_hash=hash_token(f"gpt_{side}"),
            key_prefix="gpt_abcd",
        )
        AuditEntry.objects.create(
            pk=pk,
            time=now,
            actor=admin,
            actor_name=admin.username,
            action="quota.set",
            target_type="quota",
            target_id=str(pk),
            team=team,
            comment=f"{side}-secret-audit",
        )
        _try_billing(team, pk, user)
        _notifications(team, pk, user, admin, side)
    values = {
        "pk": str(B_PK),
        "job_id": str(B_PK),
        "attempt": "1",
        "array_id": str(B_PK),
        "object_id": str(B_PK),
        "slug": "nlp",
        "id": str(platform["bob"].pk),
        "url": "anything/",
        "username": "bob",
        "name": "research",
        "node_id": str(Node.objects.first().pk),
        "dataset_id": str(B_PK),
        "action": "drain",
        "version": "0",
        "content_type_id": str(ContentType.objects.get_for_model(Job).pk),
        "webhook_id": str(B_PK),
        "digest": "0123456789abcdef",
        "number": "1",
        "run_id": "1",
    }
    return {**platform, "vera": vera, "nick": nick, "teams": teams, "values": values}


def _team_path(model) -> str | None:
    """The lookup from ``model`` to its owning team, direct or through one foreign key."""
    fields = {f.name: f for f in model._meta.get_fields() if isinstance(f, models.ForeignKey)}
    if "team" in fields and fields["team"].related_model is Team:
        return "team"
    for name, field in fields.items():
        related = {f.name for f in field.related_model._meta.get_fields()}
        if "team" in related and field.related_model is not Team:
            return f"{name}__team"
    return None


def snapshot(team: Team, user) -> dict:
    """Every row owned by ``team`` (or by ``user``), in every model, as plain values."""
    out = {
        "team": list(Team.objects.filter(pk=team.pk).values()),
        # last_login moves when the walk signs the user in; nothing else of theirs may.
        "user": list(
            get_user_model()
            .objects.filter(pk=user.pk)
            .values("username", "password", "is_active", "is_staff", "is_superuser", "email")
        ),
        "tokens": list(ApiToken.objects.filter(user=user).order_by("pk").values()),
        "own webhooks": list(Webhook.objects.filter(owner=user).order_by("pk").values()),
        "preferences": list(Preference.objects.filter(user=user).order_by("pk").values()),
        "email messages": list(Message.objects.filter(user=user).order_by("pk").values()),
    }
    for model in apps.get_models():
        path = _team_path(model)
        if path:
            rows = model.objects.filter(**{path: team}).order_by("pk").values()
            out[model._meta.label_lower] = list(rows)
    return out


def _body(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")


class Walker:
    def __init__(self, world):
        self.world = world
        self.requests = 0
        self.problems: list[str] = []
        self.routes = [r for r in iter_routes()]

    def client(self, user) -> Client:
        # A crash must be recorded as a 5xx, not abort the walk.
        client = Client(raise_request_exception=False)
        if user is not None:
            client.force_login(user)
        return client

    def call(self, client, method, path, route: Route, foreign_marker: str):
        kwargs = {}
        if method != "get":
            body = dict(SMUGGLED, user=self.world["bob"].pk)
            if route.is_api:
                kwargs = {"data": json.dumps(body), "content_type": "application/json"}
            else:
                kwargs = {"data": body}
        response = getattr(client, method)(path, **kwargs)
        self.requests += 1
        if response.status_code >= 500:
            self.problems.append(f"{method.upper()} {path}: {response.status_code}")
        if foreign_marker in _body(response):
            self.problems.append(f"{method.upper()} {path} leaks {foreign_marker}")
        return response

    def expect(self, ok: bool, message) -> None:
        if not ok:
            self.problems.append(str(message))


def walk_routes(world, routes, walker) -> int:
    """Request every route in ``routes`` as anonymous, as team A's member and admin (every
    method, with a smuggled body), and as team B's member; returns how many routes aimed at
    team B's objects. Problems are collected on ``walker``."""
    anon = walker.client(None)
    a_side = {"alice": walker.client(world["alice"]), "vera": walker.client(world["vera"])}
    bob = walker.client(world["bob"])
    targeted = 0
    for route in routes:
        values = fill_values(route, world["values"])
        path = concrete_path(route, values)
        public = route.name in PUBLIC_ROUTE_NAMES
        # Anonymous: refused everywhere but the public routes.
        anon_methods = ("get",) if route.name in EXPENSIVE_ROUTE_NAMES else ("get", "post")
        for method in anon_methods:
            response = walker.call(anon, method, path, route, "secret")
            if not public:
                walker.expect(
                    response.status_code in (401, 403, 405)
                    or (response.status_code == 302 and "login" in response["Location"]),
                    ("anonymous", method, path, response.status_code),
                )
        if route.name == "logout" or route.name in EXPENSIVE_ROUTE_NAMES:
            continue  # logout would end the sessions the walk runs on
        methods = ["get", "post"] + (["put", "patch", "delete"] if route.is_api else [])
        hits_b = bool(B_KWARGS & set(route.kwargs)) and not route.is_admin_site
        targeted += hits_b
        for who, client in a_side.items():
            if route.is_admin_site and who != "alice":
                continue  # Django's admin site is staff-only as a whole: one non-staff suffices
            for method in methods:
                if who == "vera" and method == "get" and not hits_b:
                    continue  # a team admin reads what a member reads; their writes matter
                response = walker.call(client, method, path, route, "bravo-secret")
                if hits_b:
                    allowed = (403, 404, 405) if method == "get" else (400, 403, 404, 405)
                    walker.expect(
                        response.status_code in allowed, (who, method, path, response.status_code)
                    )
        # Team B's member walks the same routes without seeing team A.
        if not route.is_admin_site:
            walker.call(bob, "get", path, route, "alpha-secret")
    return targeted


def test_every_route_isolates_teams(world, capsys):
    walker = Walker(world)
    b_before = snapshot(world["teams"]["nlp"], world["bob"])
    # DRF's ".json" suffix variants run the same views; they are walked by the test below.
    routes = [r for r in walker.routes if not r.is_format_variant]
    targeted = walk_routes(world, routes, walker)
    assert not walker.problems, "\n".join(walker.problems)
    assert snapshot(world["teams"]["nlp"], world["bob"]) == b_before
    with capsys.disabled():
        print(
            f"\n[isolation] {len(routes)} routes walked ({targeted} aimed at team B's "
            f"objects), {walker.requests} requests: no leak, team B unchanged"
        )


def test_format_suffix_routes_isolate_and_do_not_crash(world):
    walker = Walker(world)
    b_before = snapshot(world["teams"]["nlp"], world["bob"])
    walk_routes(world, [r for r in walker.routes if r.is_format_variant], walker)
    assert snapshot(world["teams"]["nlp"], world["bob"]) == b_before
    assert not walker.problems, "\n".join(walker.problems)


def _model_of(view_class, admin):
    """The model a viewset lists: from its queryset, else by asking ``get_queryset`` (as a
    platform admin, so any scoping selector still answers)."""
    queryset = getattr(view_class, "queryset", None)
    if queryset is not None:
        return queryset.model
    request = Request(RequestFactory().get("/"))
    request.user = admin
    view = view_class(request=request, kwargs={}, format_kwarg=None, action="list", args=())
    return view.get_queryset().model


def expected_rows(model, user) -> set:
    from tenants.permissions import auditable_team_ids, is_platform_admin, team_ids_of

    label = model._meta.label_lower
    if label in SHARED_MODELS:
        return set(model.objects.values_list("pk", flat=True))
    if model is ApiToken:
        return set(ApiToken.objects.filter(user=user).values_list("pk", flat=True))
    if model is Webhook:
        # Your own hooks, and your managed teams' (every team's for a platform admin); never
        # another person's own hooks, not even for a platform admin.
        managed = (
            Q(team__isnull=False)
            if is_platform_admin(user)
            else Q(team_id__in=auditable_team_ids(user))
        )
        return set(Webhook.objects.filter(Q(owner=user) | managed).values_list("pk", flat=True))
    if model is Message:
        hooks = expected_rows(Webhook, user)
        return set(
            Message.objects.filter(
                Q(channel="email", user=user) | Q(webhook_id__in=hooks)
            ).values_list("pk", flat=True)
        )
    if model is AuditEntry:
        qs = AuditEntry.objects.all()
        if not is_platform_admin(user):
            qs = qs.filter(team_id__in=auditable_team_ids(user))
        return set(qs.values_list("pk", flat=True))
    qs = model.objects.all()
    if model is Team:
        return (
            set(qs.filter(pk__in=team_ids_of(user)).values_list("pk", flat=True))
            if not is_platform_admin(user)
            else set(qs.values_list("pk", flat=True))
        )
    path = _team_path(model)
    assert path, (
        f"{label} is listed by the API but is neither shared nor owned by a team: classify it in "
        "tests/integration/security/test_route_isolation.py"
    )
    if not is_platform_admin(user):
        qs = qs.filter(**{f"{path}__in": team_ids_of(user)})
    return set(qs.values_list("pk", flat=True))


# Computed reports, not model lists: the route walk above checks they leak nothing across
# teams, and their own tests check another team's report is a 404.
REPORT_LISTS = {"cost-list"}
# Lists for platform admins only (every row, shared facts): anyone else is refused whole.
ADMIN_ONLY_LISTS = {"cluster-admin-list", "dataset-admin-list", "team-clusters-admin-list"}


def test_every_rest_list_shows_exactly_the_callers_rows(world, capsys):
    routes = [
        r
        for r in iter_routes()
        if r.is_api
        and r.name
        and r.name.endswith("-list")
        and not r.is_format_variant
        and r.name not in REPORT_LISTS
    ]
    details = {r.name: r for r in iter_routes() if r.is_api and not r.is_format_variant}
    checked = hidden_checked = 0
    users = [world[k] for k in ("alice", "bob", "charlie", "vera", "nick", "admin")]
    for route in routes:
        view = route.view_class
        model = _model_of(view, world["admin"])
        assert model is not None, f"{route.regex}: cannot tell which model it lists"
        lookup = getattr(view, "lookup_field", "pk")
        attr = "id" if lookup == "pk" else lookup
        path = concrete_path(route, {})
        detail = details.get(route.name[: -len("-list")] + "-detail")
        for user in users:
            client = Client()
            client.force_login(user)
            response = client.get(path, {"limit": 1000})
            if route.name in ADMIN_ONLY_LISTS and user != world["admin"]:
                assert response.status_code == 403, (user, path, response.status_code)
                checked += 1
                continue
            assert response.status_code == 200, (user, path, response.status_code)
            body = response.json()
            items = body["results"] if isinstance(body, dict) and "results" in body else body
            shown = {item[attr] for item in items}
            expected_pks = (
                set(model.objects.values_list("pk", flat=True))
                if route.name in ADMIN_ONLY_LISTS
                else expected_rows(model, user)
            )
            expected = set(model.objects.filter(pk__in=expected_pks).values_list(lookup, flat=True))
            assert shown == expected, (user.username, path, shown, expected)
            checked += 1
            if detail is None:
                continue
            for hidden in model.objects.exclude(pk__in=expected_pks).values_list(lookup, flat=True):
                url = concrete_path(detail, {detail.kwargs[0]: str(hidden)})
                assert client.get(url).status_code == 404, (user.username, url)
                hidden_checked += 1
    with capsys.disabled():
        print(
            f"\n[isolation] {len(routes)} REST lists x {len(users)} users: visible sets exact; "
            f"{hidden_checked} hidden rows answered 404"
        )
    assert checked and hidden_checked


def test_memberships_of_team_b_untouched_by_team_a_admin(world):
    """A spot check the walk also covers: vera (admin of A) cannot change B's members."""
    client = Client()
    client.force_login(world["vera"])
    response = client.post("/teams/team/nlp/members/", {"username": "vera", "role": "owner"})
    assert response.status_code == 404
    assert not Membership.objects.filter(user=world["vera"], team__slug="nlp").exists()


# ----------------------------------------------------------------------------------------------
# Filters in the query string, the parent team's owner, team A's viewer, and what team B's
# activity changes in what team A reads.

# Every filter name a list, page or export takes (or might take) with team B's values: a filter
# must narrow the caller's rows, never widen them to another team's.
B_FILTERS = {
    "team": "nlp",
    "team__slug": "nlp",
    "job": str(B_PK),
    "job_id": str(B_PK),
    "ids": str(B_PK),
    "array": str(B_PK),
    "user": "bob",
    "username": "bob",
    "submitter": "bob",
    "owner": "bob",
    "actor": "nick",
    "webhook": str(B_PK),
    "request": str(B_PK),
    "entitlements": "nlp",
}
# A missing object of each kind, to compare with team B's (an answer that differs says B's
# exists).
MISSING = {
    "pk": "987654",
    "job_id": "987654",
    "array_id": "987654",
    "object_id": "987654",
    "id": "987654",
    "webhook_id": "987654",
    "slug": "no-such-team",
    "username": "nobody",
}
# What team B's activity may change in another team's pages: the shared cluster grid (GPUs "in
# use", never by whom: the walk above checks no name shows) and, for the parent team's owner,
# the GPUs in use with the sub-teams on /teams/ (docs/tenancy.md).
SHARED_CHANGES = {"/cluster/", "/cluster/state/"}
PARENT_CHANGES = {"/teams/"}
# What differs between two renders of one page with nothing changed.
_NOISE = [
    re.compile(r'csrfmiddlewaretoken" value="[^"]+"'),
    re.compile(r'nonce="[^"]+"'),
    re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?"),
    re.compile(r"\d\d:\d\d(:\d\d)?"),
]


def _normalised(response) -> str:
    text = _body(response)
    for pattern in _NOISE:
        text = pattern.sub("~", text)
    return text


def _get_routes() -> list[Route]:
    return [
        r
        for r in iter_routes()
        if not (r.is_format_variant or r.is_admin_site)
        and r.name not in EXPENSIVE_ROUTE_NAMES
        and r.name != "logout"
    ]


def _more_roles(world) -> dict:
    """Team A's member, admin and viewer, and the owner of research, the parent of both teams
    (who is no member of either)."""
    rhea = make_user("rhea", world["teams"]["research"], "owner")
    return {k: world[k] for k in ("alice", "vera", "charlie")} | {"rhea": rhea}


def _team_b_runs(world, count: int = 1, first_gpu: int = 0) -> None:
    """Team B's jobs holding GPUs, finished and pending, so that pages showing the cluster, use,
    outcomes or queues have something of B's to show."""
    now = timezone.now()
    node = Node.objects.order_by("-pk").first()
    for i in range(count):
        for state in ("running", "failed", "pending"):
            job = Job.objects.create(
                team=world["teams"]["nlp"],
                submitter=world["bob"],
                name=f"bravo-secret-{state}-{first_gpu + i}",
                workers=1,
                gpus_per_worker=1,
                priority_class=PriorityClass.objects.get(name="research"),
                submitted_at=now - timedelta(hours=3),
                state=state,
                started_at=None if state == "pending" else now - timedelta(hours=2),
                finished_at=now - timedelta(hours=1) if state == "failed" else None,
                cluster=None if state == "pending" else node.cluster,
                attempts=0 if state == "pending" else 1,
            )
            JobEvent.objects.create(job=job, time=now, kind=state, message="bravo-secret-ev")
            if state == "running":
                Allocation.objects.create(
                    job=job, node=node, gpu_index=first_gpu + i, started_at=job.started_at
                )


def test_query_filters_naming_team_b_show_nothing_of_it(world, capsys):
    """Every GET route with every filter set to team B's values, as team A's member, admin and
    viewer and as the parent team's owner: no 5xx, nothing of team B in the answer."""
    _team_b_runs(world)
    walker = Walker(world)
    routes = _get_routes()
    for who, user in _more_roles(world).items():
        client = walker.client(user)
        for route in routes:
            path = concrete_path(route, fill_values(route, world["values"]))
            response = client.get(path, B_FILTERS)
            walker.requests += 1
            if response.status_code >= 500:
                walker.problems.append(f"{who} GET {path}?<B filters>: {response.status_code}")
            if "bravo-secret" in _body(response):
                walker.problems.append(f"{who} GET {path}?<B filters> leaks bravo-secret")
    assert not walker.problems, "\n".join(walker.problems)
    with capsys.disabled():
        print(f"\n[isolation] {walker.requests} requests with team B's filters: no leak")


def test_team_b_ids_answer_as_missing_ids_do(world, capsys):
    """For every route aimed at team B's objects, and every method: team A's member, admin and
    viewer get the same status and the same body for team B's id as for an id nobody has, so
    no answer confirms that team B's object exists."""
    roles = _more_roles(world)
    problems, compared = [], 0
    for route in _get_routes():
        keys = B_KWARGS & set(route.kwargs)
        if not keys:
            continue
        real = fill_values(route, world["values"])
        missing = dict(real, **{k: MISSING[k] for k in keys})
        methods = ["get", "post"] + (["put", "patch", "delete"] if route.is_api else [])
        for who in ("alice", "vera", "charlie"):
            client = Client(raise_request_exception=False)
            client.force_login(roles[who])
            for method in methods:
                answers = []
                for values in (real, missing):
                    kwargs = {}
                    if method != "get":
                        body = dict(SMUGGLED, user=world["bob"].pk)
                        kwargs = (
                            {"data": json.dumps(body), "content_type": "application/json"}
                            if route.is_api
                            else {"data": body}
                        )
                    path = concrete_path(route, values)
                    response = getattr(client, method)(path, **kwargs)
                    text = _normalised(response)
                    for key in keys:
                        text = text.replace(values[key], "<id>")
                    answers.append((response.status_code, text))
                compared += 1
                if answers[0] != answers[1]:
                    problems.append(
                        f"{who} {method.upper()} {concrete_path(route, real)}: "
                        f"{answers[0][0]} for team B's, {answers[1][0]} for a missing one"
                    )
    assert not problems, "\n".join(problems)
    with capsys.disabled():
        print(f"\n[isolation] {compared} answers to team B's ids match those to missing ids")


def test_team_b_activity_changes_nothing_team_a_or_the_parent_reads(world):
    """Every GET page and endpoint, as team A's member and viewer and the parent team's owner,
    before and after team B runs, finishes and queues more jobs: nothing changes but the shared
    cluster grid (and the parent's GPUs in use with its sub-teams). Catches what a marker cannot:
    counts, totals and queue positions of another team."""
    _team_b_runs(world)
    roles = _more_roles(world)
    readers = {k: roles[k] for k in ("alice", "charlie", "rhea")}
    routes = _get_routes()

    def render() -> dict:
        out = {}
        for who, user in readers.items():
            client = Client(raise_request_exception=False)
            client.force_login(user)
            for route in routes:
                path = concrete_path(route, fill_values(route, world["values"]))
                response = client.get(path)
                out[(who, path)] = (response.status_code, _normalised(response))
        return out

    before, again = render(), render()
    noisy = {key for key in before if before[key] != again[key]}
    assert len(noisy) <= 3, f"pages that change by themselves: {sorted(noisy)}"
    _team_b_runs(world, count=2, first_gpu=1)
    after = render()
    changed = [
        f"{who} {path}"
        for (who, path), answer in before.items()
        if (who, path) not in noisy
        and answer != after[(who, path)]
        and path not in SHARED_CHANGES
        and not (who == "rhea" and path in PARENT_CHANGES)
    ]
    assert not changed, "team B's activity changed:\n" + "\n".join(changed)


# Filters naming a team or a webhook: one rule (docs/tenancy.md), a 404 with one body whether the
# team (or hook) is another's or does not exist, never an empty list that reads as "no rows".
NAMING_FILTERS = {
    "team": ("nlp", "no-such-team"),
    "team__slug": ("nlp", "no-such-team"),
    "webhook": (str(B_PK), "987654"),
}
# The routes known to take one: the walk must find each of them answering 404 (so that a route
# dropped from the walk, or a filter renamed, cannot pass by being skipped).
KNOWN_NAMING_FILTERS = {
    ("team", "/api/v1/jobs/"),
    ("team", "/jobs/"),
    ("team__slug", "/api/v1/quotas/"),
    ("team", "/api/v1/audit/"),
    ("team", "/teams/audit/"),
    ("team", "/teams/audit.csv"),
    ("webhook", "/api/v1/notifications/deliveries/"),
    ("webhook", "/notifications/deliveries/"),
    ("team", "/api/v1/billing/costs/"),
    ("team", "/api/v1/billing/statements/"),
    ("team", "/billing/statements/"),
    ("team", "/api/v1/outcomes/"),
    ("team", "/outcomes/"),
}
# Not filters, though the walk's comparison sees the value change the page: the new-job form's
# ``team`` preselects one of the caller's teams (another is not offered, and the submission's
# own check refuses it on the field); the webhooks page ignores ``webhook`` but links each hook's
# deliveries as ``?webhook=<id>``, which the echo blanking takes for the caller's own value.
NOT_FILTERS = {
    ("team", "/jobs/new/"),
    ("team__slug", "/jobs/new/"),
    ("webhook", "/notifications/webhooks/"),
}


def _echo_free(response, key: str, value: str) -> tuple[int, str]:
    """The answer with the filter's own echo (a link or a form field repeating it) blanked, so
    that answers to two values compare equal unless the filter changed what was found."""
    text = _normalised(response)
    for echo in (f"{key}={value}", f'name="{key}" value="{value}"'):
        text = text.replace(echo, "~")
    return response.status_code, text


def test_filters_naming_a_hidden_or_missing_team_or_webhook_are_404(world, capsys):
    """Every GET route with ``team``, ``team__slug`` or ``webhook`` set to the caller's own value,
    team B's and one that does not exist, as team A's member and admin and the parent team's
    owner: a route whose answer the filter changes (own value against B's) answers 404 for B's
    and for the missing one, with the same body."""
    roles = _more_roles(world)
    # The caller's own team and a hook they may see (the parent's owner has none).
    own = {
        "alice": {"team": "vision", "webhook": str(A_PK + 1)},
        "vera": {"team": "vision", "webhook": str(A_PK)},
        "rhea": {"team": "research", "webhook": None},
    }
    problems: list[str] = []
    found: set[tuple[str, str]] = set()
    for who, mine in own.items():
        client = Client(raise_request_exception=False)
        client.force_login(roles[who])
        for route in _get_routes():
            path = concrete_path(route, fill_values(route, world["values"]))
            for key, (b_value, missing) in NAMING_FILTERS.items():
                own_value = mine["webhook" if key == "webhook" else "team"]
                if own_value is None:
                    continue
                answers = {
                    value: _echo_free(client.get(path, {key: value}), key, value)
                    for value in (own_value, b_value, missing)
                }
                if answers[own_value] == answers[b_value] == answers[missing]:
                    continue  # the route does not take this filter
                if (key, path) in NOT_FILTERS:
                    continue
                if answers[b_value] != answers[missing]:
                    problems.append(
                        f"{who} {path}?{key}=: {answers[b_value][0]} for team B's, "
                        f"{answers[missing][0]} for a missing one (or the bodies differ)"
                    )
                elif answers[b_value][0] != 404:
                    problems.append(f"{who} {path}?{key}=<B's or none>: {answers[b_value][0]}")
                else:
                    found.add((key, path))
    missed = KNOWN_NAMING_FILTERS - found
    assert not problems, "\n".join(problems)
    assert not missed, f"known filters that answered no 404: {sorted(missed)}"
    with capsys.disabled():
        print(f"\n[isolation] {len(found)} filters naming a team or hook: 404 for B's and none")
