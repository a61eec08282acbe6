"""Numbers, months and ids a hostile or careless user can type (issue 26, findings 1, 2 and 8).

One form entry must never stop the platform for everyone: a budget of ``1e100`` (or NaN,
Infinity) made every team's submissions and the meter fail, ``month=9999-12`` made the budget list
a 500 for everyone, a job's ``simulated_duration_s: 1e308`` or ``runtime_limit_s: 10**15`` stopped
the scheduling loop. Every numeric field of every API serializer and portal form is bounded from
the model (``core.bounds``), every month goes through ``calc.parse_month`` and every id is
range-checked; these tests hold each door shut and check the platform still works afterwards.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import pkgutil
import sys
from pathlib import Path

import pytest
from django import forms
from django.apps import apps
from django.conf import settings
from django.test import Client
from rest_framework import serializers

from billing.meter import meter_run
from billing.models import Budget
from scheduler.models import Job, JobArray
from tenants.models import Quota

pytestmark = pytest.mark.django_db

HOSTILE_AMOUNTS = ["1e100", "NaN", "Infinity", "-Infinity", "1e15", "-5", "0", "sNaN", "1e-30"]
HOSTILE_MONTHS = ["9999-12", "0001-01", "2026-13", "2026-00", "１２３４-05", "10000-01"]


def _portal(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def _platform_still_works(platform, submit):
    """What finding 1 broke: every team's submissions, the budget list, metering."""
    response = submit(platform["bob"], team="nlp")
    assert response.status_code == 201, response.content
    listed = _portal(platform["admin"]).get("/api/v1/billing/budgets/")
    assert listed.status_code == 200, listed.content
    meter_run()
    page = _portal(platform["alice"]).get("/jobs/new/")
    assert page.status_code == 200


def test_budget_form_refuses_amounts_that_are_not_finite_money(platform, vera, submit):
    client = _portal(vera)
    for amount in HOSTILE_AMOUNTS:
        response = client.post(
            "/billing/teams/vision/budget", {"month": "2026-12", "amount": amount}
        )
        assert response.status_code < 500, (amount, response.status_code)
        assert not Budget.objects.exists(), amount
    # A sane amount (with a thousands separator) still works.
    client.post("/billing/teams/vision/budget", {"month": "2026-12", "amount": "12,500"})
    assert Budget.objects.get().amount == 12500
    _platform_still_works(platform, submit)


def test_budget_months_outside_the_served_range_are_refused(platform, vera, api_as, submit):
    client = _portal(vera)
    for month in HOSTILE_MONTHS:
        response = client.post("/billing/teams/vision/budget", {"month": month, "amount": "10"})
        assert response.status_code == 400, (month, response.status_code)
        api = api_as(vera).post(
            "/api/v1/billing/budgets/",
            {"team": "vision", "month": month, "amount": "10"},
            format="json",
        )
        assert api.status_code == 400 and "month" in api.json(), (month, api.content)
    assert not Budget.objects.exists()
    _platform_still_works(platform, submit)


@pytest.mark.parametrize("month", ["9999-12", "0001-01", "2026-13"])
def test_cost_pages_and_api_answer_a_bad_month_with_400(platform, vera, month):
    for user, path in (
        (vera, f"/billing/teams/vision/?month={month}"),
        (platform["admin"], f"/billing/overview/?month={month}"),
        (vera, f"/api/v1/billing/costs/?team=vision&month={month}"),
    ):
        response = _portal(user).get(path)
        assert response.status_code == 400, (path, response.status_code)
    body = _portal(vera).get(f"/api/v1/billing/costs/?team=vision&month={month}").json()
    assert "month" in body


def test_the_first_and_last_months_served_render_without_links_beyond(platform, vera):
    for month, missing in (("2000-01", 'rel="prev"'), ("2199-12", 'rel="next"')):
        page = _portal(vera).get(f"/billing/teams/vision/?month={month}")
        assert page.status_code == 200
        assert missing not in page.content.decode()


