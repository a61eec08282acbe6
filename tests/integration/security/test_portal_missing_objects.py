"""A portal POST on an object that does not exist, or that belongs to another team, is a 404
whatever its body: the object is looked up before the form is read, so a bad or empty form never
answers 400 (or a redirect with "fix this field") for an object the caller cannot have, and no
answer to a bad body tells whether the object exists. The API's walk
(tests/integration/api/test_schema_conformance.py) holds every operation to this; this walk
holds the portal's views to it.

Walked from the URL configuration (a view added later is walked too): every portal route that
names an object (a job, array, node, cluster, dataset, team, member, quota request, priority
class, sign-on rule, token, statement, webhook, policy version, what-if run), POSTed as the
platform admin with an id nobody has and as team A's admin with that and with team B's, each with
no body, an empty form and forms whose every field is wrong. The field names come from every POST
form on the portal's pages (so a field added later is sent wrong too). A team admin may also be
refused the whole route (403), as long as team B's id and a missing one answer alike.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import Resolver404

from . import test_route_isolation as isolation
from .routes import Route, concrete_path, fill_values, iter_routes
from .test_route_isolation import A_PK, B_KWARGS, snapshot

pytestmark = pytest.mark.django_db

# The isolation walk's world: two teams with an object of every kind each (team B's at B_PK).
world = isolation.world

MISSING_ID = "987654"
TEAM_B = "team B's"
# Route keywords that name an object, each with a value no object has.
MISSING = {
    "pk": MISSING_ID,
    "job_id": MISSING_ID,
    "array_id": MISSING_ID,
    "node_id": MISSING_ID,
    "dataset_id": MISSING_ID,
    "webhook_id": MISSING_ID,
    "number": MISSING_ID,
    "run_id": MISSING_ID,
    "slug": "no-such-team",
    "name": "no-such-name",
    "username": "nobody",
}
# Team A's own values, for a route naming two objects (a team and one of its members): one
# missing while the other is the caller's own is a missing object too.
OWN = {"pk": str(A_PK), "job_id": str(A_PK), "slug": "vision", "username": "alice"}
# The actions of routes that take one: each is walked (an unknown action is a 404 anyway).
ACTIONS = {
    "node-action": ("drain", "quarantine", "release"),
    "cluster-retirement": ("retire", "reinstate"),
}
# Fields views read from the POST without a form, in case no page shows their form in this world.
READ_DIRECTLY = {"reason", "attempt", "mode", "candidate", "comment", "on"}
# Wrong for every kind of field: required text, a number, a month, a choice, a name. (Not a
# NUL: gpuplatform.middleware refuses it in any form before a URL is even resolved, so that 400
# is the same for every path and says nothing of an object.)
WRONG_VALUES = {
    "blank": " ",
    "too long": "9" * 5000,
    "negative": "-1",
    "NaN": "NaN",
    "superscript digit": "\u00b2",
}
# Views that take a POST on an object: the walk must find each answering something other than
# 405, so that a route renamed or dropped cannot pass by not being walked.
KNOWN_POST_ROUTES = {
    "job-cancel",
    "job-resubmit",
    "array-cancel",
    "node-action",
    "cluster-retirement",
    "routing-cluster-set",
    "routing-dataset-edit",
    "routing-dataset-delete",
    "routing-team-set",
    "member-set",
    "member-remove",
    "request-new",
    "request-approve",
    "request-reject",
    "manage-team-weight",
    "manage-priority-delete",
    "manage-sso-delete",
    "token-revoke",
    "budget-set",
    "statement-close",
    "webhook-test",
    "webhook-enable",
    "webhook-delete",
    "rollback",
    "whatif-cancel",
    "whatif-apply",
}


FIELD_TAGS = ("input", "select", "textarea")
NOT_FIELDS = (None, "", "csrfmiddlewaretoken")


class _FieldNames(HTMLParser):
    """The names of the fields of every ``<form method="post">`` on a page."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()
        self._in_form = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and (a.get("method") or "get").lower() == "post":
            self._in_form = True
        elif self._in_form and tag in FIELD_TAGS and a.get("name") not in NOT_FIELDS:
            self.names.add(a["name"])

    def handle_endtag(self, tag):
        if tag == "form":
            self._in_form = False


def _object_routes() -> list[Route]:
    return [
        r
        for r in iter_routes()
        if not (r.is_api or r.is_admin_site or r.is_format_variant) and set(r.kwargs) & set(MISSING)
    ]


