"""The remaining findings of the security review (issue 26): user text in charts (9), the
scheduler snapshot for staff who are not platform admins (12), Django admin writes to jobs, CSV
formulas and null fields (13), array templates' secrets shown to viewers (14)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import date
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing import charts
from billing.models import Adjustment, Statement
from billing.series import BudgetSummary, CostDashboard, IdleSummary, JobCost
from scheduler.models import Allocation, Job
from tenants.models import Membership

pytestmark = pytest.mark.django_db

LINK = '<a href="https://evil.example/">click</a>'


# --- 9: user text in Plotly charts ---------------------------------------------------------


def _dashboard(**fields) -> CostDashboard:
    values = {
        "title": "vision",
        "month": date(2026, 12, 1),
        "now": timezone.now(),
        "days": [],
        "top_jobs": [],
        "lost": [],
        "idle": IdleSummary(False, 0.0, 0.0, Decimal(0)),
        "budget": BudgetSummary(None, False, Decimal(0), Decimal(0)),
        "team_slug": "vision",
    }
    return CostDashboard(**{**values, **fields})


def test_job_names_in_charts_are_text_not_markup():
    job = JobCost(
        job_id=7, name=LINK, team="vision", user="<b>eve</b>", gpu_hours=1.0, cost=Decimal(3)
    )
    figure = charts.figure_dict(charts.top_jobs(_dashboard(top_jobs=[job])))
    trace = figure["data"][0]
    assert trace["y"] == ['#7 &lt;a href="https://evil.example/"&gt;click&lt;/a&gt;']
    assert trace["customdata"][0][0] == "&lt;b&gt;eve&lt;/b&gt;"
    assert "<a" not in json.dumps(figure["data"])
    # The platform's own markup (hover template, titles) is kept.
    assert "<br>" in trace["hovertemplate"]


def test_the_cost_pages_embed_the_escaped_figures(platform, priorities, gpu_models):
    from billing.models import PriceRate, UsageJobMonth

    job = Job.objects.create(
        team=platform["alice"].memberships.first().team,
        submitter=platform["alice"],
        name=LINK,
        workers=1,
        gpus_per_worker=1,
        priority_class=priorities["research"],
        submitted_at=timezone.now(),
    )
    month = date.today().replace(day=1)
    UsageJobMonth.objects.create(job=job, month=month, team=job.team, gpu_seconds=3600, cost=5)
    PriceRate.objects.create(
        gpu_model=gpu_models["h100"],
        capacity="on_demand",
        rate_per_gpu_hour=2,
        effective_from=timezone.now(),
    )
    for user, path in (
        (platform["alice"], "/billing/teams/vision/"),
        (platform["admin"], "/billing/overview/"),
    ):
        client = Client()
        client.force_login(user)
        html = client.get(path).content.decode()
        scripts = re.findall(
            r'<script id="fig-top-jobs" type="application/json">(.*?)</script>', html, re.S
        )
        assert scripts, path
        embedded = json.loads(scripts[0])
        assert "&lt;a href=" in embedded["data"][0]["y"][0], path


# --- 12: the scheduler snapshot is for platform admins only -----------------------------------


def test_staff_who_are_not_platform_admins_cannot_read_the_snapshot(platform, api_as):
    from tenants.models import Team
    from tests.integration.roles import make_user

    staff = make_user("sam", Team.objects.get(slug="vision"), is_staff=True)
    assert api_as(staff).get("/api/v1/admin/last-cycle").status_code == 403
    assert api_as(staff).post("/api/v1/admin/nodes/1/drain/").status_code == 403
    assert api_as(platform["admin"]).get("/api/v1/admin/last-cycle").status_code == 200


# --- 13: Django admin, CSV formulas, nulls -----------------------------------------------------


def test_django_admin_shows_jobs_and_allocations_read_only(platform, submit):
    job_id = submit(platform["alice"]).json()["id"]
    admin = Client()
    admin.force_login(platform["admin"])
    page = admin.get(f"/admin/scheduler/job/{job_id}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    posted = admin.post(
        f"/admin/scheduler/job/{job_id}/change/", {"state": "succeeded", "name": "edited"}
    )
    assert posted.status_code == 403
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.name) == ("pending", "train")
    assert admin.get("/admin/scheduler/job/add/").status_code == 403
    assert admin.post(f"/admin/scheduler/job/{job_id}/delete/", {"post": "yes"}).status_code == 403
    assert admin.get("/admin/scheduler/allocation/add/").status_code == 403
    assert Job.objects.filter(pk=job_id).exists()


def test_statement_csv_cells_never_run_as_formulas(platform, teams):
    statement = Statement.objects.create(team=teams["vision"], month=date(2026, 11, 1))
    Adjustment.objects.create(
        statement=statement,
        amount=Decimal("-12.50"),
        reason='=HYPERLINK("https://evil.example","refund")',
        created_at=timezone.now(),
    )
    client = Client()
    client.force_login(platform["admin"])
    for path in (
        f"/billing/statements/{statement.pk}/csv",
        f"/api/v1/billing/statements/{statement.pk}/csv/",
    ):
        rows = list(csv.reader(io.StringIO(client.get(path).content.decode())))
        cells = [cell for row in rows for cell in row]
        assert not any(c.startswith(("=", "+", "@")) for c in cells), path
        adjustment = next(row for row in rows if row[4] == "adjustment")
        # By header, not from the end: columns are appended (cluster, issue 25).
        assert adjustment[rows[0].index("note")] == '\'=HYPERLINK("https://evil.example","refund")'
        assert adjustment[rows[0].index("cost_usd")] == "-12.50"  # numbers stay numbers


@pytest.mark.parametrize("field", ["dataset", "image", "command", "env", "gpu_model", "elastic"])
def test_null_means_not_given_for_every_optional_field(platform, submit, field):
    response = submit(platform["alice"], **{field: None})
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    assert (job.dataset, job.image, job.command, job.env) == ("", "", "", {})


# --- 14: array templates' environment values -------------------------------------------------


def test_viewers_do_not_see_an_array_templates_env_values(platform, api_as):
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1, "env": {"WANDB_API_KEY": "s3cr3t"}},
        "items": [{"env": {"LR": "0.1"}}, {"env": {"LR": "0.01"}}],
    }
    created = api_as(platform["alice"]).post("/api/v1/job-arrays/", body, format="json")
    assert created.status_code == 201
    assert created.json()["template"]["env"] == {"WANDB_API_KEY": "s3cr3t"}
    array_id = created.json()["id"]
    charlie = platform["charlie"]  # a viewer of vision
    assert Membership.objects.get(user=charlie).role == "viewer"
    for path in (f"/api/v1/job-arrays/{array_id}/", "/api/v1/job-arrays/"):
        shown = api_as(charlie).get(path).json()
        item = shown["results"][0] if "results" in shown else shown
        assert item["template"]["env"] == {"WANDB_API_KEY": "(hidden)"}, path
    viewer = Client()
    viewer.force_login(charlie)
    page = viewer.get(f"/arrays/{array_id}/").content.decode()
    assert "WANDB_API_KEY" in page and "s3cr3t" not in page and "0.01" not in page
    member = Client()
    member.force_login(platform["alice"])
    assert "s3cr3t" in member.get(f"/arrays/{array_id}/").content.decode()
    assert Allocation.objects.count() == 0