GIANT_JOB_FIELDS = [
    ("simulated_duration_s", 1e308),
    ("runtime_limit_s", 10**15),
    ("checkpoint_interval_s", 2**63),
    ("workers", 2**70),
    ("gpus_per_worker", 10**6),
    ("elastic", {"min_workers": 1, "max_workers": 2**70}),
    ("runtime_limit_s", -1),
    ("simulated_duration_s", 0.5),
]


@pytest.mark.parametrize(("field", "value"), GIANT_JOB_FIELDS)
def test_api_refuses_job_numbers_outside_the_model_bounds(platform, submit, field, value):
    response = submit(platform["alice"], **{field: value})
    assert response.status_code == 400, response.content
    assert field in json.dumps(response.json())
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("checkpoint_interval_s", "1_000"),  # Python's int() reads it as 1000
        ("runtime_limit_s", "\uff11\uff12\uff10\uff10"),  # full-width "1200"
        ("simulated_duration_s", True),  # DRF reads a boolean as 1
        ("workers", False),
    ],
)
def test_api_numbers_are_numbers_not_what_python_happens_to_read(platform, submit, field, value):
    response = submit(platform["alice"], **{field: value})
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Job.objects.exists()
    # a number given as plain text, as a form sends it, is still one
    assert submit(platform["alice"], checkpoint_interval_s=" 1800 ").status_code == 201


def test_array_submissions_bound_every_index(platform, api_as):
    api = api_as(platform["alice"])
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1},
        "items": [{"simulated_duration_s": 60}, {"simulated_duration_s": 1e308}],
    }
    response = api.post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400
    assert "items[1].simulated_duration_s" in response.json()
    body["items"] = [{}, {}]
    body["template"]["runtime_limit_s"] = 10**15
    response = api.post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400 and "template.runtime_limit_s" in response.json()
    assert not Job.objects.exists() and not JobArray.objects.exists()


def _job_form(**fields) -> dict:
    data = {"name": "train", "team": "vision", "workers": "1", "gpus_per_worker": "1"}
    data.update(fields)
    return data


@pytest.mark.parametrize(
    "fields",
    [
        {"simulated_duration_s": "1e308"},
        {"simulated_duration_s": "Infinity"},
        {"simulated_duration_s": "NaN"},
        {"runtime_limit_s": str(10**15)},
        {"checkpoint_interval_s": str(2**63)},
        {"elastic_min_workers": "1", "elastic_max_workers": str(2**70)},
        {"workers": str(2**70)},
        {"array_count": "2", "array_params": "simulated_duration_s=60,1e308"},
        {"array_count": "2", "array_params": "runtime_limit_s=60,1000000000000000"},
        {"array_count": "2", "array_params": "simulated_duration_s=nan,inf"},
    ],
)
def test_portal_job_form_refuses_numbers_outside_the_model_bounds(platform, fields):
    response = _portal(platform["alice"]).post("/jobs/new/", _job_form(**fields))
    assert response.status_code == 400, response.status_code
    assert 'aria-invalid="true"' in response.content.decode()
    assert not Job.objects.exists()


def test_portal_quota_and_team_forms_refuse_giant_numbers(platform, teams, gpu_models):
    admin = _portal(platform["admin"])
    response = admin.post(
        "/teams/manage/quota/",
        {"team": "vision", "gpu_model": "h100-80gb", "guaranteed_gpus": str(2**63)},
    )
    assert response.status_code == 400 and not Quota.objects.exists()
    for weight in ("1e308", "Infinity", "NaN"):
        response = admin.post("/teams/manage/teams/vision/weight/", {"fair_share_weight": weight})
        assert response.status_code == 400, weight
    teams["vision"].refresh_from_db()
    assert teams["vision"].fair_share_weight == 2.0


