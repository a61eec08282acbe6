"""Portal pages of billing: team cost dashboards, the admin overview, statements (HTML and CSV),
closing a statement, and plotly.js served locally. Views call selectors and services only; a
team or statement the caller may not see is a 404."""

from __future__ import annotations

import csv
import json
from datetime import date
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from scheduler.errors import DomainError, NotFound
from tenants.permissions import can_manage_team, is_platform_admin, visible_teams

from . import calc, charts, selectors, services


def _month(request) -> date:
    return _month_from(request.GET.get("month", ""))


def _month_from(raw: str) -> date:
    if not raw:
        return calc.month_start(timezone.now())
    try:
        return calc.parse_month(raw)
    except ValueError:
        raise Http404("bad month") from None


def plotly_src() -> str:
    """The portal's versioned plotly.js route when the portal provides one, else billing's own."""
    try:
        from frontend.views import plotly_version

        return reverse("plotly-js", kwargs={"version": plotly_version()})
    except (ImportError, NoReverseMatch):
        return reverse("billing:plotly-js")


def _figures(dashboard) -> list[dict]:
    return [
        {"id": f"fig-{key}", "figure": json.loads(fig.to_json())}
        for key, fig in charts.all_figures(dashboard).items()
    ]


def _month_nav(month: date) -> dict:
    prev = date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)
    return {
        "month": month,
        "month_param": f"{month:%Y-%m}",
        "prev_month": f"{prev:%Y-%m}",
        "next_month": f"{calc.next_month(month):%Y-%m}",
    }


@login_required
def home(request):
    """Land on the caller's first team's dashboard (admins on the all-teams overview)."""
    if is_platform_admin(request.user):
        return redirect("billing:overview")
    team = selectors.default_team(request.user)
    if team is None:
        return render(request, "billing/no_team.html", {"page": "billing"})
    return redirect("billing:team", slug=team.slug)


@login_required
def team_dashboard(request, slug: str):
    month = _month(request)
    try:
        dashboard = selectors.team_cost_dashboard(
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
def budget_set(request, slug: str):
    """Set the team's budget for the month shown (team owners/admins, platform admins)."""
    team = visible_teams(request.user).filter(slug=slug).first()
    if team is None:
        raise Http404("no such team")
    month = _month_from(request.POST.get("month", ""))
    try:
        amount = Decimal(request.POST.get("amount", "").replace(",", "").strip())
    except InvalidOperation:
        messages.error(request, "Budget not set: the amount must be a number of dollars.")
    else:
        try:
            budget = services.budget_set(
                user=request.user,
                team=team,
                month=month,
                amount=amount,
                hard_stop=request.POST.get("hard_stop") == "on",
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
def overview(request):
    month = _month(request)
    sort = request.GET.get("sort", "spend")
    descending = request.GET.get("dir", "desc") != "asc"
    try:
        data = selectors.admin_cost_overview(
            user=request.user, month=month, now=timezone.now(), sort=sort, descending=descending
        )
    except NotFound:
        raise Http404("no such page") from None
    columns = [
        ("team", "Team"),
        ("own_spend", "Own spend"),
        ("spend", "Spend incl. sub-teams"),
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
def statement_list(request):
    team = request.GET.get("team") or None
    statements = selectors.statement_list(user=request.user, team_slug=team)
    return render(
        request,
        "billing/statement_list.html",
        {"page": "billing", "statements": statements, "team": team},
    )


def _statement_or_404(request, pk: int):
    try:
        return selectors.statement_get(user=request.user, statement_id=pk)
    except NotFound:
        raise Http404("no such statement") from None


@login_required
def statement_detail(request, pk: int):
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
            "modes": services.StatementMode.choices,
        },
    )


@login_required
@require_GET
def statement_csv(request, pk: int):
    statement = _statement_or_404(request, pk)
    view = selectors.statement_view(statement=statement)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    filename = f"statement-{statement.team.slug}-{statement.month:%Y-%m}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    csv.writer(response).writerows(selectors.statement_csv_rows(view=view))
    return response


@login_required
@require_POST
def statement_close(request, pk: int):
    statement = _statement_or_404(request, pk)
    try:
        services.statement_close(
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
def plotly_js(request):
    """plotly.min.js streamed from the installed plotly package (no CDN), cached a day and
    revalidated by an ETag naming the package version."""
    from plotly.offline import get_plotlyjs_version

    etag = f'"plotly-{get_plotlyjs_version()}"'
    if request.headers.get("If-None-Match") == etag:
        response = HttpResponse(status=304)
    else:
        response = FileResponse(
            _plotly_path().open("rb"), content_type="application/javascript; charset=utf-8"
        )
    response["ETag"] = etag
    response["Cache-Control"] = "public, max-age=86400"
    return response