def _portal_field_names(world) -> set[str]:
    """Every field name of every POST form on the portal's pages, as the platform admin and team
    A's admin see them on team A's objects. A name keyed by an object's id (the routing page's
    ``d-<id>-name``) is also given keyed by the missing id."""
    own_values = dict(world["values"], **{k: str(A_PK) for k in ("pk", "job_id", "array_id")})
    own_values |= {"slug": "vision", "username": "alice", "webhook_id": str(A_PK)}
    names: set[str] = set(READ_DIRECTLY)
    for user in (world["admin"], world["vera"]):
        client = Client(raise_request_exception=False)
        client.force_login(user)
        for route in iter_routes():
            if route.is_api or route.is_admin_site or route.is_format_variant:
                continue
            if route.name in ("logout", "login", "login-break-glass", "csp-report"):
                continue
            try:
                path = concrete_path(route, fill_values(route, own_values))
            except (AssertionError, Resolver404):
                continue
            response = client.get(path)
            if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
                continue
            parser = _FieldNames()
            parser.feed(response.content.decode())
            names |= parser.names
    rekeyed = {re.sub(r"^([a-z]+)-\d+-", rf"\1-{MISSING_ID}-", n) for n in names}
    return names | rekeyed


def _bodies(field_names: set[str]) -> dict[str, dict[str, str] | None]:
    bodies: dict[str, dict[str, str] | None] = {"no body": None, "empty form": {}}
    for label, value in WRONG_VALUES.items():
        bodies[f"every field {label}"] = dict.fromkeys(field_names, value)
    return bodies


def _variants(route: Route, base: dict[str, str], who: str, world) -> list[tuple[str, dict]]:
    """(label, path values) for each object ``who`` cannot have on ``route``: every object key
    missing; with two, each missing alone beside the caller's own; for team A's admin, team B's."""
    keys = sorted(set(route.kwargs) & set(MISSING))
    out = [("missing", dict(base, **{k: MISSING[k] for k in keys}))]
    if len(keys) > 1:
        for key in keys:
            own = {k: OWN[k] for k in keys if k != key}
            out.append((f"missing {key}", dict(base, **own, **{key: MISSING[key]})))
    if who == "vera" and set(keys) & B_KWARGS:
        out.append((TEAM_B, dict(base, **{k: world["values"][k] for k in keys})))
    return out


def _post(client: Client, path: str, body: dict | None):
    if body is None:
        return client.generic("POST", path)
    return client.post(path, body)


def test_a_post_on_a_missing_or_hidden_object_is_404_whatever_the_body(world, capsys):
    callers = {"admin": world["admin"], "vera": world["vera"]}
    field_names = _portal_field_names(world)
    # The harvest found the portal's forms (team, quota, budget, webhook, routing, policy...).
    assert len(field_names - READ_DIRECTLY) >= 30, sorted(field_names)
    bodies = _bodies(field_names)
    routes = _object_routes()
    before = {
        side: snapshot(world["teams"][team], world[user])
        for side, team, user in (("A", "vision", "alice"), ("B", "nlp", "bob"))
    }
    problems: list[str] = []
    takes_post: set[str] = set()
    requests = 0
    for route in routes:
        for action in ACTIONS.get(route.name or "", (None,)):
            base = fill_values(route, world["values"])
            if action is not None:
                base["action"] = action
            for who, user in callers.items():
                client = Client(raise_request_exception=False)
                client.force_login(user)
                # One variant's answers per body, to compare team B's with a missing one's.
                answers: dict[str, dict[str, int]] = {}
                for label, values in _variants(route, base, who, world):
                    path = concrete_path(route, values)
                    answers[label] = {}
                    for body_label, body in bodies.items():
                        status = _post(client, path, body).status_code
                        requests += 1
                        answers[label][body_label] = status
                        if status != 405:
                            takes_post.add(route.name or route.regex)
                        allowed = (404, 405) if who == "admin" else (403, 404, 405)
                        if status not in allowed:
                            problems.append(
                                f"{who} POST {path} ({label}, {body_label}): {status}, not 404"
                            )
                if TEAM_B in answers and answers[TEAM_B] != answers["missing"]:
                    problems.append(
                        f"{who} POST {route.regex}: team B's {answers[TEAM_B]} but a "
                        f"missing one {answers['missing']}"
                    )
    assert not problems, f"{len(problems)} answers:\n" + "\n".join(problems[:60])
    missed = KNOWN_POST_ROUTES - takes_post
    assert not missed, f"known POST views the walk did not reach: {sorted(missed)}"
    for side, team, user in (("A", "vision", "alice"), ("B", "nlp", "bob")):
        assert snapshot(world["teams"][team], world[user]) == before[side], side
    with capsys.disabled():
        print(
            f"\n[portal 404] {len(routes)} routes naming an object ({len(takes_post)} take a "
            f"POST), {len(bodies)} bodies of {len(field_names)} fields, {requests} posts: all 404 (or a team admin's 403)"
        )