@pytest.mark.parametrize(
    "ids", ["99999999999999999999999999", "1,99999999999999999999", "²,³", "-1", "1" * 5000]
)
def test_job_states_ignores_ids_out_of_range(platform, submit, ids):
    job_id = submit(platform["alice"]).json()["id"]
    response = _portal(platform["alice"]).get(f"/jobs/states/?ids={ids},{job_id}")
    assert response.status_code == 200
    assert list(response.json()["jobs"]) == [str(job_id)]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/jobs/{huge}/",
        "/api/v1/jobs/{huge}/events/",
        "/api/v1/job-arrays/{huge}/",
        "/api/v1/billing/statements/{huge}/",
        "/api/v1/quota-requests/{huge}/",
        "/api/v1/tokens/{huge}/",
        "/api/v1/audit/{huge}/",
        "/jobs/{huge}/",
        "/jobs/{huge}/status/",
        "/arrays/{huge}/",
        "/billing/statements/{huge}/",
    ],
)
def test_ids_beyond_64_bits_are_not_found(platform, path):
    response = _portal(platform["admin"]).get(path.format(huge="9" * 30))
    assert response.status_code == 404, (path, response.status_code)


# --- one mechanism: every numeric field of every serializer and form is bounded ----------------

NUMERIC_API_FIELDS = (serializers.IntegerField, serializers.FloatField, serializers.DecimalField)
NUMERIC_FORM_FIELDS = (forms.IntegerField, forms.FloatField, forms.DecimalField)
# Packages of ours that are no Django app but may hold serializers or forms.
NOT_APPS = ("core", "gpuplatform")


@functools.cache
def our_packages() -> tuple[str, ...]:
    """Every Django app of the project (an installed app whose code lives in it) and ``NOT_APPS``,
    each with all its modules imported (migrations and ``__main__`` aside), so that every
    serializer and form is defined when the walks below look for them. A list of names and
    modules fell behind: policyversions' serializers were never imported and telemetry's were
    imported but not counted as ours."""
    base = Path(settings.BASE_DIR).resolve()
    # The virtualenv may live in the checkout too (make test puts .venv there): its packages
    # are not ours (importing rest_framework.authtoken.admin registers an abstract model).
    environment = Path(sys.prefix).resolve()

    def here(app_path: str) -> bool:
        path = Path(app_path).resolve()
        return path.is_relative_to(base) and not path.is_relative_to(environment)

    apps_here = [a.name for a in apps.get_app_configs() if here(a.path)]
    packages = (*apps_here, *NOT_APPS)
    for name in packages:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if ".migrations" not in module.name and not module.name.endswith(".__main__"):
                importlib.import_module(module.name)
    return packages


def _ours(cls) -> bool:
    return cls.__module__.split(".")[0] in our_packages()


def _all_subclasses(base):
    seen, stack = set(), [base]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    return seen


def _serializer_fields(serializer, prefix=""):
    for name, field in serializer.fields.items():
        path = f"{prefix}{name}"
        if field.read_only:
            continue  # nothing under it is read from a request (an answer's nested object)
        if isinstance(field, serializers.ListSerializer):
            field = field.child
        if isinstance(field, serializers.BaseSerializer):
            yield from _serializer_fields(field, path + ".")
        elif isinstance(field, serializers.ListField | serializers.DictField):
            yield path + "[]", field.child
        else:
            yield path, field


def _describes_an_answer(cls) -> bool:
    """A serializer that only declares an answer in the OpenAPI document reads no input, so its
    numbers need no bounds; ``test_no_answer_serializer_reads_a_request_body`` keeps the mark true."""
    return bool(getattr(cls, "describes_an_answer", False))


