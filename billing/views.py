"""Portal pages of billing: team cost dashboards, the admin overview, statements (HTML and CSV),
closing a statement, and plotly.js served locally. Views call selectors and services only; a
team or statement the caller may not see is a 404."""

from __future__ import annotations

import csv
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from core.errors import DomainError, NotFound
from tenants.forms import errors_text
from tenants.permissions import can_manage_team, is_platform_admin, visible_teams

from . import calc, charts, dashboards, selectors, services, statements
from .forms import BudgetForm, PriceForm
from .models import Statement, StatementMode
from .series import CostDashboard


def _month(request: HttpRequest) -> date:
    """The page's ``?month=YYYY-MM`` (this month when absent); a bad one is a 400."""
    raw = request.GET.get("month", "")
    if not raw:
        return calc.month_start(timezone.now())
    try:
        return calc.parse_month(raw)
    except ValueError as exc:
        raise BadRequest(f"month: {exc}") from None


def plotly_src() -> str:
    """The portal's versioned plotly.js route when the portal provides one, else billing's own."""
    try:
        return reverse("plotly-js", kwargs={"version": charts.plotly_version()})
    except NoReverseMatch:
        return reverse("billing:plotly-js")


def _figures(dashboard: CostDashboard) -> list[dict[str, Any]]:
    return [
        {"id": f"fig-{key}", "figure": charts.figure_dict(fig)}
        for key, fig in charts.all_figures(dashboard).items()
    ]


def _month_nav(month: date) -> dict[str, Any]:
    """The month shown and its neighbours (None past the first or last month served)."""
    prev = date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)
    after = calc.next_month(month)
    return {
        "month": month,
        "month_param": f"{month:%Y-%m}",
        "prev_month": f"{prev:%Y-%m}" if prev >= calc.MIN_MONTH else None,
        "next_month": f"{after:%Y-%m}" if after <= calc.MAX_MONTH else None,
    }


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Land on the caller's first team's dashboard (admins on the all-teams overview)."""
    if is_platform_admin(request.user):
        return redirect("billing:overview")
    team = dashboards.default_team(request.user)
    if team is None:
        return render(request, "billing/no_team.html", {"page": "billing"})
    return redirect("billing:team", slug=team.slug)


@login_required
def team_dashboard(request: HttpRequest, slug: str) -> HttpResponse:
    month = _month(request)
    try:
        dashboard = dashboards.team_cost_dashboard(
            user=request.user, team_slug=slug, month=month, now=timezone.now()
        )
    except NotFound:
        raise Http404("no such team") from None
    teams = visible_teams(request.user).order_by("slug")
    team = teams.get(slug=slug)
    context = {
        "page": "billing",
        "d": dashboard,
        "can_manage": can_manage_team(request.user, team),
        "figures": _figures(dashboard),
        "teams": teams,
        "plotly_src": plotly_src(),
        "is_admin": is_platform_admin(request.user),
        **_month_nav(month),
    }
    return render(request, "billing/team_dashboard.html", context)


@login_required
@require_POST
def budget_set(request: HttpRequest, slug: str) -> HttpResponse:
    """Set the team's budget for the month shown (team owners/admins, platform admins)."""
    team = visible_teams(request.user).filter(slug=slug).first()
    if team is None:
        raise Http404("no such team")
    form = BudgetForm(request.POST)
    if not form.is_valid():
        if "month" in form.errors:
            raise BadRequest(f"month: {' '.join(str(m) for m in form.errors['month'])}")
        problems = errors_text(form)
        messages.error(request, f"Budget not set: {problems}")
        return redirect(
            reverse("billing:team", kwargs={"slug": team.slug})
            + f"?month={form.cleaned_data['month']:%Y-%m}"
        )
    month = form.cleaned_data["month"]
    try:
        budget = services.budget_set(
            user=request.user,
            team=team,
            month=month,
            amount=form.cleaned_data["amount"],
            hard_stop=form.cleaned_data["hard_stop"],
        )
    except DomainError as exc:
        messages.error(request, f"Budget not set: {exc.message}")
    else:
        kind = "hard" if budget.hard_stop else "soft"
        messages.success(
            request, f"Budget of {team.slug} for {month:%Y-%m}: ${budget.amount:,} ({kind})."
        )
    return redirect(reverse("billing:team", kwargs={"slug": team.slug}) + f"?month={month:%Y-%m}")


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    month = _month(request)
    sort = request.GET.get("sort", "spend")
    descending = request.GET.get("dir", "desc") != "asc"
    try:
        data = dashboards.admin_cost_overview(
            user=request.user, month=month, now=timezone.now(), sort=sort, descending=descending
        )
    except NotFound:
        raise Http404("no such page") from None
    columns = [
        ("team", "Team"),
        ("own_spend", "Own spend"),
        ("spend", "Spend incl. sub-teams"),
        ("egress", "of which egress"),
        ("gpu_hours", "GPU-hours"),
        ("budget", "Budget"),
        ("used", "Used"),
        ("forecast", "Forecast"),
        ("idle", "Idle cost"),
        ("lost", "Lost work"),
    ]
    headers = []
    for key, label in columns:
        active = key == data.sort
        if active:
            next_dir = "asc" if data.descending else "desc"
        else:  # names read best A→Z, amounts largest first
            next_dir = "asc" if key == "team" else "desc"
        headers.append(
            {
                "key": key,
                "label": label,
                "active": active,
                "aria": ("descending" if data.descending else "ascending") if active else "none",
                "href": f"?month={month:%Y-%m}&sort={key}&dir={next_dir}",
            }
        )
    context = {
        "page": "billing",
        "o": data,
        "d": data.dashboard,
        "headers": headers,
        "figures": _figures(data.dashboard),
        "plotly_src": plotly_src(),
        "is_admin": True,
        **_month_nav(month),
    }
    return render(request, "billing/overview.html", context)


