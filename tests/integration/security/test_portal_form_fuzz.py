"""Fuzz the portal's forms the way the API fuzz covers the API (issue 26, "the fuzz also runs
against the portal's forms' numeric and month fields").

Every portal page reachable by a platform admin and by a team admin is fetched (walked from the
URL configuration, so a form added later is fuzzed too); every ``<form method="post">`` on them
is read, and each numeric field (``type=number``, ``inputmode=numeric|decimal``) and month field
is posted with hostile values (1e100, NaN, Infinity, 2**63, thirty digits, 9999-12, 0001-01,
Unicode digits…) and hypothesis-generated numbers, the other fields at their defaults. No
response may be a 5xx; afterwards no stored row breaks its model's bounds and the platform still
works for everyone: another team submits, budgets list, the meter and a scheduling cycle run.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import date
from html.parser import HTMLParser

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from billing.models import Statement
from core.bounds import bounds
from scheduler.models import Job, JobArray
from tenants.models import QuotaRequest

from .routes import concrete_path, fill_values, iter_routes

pytestmark = pytest.mark.django_db

HOSTILE = [
    "1e100",
    "-1e100",
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "inf",
    str(2**63),
    str(-(2**63) - 1),
    "9" * 30,
    "9" * 5000,
    "-1",
    "0",
    "1e-320",
    "0x10",
    "１２",
    "²",
    "1,5",
    " 7 ",
    "",
    "9999-12",
    "0001-01",
    "2026-13",
    "10000-01",
    "2026-1",
]
# Hypothesis examples per field on top of the fixed list; API_FUZZ_SCALE=10 goes deeper.
EXAMPLES = 4 * int(os.environ.get("API_FUZZ_SCALE", "1"))
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.text(alphabet="0123456789-+.eE", min_size=1, max_size=12),
)


class _Forms(HTMLParser):
    """The POST forms of a page: action, fields (name -> default value) and fuzz targets."""

    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []
        self._form = None
        self._select = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and a.get("method", "get").lower() == "post":
            self._form = {"action": a.get("action") or "", "fields": {}, "targets": []}
            self.forms.append(self._form)
        if self._form is None or not a.get("name"):
            if tag == "option" and self._select is not None:
                self._option(a)
            return
        name = a["name"]
        if tag == "input":
            kind = a.get("type", "text").lower()
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self._form["fields"][name] = a.get("value", "on")
                return
            self._form["fields"][name] = a.get("value", "")
            numeric = kind == "number" or a.get("inputmode") in ("numeric", "decimal")
            if numeric or "month" in name:
                self._form["targets"].append(name)
        elif tag == "textarea":
            self._form["fields"][name] = ""
        elif tag == "select":
            self._select = name
            self._form["fields"].setdefault(name, "")

    def _option(self, a):
        value = a.get("value", "")
        fields = self._form["fields"]
        if not fields.get(self._select) or "selected" in a:
            fields[self._select] = value

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None
        elif tag == "select":
            self._select = None


def _pages(world) -> list[str]:
    """Every portal page (GET) a walk of the URL configuration can fill with real ids."""
    paths = []
    for route in iter_routes():
        if route.is_api or route.is_admin_site or route.is_format_variant:
            continue
        if route.name in ("logout", "login", "csp-report", "plotly-js") or route.regex.endswith(
            ("csv", "csv\\Z")
        ):
            continue
        try:
            values = fill_values(route, world)
        except AssertionError:
            continue  # the isolation walk is the strict one about unknown keywords
        paths.append(concrete_path(route, values))
    return paths


@pytest.fixture
def world(platform, teams, gpu_models, priorities, vera, submit, api_as):
    job = Job.objects.get(pk=submit(platform["alice"]).json()["id"])
    array = api_as(platform["alice"]).post(
        "/api/v1/job-arrays/",
        {
            "name": "s",
            "team": "vision",
            "template": {"workers": 1, "gpus_per_worker": 1},
            "count": 2,
        },
        format="json",
    )
    statement = Statement.objects.create(team=teams["vision"], month=date(2026, 11, 1))
    request = QuotaRequest.objects.create(
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        requested_by=vera,
        guaranteed_gpus=1,
        borrow_limit_gpus=0,
        reason="r",
    )
    return {
        "job_id": str(job.pk),
        "attempt": "1",
        "array_id": str(array.json()["id"]),
        "pk": str(statement.pk),
        "slug": "vision",
        "name": "research",
        "node_id": str(platform["cluster"].nodes.first().pk),
        "action": "drain",
        "username": "alice",
        "request_pk": str(request.pk),
    }


def _collect_forms(client, pages) -> list[tuple[str, dict]]:
    found, seen = [], set()
    for path in pages:
        response = client.get(path)
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            continue
        parser = _Forms()
        parser.feed(response.content.decode())
        for form in parser.forms:
            action = form["action"] or path
            key = (action, tuple(sorted(form["targets"])))
            if form["targets"] and key not in seen:
                seen.add(key)
                found.append((action, form))
    return found


def _out_of_bounds_rows() -> list[str]:
    """Rows of any model whose bounded numeric fields hold a value outside the bounds."""
    from django.apps import apps

    bad = []
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if not isinstance(field, models.IntegerField | models.FloatField | models.DecimalField):
                continue
            try:
                lo, hi = bounds(model, field.name)
            except ImproperlyConfigured:
                continue
            outside = model.objects.filter(
                models.Q(**{f"{field.name}__lt": lo}) | models.Q(**{f"{field.name}__gt": hi})
            )
            bad += [
                f"{model._meta.label}.{field.name}: {v}"
                for v in outside.values_list(field.name, flat=True)
            ]
    return bad


def _post(client, who, action, form, target, value, statuses, failures) -> None:
    response = client.post(action, {**form["fields"], target: value})
    statuses[f"{response.status_code // 100}xx"] += 1
    if response.status_code >= 500:
        failures.append(f"{who} POST {action} {target}={value[:40]!r}: {response.status_code}")


def _fuzz_generated(args, statuses, failures) -> None:
    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(value=NUMBERS)
    def generated(value):
        _post(*args, value, statuses, failures)

    generated()


def test_fuzz_the_portals_numeric_and_month_fields(platform, world, vera, submit, capsys):
    failures: list[str] = []
    statuses: Counter[str] = Counter()
    fuzzed_fields = 0
    done: set[tuple] = set()  # a form the admin fuzzed is not fuzzed again as the team admin
    for user in (platform["admin"], vera):
        client = Client(raise_request_exception=False)
        client.force_login(user)
        for action, form in _collect_forms(client, _pages(world)):
            key = (action, tuple(form["targets"]))
            if key in done:
                continue
            done.add(key)
            for target in form["targets"]:
                fuzzed_fields += 1
                args = (client, user.username, action, form, target)
                for value in HOSTILE:
                    _post(*args, value, statuses, failures)

                _fuzz_generated(args, statuses, failures)
    with capsys.disabled():
        print(
            f"\n[form fuzz] {fuzzed_fields} numeric/month fields, {sum(statuses.values())} posts: "
            + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items()))
        )
    assert not failures, "\n".join(failures[:30])
    assert fuzzed_fields >= 20, fuzzed_fields
    assert not _out_of_bounds_rows()

    # What one bad form entry used to break, for everyone. (The fuzz also saved valid settings,
    # a pending cap of 0 say, which refuse submissions on purpose: those are set back first.)
    from billing.models import Budget
    from tenants.models import PriorityClass, TeamEntitlements

    TeamEntitlements.objects.all().delete()
    Budget.objects.all().delete()
    PriorityClass.objects.update(restricted=False)
    assert submit(platform["bob"], team="nlp").status_code == 201
    admin = Client()
    admin.force_login(platform["admin"])
    assert admin.get("/api/v1/billing/budgets/").status_code == 200
    assert admin.get("/billing/overview/").status_code == 200
    from billing.meter import meter_run
    from scheduler.loop.cycle import run_cycle

    meter_run(now=timezone.now())
    assert run_cycle().ran
    assert JobArray.objects.exists()