def _refs(node):
    """The component names ``node`` refers to (``$ref``), at any depth."""
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"].rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _answers_read_by_request_bodies(generator) -> set[str]:
    """The answer serializers (``_describes_an_answer``) that a request body of the document
    ``generator`` builds refers to, directly or nested, each as ``class as component``: each
    component is mapped to its serializer as drf-spectacular resolved it, so no name hides one."""
    document = generator.get_schema(request=None, public=True)
    components = document["components"]["schemas"]
    read: set[str] = set()
    stack = [
        name
        for path in document["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict)
        for name in _refs(operation.get("requestBody", {}))
    ]
    while stack:
        name = stack.pop()
        if name not in read:
            read.add(name)
            stack.extend(_refs(components.get(name, {})))
    serializer_of = _component_serializers(generator)
    assert read & set(serializer_of), "no request body refers to a serializer's component"
    return {
        f"{serializer_of[name].__qualname__} as {name}"
        for name in read
        if name in serializer_of and _describes_an_answer(serializer_of[name])
    }


def _component_serializers(generator) -> dict[str, type]:
    """Component name -> the serializer class drf-spectacular made it from, read from the
    generator's component registry after it built the document. Matching class names to
    component names missed every request body: COMPONENT_SPLIT_REQUEST names those ``...Request``
    (and ``Patched...`` for PATCH), and ``extend_schema_serializer(component_name=...)`` or
    ``Meta.ref_name`` name a component anything; the registry holds what it resolved.
    (``_components`` is private: drf-spectacular has no public way to list them.)"""
    from drf_spectacular.plumbing import ResolvedComponent

    out: dict[str, type] = {}
    for component in generator.registry._components.values():
        if component.type != ResolvedComponent.SCHEMA:
            continue
        made_from = component.object
        cls = made_from if isinstance(made_from, type) else type(made_from)
        if issubclass(cls, serializers.BaseSerializer):
            out[component.name] = cls
    return out


def test_no_answer_serializer_reads_a_request_body():
    from drf_spectacular.generators import SchemaGenerator

    assert any(
        _ours(cls)
        for cls in _all_subclasses(serializers.BaseSerializer)
        if _describes_an_answer(cls)
    ), "no serializer is marked as an answer's"
    read = _answers_read_by_request_bodies(SchemaGenerator())
    assert not read, f"marked as answers but read from request bodies: {read}"


def test_an_answer_serializer_under_another_component_name_is_caught():
    """The check above cannot be escaped by naming: an answer serializer given a component name
    of its own (``extend_schema_serializer(component_name=...)``), nested in a request body
    whose component has the ``Request`` suffix (COMPONENT_SPLIT_REQUEST), is found, on a
    throwaway view's document."""
    from django.urls import path
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.utils import extend_schema, extend_schema_serializer
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from core.apianswers import AnswerSerializer

    @extend_schema_serializer(component_name="Innocent")
    class ThrowawayAnswerSerializer(AnswerSerializer):
        count = serializers.IntegerField()

    class ThrowawayBodySerializer(serializers.Serializer):
        inner = ThrowawayAnswerSerializer()

    class ThrowawayView(APIView):
        @extend_schema(request=ThrowawayBodySerializer, responses={204: None})
        def post(self, request):
            return Response(status=204)

    generator = SchemaGenerator(patterns=[path("throwaway/", ThrowawayView.as_view())])
    read = _answers_read_by_request_bodies(generator)
    assert read == {f"{ThrowawayAnswerSerializer.__qualname__} as InnocentRequest"}, read


def test_every_numeric_api_field_has_finite_bounds():
    our_packages()  # imports every module first: a class not yet imported has no subclass entry
    checked, unbounded = 0, []
    covered: set[str] = set()
    for cls in _all_subclasses(serializers.BaseSerializer):
        if not _ours(cls) or inspect.isabstract(cls) or _describes_an_answer(cls):
            continue
        for path, field in _serializer_fields(cls()):
            if not isinstance(field, NUMERIC_API_FIELDS) or field.read_only:
                continue
            checked += 1
            covered.add(cls.__module__.split(".")[0])
            if field.min_value is None or field.max_value is None:
                unbounded.append(f"{cls.__module__}.{cls.__name__}.{path}")
    assert not unbounded, "numeric API fields without finite bounds:\n" + "\n".join(unbounded)
    assert checked >= 15, checked
    # The apps whose request bodies take numbers, each walked.
    assert {"scheduler", "tenants", "billing", "policyversions", "telemetry"} <= covered, covered


def test_every_numeric_portal_form_field_has_finite_bounds():
    our_packages()  # imports every module first: a class not yet imported has no subclass entry
    checked, unbounded = 0, []
    covered: set[str] = set()
    for cls in _all_subclasses(forms.BaseForm):
        if not _ours(cls):
            continue
        for name, field in cls.base_fields.items():
            if not isinstance(field, NUMERIC_FORM_FIELDS):
                continue
            checked += 1
            covered.add(cls.__module__.split(".")[0])
            if field.min_value is None or field.max_value is None:
                unbounded.append(f"{cls.__module__}.{cls.__name__}.{name}")
    assert not unbounded, "numeric form fields without finite bounds:\n" + "\n".join(unbounded)
    assert checked >= 12, checked
    assert {"frontend", "tenants", "billing", "policyversions"} <= covered, covered


def test_every_id_in_a_url_is_bounded():
    """Routes take ids through ``<id:...>`` or the API router's bounded lookup, never a bare
    ``<int:...>`` (which accepts any number of digits)."""
    from .routes import iter_routes

    unbounded = [
        f"{route.regex} <{name}>"
        for route in iter_routes()
        for name, sub in route.groups.items()
        if (name in ("pk", "id") and sub in ("[0-9]+", "\\d+", "[^/.]+")) or sub == "[0-9]+"
    ]
    assert not unbounded, "use <id:…> for ids:\n" + "\n".join(unbounded)


def test_the_policy_forms_fields_per_team_and_class_have_finite_bounds(teams, priorities):
    """The policy edit and what-if forms add a weight per team and a value per priority class
    when they are built, so the walk of declared fields above never saw them: a class's value
    took any whole number the browser sent (thirty digits reached the service)."""
    from policyversions.forms import PolicyTablesMixin
    from policyversions.services import current_tables

    class Tables(PolicyTablesMixin, forms.Form):
        pass

    form = Tables()
    form.add_table_fields(*current_tables())
    numeric = {n: f for n, f in form.fields.items() if isinstance(f, NUMERIC_FORM_FIELDS)}
    assert len(numeric) == len(teams) + len(priorities), sorted(form.fields)
    unbounded = [n for n, f in numeric.items() if f.min_value is None or f.max_value is None]
    assert not unbounded, f"policy table fields without finite bounds: {unbounded}"


def test_what_if_and_policy_numbers_are_refused_with_their_bounds(platform, api_as):
    """The bounds above as a user meets them: a what-if window or a candidate version out of
    range is a 400 naming the field with the limit (the API, the portal and the service say it
    alike), and a class value of thirty digits is refused by the policy form; nothing is
    written."""
    from policyversions import services
    from policyversions.models import VERSION_NUMBER_RANGE, PolicyVersion, WhatIfRun
    from policyversions.whatif import WINDOW_DAYS_RANGE

    api = api_as(platform["admin"])
    for body, field, message in (
        ({"window_days": 91}, "window_days", WINDOW_DAYS_RANGE),
        ({"window_days": 1e300}, "window_days", WINDOW_DAYS_RANGE),
        ({"window_days": 0}, "window_days", WINDOW_DAYS_RANGE),  # the service's, same words
        (
            {"candidate_versions": {"old": 2**31 + 1}},
            "candidate_versions.old",
            VERSION_NUMBER_RANGE,
        ),
        ({"candidate_versions": {"old": 0}}, "candidate_versions.old", VERSION_NUMBER_RANGE),
    ):
        response = api.post("/api/v1/policy/whatif", {"cluster": "test", **body}, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()[field] == [message], (body, response.json())
    portal = _portal(platform["admin"])
    page = portal.post(
        "/policy/whatif/", {"cluster": "test", "window_days": "1e300", "candidate_name": "c"}
    )
    assert page.status_code == 400 and WINDOW_DAYS_RANGE in page.content.decode()
    assert not WhatIfRun.objects.exists()
    services.policy_version_seed()
    versions = PolicyVersion.objects.count()
    page = portal.post("/policy/", {"class__research__value": "9" * 30, "reason": "bigger"})
    assert page.status_code == 400
    assert "less than or equal to 1000000000" in page.content.decode()
    assert PolicyVersion.objects.count() == versions