@login_required
def price_book(request: HttpRequest) -> HttpResponse:
    """The price book, platform-wide rates then each cluster's overrides (every signed-in user
    reads it: prices are not secret); platform admins add rates here (``services.price_set``).
    A refused rate is reported on the page and nothing is written."""
    is_admin = is_platform_admin(request.user)
    form = PriceForm()
    status = 200
    if request.method == "POST":
        if not is_admin:
            raise Http404("no such page")
        form = PriceForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                rate = services.price_set(
                    user=request.user,
                    gpu_model=data["gpu_model"],
                    capacity=data["capacity"],
                    cluster=data["cluster"],
                    rate_per_gpu_hour=data["rate_per_gpu_hour"],
                    effective_from=data["effective_from"],
                    note=data["note"],
                )
            except DomainError as exc:
                for name, problems in exc.as_dict().items():
                    for problem in problems:
                        form.add_error(name if name in form.fields else None, problem)
            else:
                messages.success(request, f"Added: {rate}.")
                return redirect("billing:prices")
        status = 400
    return render(
        request,
        "billing/prices.html",
        {
            "page": "billing",
            "rates": selectors.price_list(),
            "form": form if is_admin else None,
            "is_admin": is_admin,
        },
        status=status,
    )


@login_required
def statement_list(request: HttpRequest) -> HttpResponse:
    team = request.GET.get("team") or None
    try:
        statements = selectors.statement_list(user=request.user, team_slug=team)
    except NotFound:
        raise Http404("no such team") from None
    return render(
        request,
        "billing/statement_list.html",
        {"page": "billing", "statements": statements, "team": team},
    )


def _statement_or_404(request: HttpRequest, pk: int) -> Statement:
    try:
        return selectors.statement_get(user=request.user, statement_id=pk)
    except NotFound:
        raise Http404("no such statement") from None


@login_required
def statement_detail(request: HttpRequest, pk: int) -> HttpResponse:
    statement = _statement_or_404(request, pk)
    view = selectors.statement_view(statement=statement)
    return render(
        request,
        "billing/statement_detail.html",
        {
            "page": "billing",
            "v": view,
            "s": statement,
            "is_admin": is_platform_admin(request.user),
            "modes": StatementMode.choices,
        },
    )


@login_required
@require_GET
def statement_csv(request: HttpRequest, pk: int) -> HttpResponse:
    statement = _statement_or_404(request, pk)
    view = selectors.statement_view(statement=statement)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    filename = f"statement-{statement.team.slug}-{statement.month:%Y-%m}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    csv.writer(response).writerows(selectors.statement_csv_rows(view=view))
    return response


@login_required
@require_POST
def statement_close(request: HttpRequest, pk: int) -> HttpResponse:
    statement = _statement_or_404(request, pk)
    try:
        statements.statement_close(
            user=request.user, statement_id=statement.pk, mode=request.POST.get("mode") or None
        )
    except DomainError as exc:
        messages.error(request, f"Not closed: {exc.message}")
    else:
        messages.success(
            request, f"Statement {statement.team.slug} {statement.month:%Y-%m} closed."
        )
    return redirect("billing:statement", pk=statement.pk)


@lru_cache(maxsize=1)
def _plotly_path() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@require_GET
def plotly_js(request: HttpRequest) -> HttpResponseBase:
    """plotly.min.js streamed from the installed plotly package (no CDN), cached a day and
    revalidated by an ETag naming the package version."""
    from plotly.offline import get_plotlyjs_version

    etag = f'"plotly-{get_plotlyjs_version()}"'
    response: HttpResponseBase
    if request.headers.get("If-None-Match") == etag:
        response = HttpResponse(status=304)
    else:
        response = FileResponse(
            _plotly_path().open("rb"), content_type="application/javascript; charset=utf-8"
        )
    response["ETag"] = etag
    response["Cache-Control"] = "public, max-age=86400"
    return response
