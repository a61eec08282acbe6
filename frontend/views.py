"""Portal pages. Views call selectors and services only; they never write a model themselves.

Every page that shows jobs reads them through a selector scoped to the caller, so another team's
job is a 404 here exactly as in the API. Bad input re-renders the form with the service's errors
next to each field; it never raises a 500.
"""

from __future__ import annotations

import gzip
import logging
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseForbidden,
    HttpResponseNotAllowed,
    JsonResponse,
)
from django.http.request import QueryDict, RawPostDataException
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from billing.charts import plotly_version
from core.errors import DomainError, FieldErrors, Forbidden, NotFound
from core.ids import parse_id_list
from core.jsonlimits import JsonRefused, loads_bounded
from scheduler import arrays, services, transitions
from scheduler import selectors as scheduler_selectors
from scheduler.env_visibility import may_see_env_values, shown_command
from scheduler.feasibility import job_feasibility
from scheduler.models import Job, JobArray
from scheduler.states import LIVE_STATES, JobState
from tenants.permissions import can_submit_to, is_platform_admin, signed_in

from . import charts
from . import selectors as page_selectors
from .advice import job_advice_context, submit_advice_context
from .cluster_history import cluster_usage_history
from .forms import JobSubmitForm
from .records import record_context
from .routing_admin import cluster_facts
from .where import where_context

csp_log = logging.getLogger("gpuplatform.csp")

JOB_LIST_LIMIT = 200
ARRAY_MEMBERS_PER_PAGE = 50


class LoginView(auth_views.LoginView):
    """Django's login form behind the limits on failed password attempts the API's token
    exchange has (``tenants.throttles``: per client address and username, and per address; one
    budget for both doors). A refused attempt is a 429 with Retry-After and never reaches the
    password check, so a right guess after too many wrong ones does not get in either."""

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        from tenants.throttles import password_attempt_failed

        password_attempt_failed(self.request)
        return super().form_invalid(form)

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        from tenants.throttles import password_attempt_refused

        wait = password_attempt_refused(request)
        if wait is None:
            return super().post(request, *args, **kwargs)
        seconds = max(1, math.ceil(wait))
        messages.error(request, f"Too many sign-in attempts. Try again in {seconds} seconds.")
        response = self.render_to_response(self.get_context_data(form=self.form_class(request)))
        response.status_code = 429
        response["Retry-After"] = str(seconds)
        return response


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """My teams' running and pending jobs and my teams' quota use."""
    team_ids = page_selectors.home_teams(user=request.user)
    jobs = list(
        scheduler_selectors.job_list(
            user=request.user, filters={"state": f"{JobState.RUNNING},{JobState.PENDING}"}
        ).filter(team_id__in=team_ids)[:50]
    )
    quota_rows = page_selectors.quota_use(user=request.user)
    figure = None
    if quota_rows:
        figure = charts.quota_figure(
            labels=[f"{row.team} · {row.gpu_model}" for row in quota_rows],
            in_use=[row.in_use for row in quota_rows],
            pending=[row.pending for row in quota_rows],
            guaranteed=[row.guaranteed for row in quota_rows],
            ceiling=[row.ceiling for row in quota_rows],
        )
    return render(
        request,
        "frontend/home.html",
        {
            "jobs": jobs,
            "quota_rows": quota_rows,
            "quota_figure": figure,
            "page": "home",
            # With no team to summarise, the quota card says why (and to an admin, where teams
            # are made) rather than that teams have no quotas.
            "has_teams": bool(team_ids),
            "is_admin": is_platform_admin(request.user),
        },
    )


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """The caller's teams' jobs, filtered by state, team and submitter; states update live."""
    filters = {
        key: request.GET.get(key, "").strip()
        for key in ("state", "team", "submitter")
        if request.GET.get(key, "").strip()
    }
    if filters.get("state") and filters["state"] not in JobState.values:
        filters.pop("state")
    try:
        jobs = list(
            scheduler_selectors.job_list(user=request.user, filters=filters)[:JOB_LIST_LIMIT]
        )
    except NotFound:
        raise Http404("no such team") from None
    page_selectors.attach_array_headers(user=request.user, jobs=jobs)
    return render(
        request,
        "frontend/job_list.html",
        {
            "jobs": jobs,
            "filters": filters,
            "states": JobState.choices,
            "teams": page_selectors.filter_teams(user=request.user),
            "limit": JOB_LIST_LIMIT,
            "page": "jobs",
        },
    )


def _submit_form(request: HttpRequest, data: QueryDict | None = None) -> JobSubmitForm:
    return JobSubmitForm(
        data,
        teams=page_selectors.submit_teams(user=request.user),
        gpu_models=page_selectors.gpu_models(),
        priority_classes=page_selectors.priority_classes(),
        clusters=page_selectors.clusters(),
    )


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    """The submission form, for one job or an array (sweep). Validation errors come from
    ``job_submit`` / ``array_submit`` and show inline; an array is created whole or not at all."""
    if request.method not in ("GET", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    if request.method == "GET":
        form = _submit_form(request)
        return render(
            request,
            "frontend/job_new.html",
            {"form": form, "page": "new", **submit_advice_context(signed_in(request))},
        )
    form = _submit_form(request, request.POST)
    if form.is_valid() and "estimate" in request.POST and form.is_array():
        # The button promises that nothing is written: an array is not estimated, and must not
        # fall through to the submission below.
        form.add_domain_error(
            FieldErrors(
                {
                    "array_count": [
                        "Estimate finish is for one job: clear the array fields to estimate "
                        "one, or submit the array"
                    ]
                }
            )
        )
    elif form.is_valid() and "estimate" in request.POST:
        # "Estimate finish": the same checks as a submission, nothing written.
        try:
            feasibility = job_feasibility(
                user=signed_in(request), request=form.to_request(), now=timezone.now()
            )
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            return render(
                request,
                "frontend/job_new.html",
                {
                    "form": form,
                    "page": "new",
                    "feasibility": feasibility,
                    **submit_advice_context(signed_in(request)),
                },
            )
    elif form.is_valid() and form.is_array():
        try:
            array = arrays.array_submit(user=signed_in(request), request=form.to_array_request())
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            messages.success(request, f"Job array “{array.name}” submitted: {array.size} jobs.")
            return redirect("array-detail", array_id=array.pk)
    elif form.is_valid():
        try:
            job = services.job_submit(user=signed_in(request), request=form.to_request())
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            messages.success(request, f"Job “{job.name}” submitted.")
            return redirect("job-detail", job_id=job.pk)
    return render(
        request,
        "frontend/job_new.html",
        {"form": form, "page": "new", **submit_advice_context(signed_in(request))},
        status=400,
    )


def _job_or_404(request: HttpRequest, job_id: int) -> Job:
    try:
        return scheduler_selectors.job_get(user=request.user, job_id=job_id)
    except NotFound:
        raise Http404("no such job") from None


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    """Timeline, placement map, why pending and estimated start, attempts, live output, cancel."""
    job = _job_or_404(request, job_id)
    events = list(scheduler_selectors.job_events(user=request.user, job_id=job.pk))
    return render(
        request,
        "frontend/job_detail.html",
        {
            "job": job,
            "events": events,
            "placement": page_selectors.job_placement_nodes(job=job),
            "attempts": scheduler_selectors.job_attempts(user=request.user, job_id=job.pk),
            "log_tail": page_selectors.job_log_tail(user=request.user, job=job),
            "can_cancel": job.state in LIVE_STATES and can_submit_to(request.user, job.team),
            "command_shown": shown_command(
                job.command, visible=may_see_env_values(request.user, job.team)
            ),
            # missed as soon as it passes unfinished, as the outcomes page counts it
            "deadline_passed": job.deadline is not None
            and job.finished_at is None
            and job.deadline <= timezone.now(),
            "page": "job",
            **record_context(request, job),
            **job_advice_context(job),
            **where_context(job, events),
        },
    )


@login_required
@require_GET
def job_states(request: HttpRequest) -> HttpResponse:
    """States of the listed jobs the caller may see (``?ids=1,2,3``, at most JOB_LIST_LIMIT), for
    job tables to resync when their stream (re)connects. Unknown or hidden ids are left out."""
    ids = parse_id_list(request.GET.get("ids", ""), limit=JOB_LIST_LIMIT)
    jobs = scheduler_selectors.job_list(user=request.user).filter(pk__in=ids)
    return JsonResponse(
        {
            "jobs": {
                str(job.pk): {
                    "state": job.state,
                    "why": job.why_pending,
                    "estimated_start": (
                        job.estimated_start.isoformat() if job.estimated_start else None
                    ),
                }
                for job in jobs
            }
        }
    )


@login_required
@require_GET
def job_status(request: HttpRequest, job_id: int) -> HttpResponse:
    """The job's current status as JSON, shaped like a ``job.status`` payload: the job page
    re-reads it when its stream (re)connects. (Its output comes over ``/ws/jobs/<id>/log/``.)"""
    job = _job_or_404(request, job_id)
    return JsonResponse(
        {
            "type": "job.status",
            "job": job.pk,
            "team": job.team.slug,
            "name": job.name,
            "state": job.state,
            "why": job.why_pending,
            "estimated_start": job.estimated_start.isoformat() if job.estimated_start else None,
            "placement": scheduler_selectors.job_placement(job),
            "time": timezone.now().isoformat(),
            "attempts": job.attempts,
        }
    )


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    """Cancel through ``job_cancel``; refusals come back as a message on the job page."""
    try:
        job = transitions.job_cancel(user=signed_in(request), job_id=job_id)
    except NotFound:
        raise Http404("no such job") from None
    except DomainError as exc:
        messages.error(request, f"Not cancelled: {exc.message}")
    else:
        messages.success(request, f"Job “{job.name}” cancelled.")
    return redirect("job-detail", job_id=job_id)


def _array_or_404(request: HttpRequest, array_id: int) -> JobArray:
    try:
        return arrays.array_get(user=request.user, array_id=array_id)
    except NotFound:
        raise Http404("no such job array") from None


@login_required
@require_GET
def array_detail(request: HttpRequest, array_id: int) -> HttpResponse:
    """One job array: its template, members' count per state, members (paginated, by index)
    and, for those whose role allows it, "Cancel all". A fixed number of queries per page."""
    array = _array_or_404(request, array_id)
    members = (
        scheduler_selectors.job_list(user=request.user)
        .filter(array_id=array.pk)
        .order_by("array_index")
    )
    paginator = Paginator(members, ARRAY_MEMBERS_PER_PAGE)
    # The array's size is known: no COUNT query for the paginator.
    paginator.count = array.size
    members_page = paginator.get_page(request.GET.get("page"))
    counts = arrays.array_counts(array)
    live = sum(counts[state] for state in LIVE_STATES)
    may_see_env = may_see_env_values(request.user, array.team)
    for job in members_page:
        # A page-only attribute the model does not declare: array_detail.html reads it.
        job.env_shown = arrays.shown_env(job.env, visible=may_see_env)  # type: ignore[attr-defined]
    return render(
        request,
        "frontend/array_detail.html",
        {
            "array": array,
            "template": arrays.shown_template(array, may_see=None if may_see_env else set()),
            "counts": [(value, label, counts[value]) for value, label in JobState.choices],
            "live": live,
            "members": members_page,
            "can_cancel": live > 0 and can_submit_to(request.user, array.team),
            "page": "jobs",
        },
    )


@login_required
@require_GET
def array_state(request: HttpRequest, array_id: int) -> HttpResponse:
    """The array's count per state as JSON, for pages to refresh an array's header when an
    ``array.status`` message arrives (the message carries what changed, not the totals)."""
    array = _array_or_404(request, array_id)
    return JsonResponse(
        {
            "array": array.pk,
            "name": array.name,
            "size": array.size,
            "counts": arrays.array_counts(array),
            "cancelled_at": array.cancelled_at.isoformat() if array.cancelled_at else None,
        }
    )


@login_required
@require_POST
def array_cancel(request: HttpRequest, array_id: int) -> HttpResponse:
    """Cancel every live member through ``array_cancel``. Another team's array is a 404 and a
    viewer's POST a 403 (nothing cancelled); other refusals come back as a message."""
    try:
        array = arrays.array_cancel(user=signed_in(request), array_id=array_id)
    except NotFound:
        raise Http404("no such job array") from None
    except Forbidden as exc:
        return HttpResponseForbidden(exc.message)
    except DomainError as exc:
        messages.error(request, f"Not cancelled: {exc.message}")
    else:
        messages.success(request, f"Job array “{array.name}”: every live job cancelled.")
    return redirect("array-detail", array_id=array_id)


@login_required
def cluster(request: HttpRequest) -> HttpResponse:
    """Racks -> nodes -> GPUs, anonymised for the caller; the utilization history (live from
    now on); admin actions and event feed."""
    grid = page_selectors.cluster_grid(user=request.user)
    totals = page_selectors.cluster_totals(grid)
    is_admin = is_platform_admin(request.user)
    facts = cluster_facts(with_teams=is_admin)
    for cell in grid:
        cell.facts = facts.get(cell.name)
    now = timezone.now()
    past = cluster_usage_history(now=now)
    figure = charts.usage_timeline_figure(
        times=[*past.times, now.isoformat()],
        in_use=[*past.in_use, totals["in_use"]],
        unavailable=[*past.unavailable, totals["unavailable"]],
        total=totals["total"],
    )
    return render(
        request,
        "frontend/cluster.html",
        {
            "grid": grid,
            "totals": totals,
            "usage_figure": figure,
            "is_admin": is_admin,
            # Retired clusters have no node in the grid: listed apart, for admins to reinstate.
            "retired_clusters": (
                page_selectors.retired_clusters_off_grid(user=request.user, grid=grid)
                if is_admin
                else []
            ),
            "node_events": page_selectors.node_events(user=request.user),
            "page": "cluster",
        },
    )


@login_required
@require_GET
def cluster_state(request: HttpRequest) -> HttpResponse:
    """The cluster grid as JSON (same anonymisation as the page), for the page to resync after a
    reconnect or when the stream has been quiet."""
    grid = page_selectors.cluster_grid(user=request.user)
    nodes = []
    for c in grid:
        for rack in c.racks:
            for cell in rack.nodes:
                node = cell.node
                nodes.append(
                    {
                        "node": node.name,
                        "state": node.state,
                        "reason": node.state_reason,
                        "resume_state": node.resume_state,
                        "resume_reason": node.resume_reason,
                        "cluster_hold": cell.hold,
                        "health": node.health,
                        "gpus": [
                            {
                                "index": g.index,
                                "status": g.status,
                                "job": g.job_id,
                                "name": g.job_name,
                            }
                            for g in cell.gpus
                        ],
                    }
                )
    return JsonResponse(
        {
            "time": timezone.now().isoformat(),
            "totals": page_selectors.cluster_totals(grid),
            "nodes": nodes,
        }
    )


@login_required
@require_POST
def node_action(request: HttpRequest, node_id: int, action: str) -> HttpResponse:
    """Drain, quarantine or release a node (platform admins; the service checks)."""
    reason = request.POST.get("reason", "").strip()
    try:
        if action == "quarantine":
            node = services.node_quarantine(user=signed_in(request), node_id=node_id, reason=reason)
        elif action == "drain":
            node = services.node_drain(user=signed_in(request), node_id=node_id, reason=reason)
        elif action == "release":
            node = services.node_release(user=signed_in(request), node_id=node_id)
        else:
            raise Http404("no such action")
    except NotFound:
        raise Http404("no such node") from None
    except Forbidden as exc:
        return HttpResponseForbidden(exc.message)
    except DomainError as exc:
        messages.error(request, f"{action.capitalize()} refused: {exc.message}")
    else:
        messages.success(request, f"Node {node.name}: {action} done.")
    return redirect(reverse("cluster") + f"#node-{node_id}")


CSP_REPORT_MAX_BYTES = 16 * 1024


@csrf_exempt
@require_POST
def csp_report(request: HttpRequest) -> HttpResponse:
    """Where browsers report Content-Security-Policy violations (``report-uri``): each is logged
    as a warning naming the page, the directive and what was blocked, so a policy that breaks a
    page (or an injection attempt) shows in the logs. Anonymous, bounded, answers 204."""
    try:
        raw = request.body[: CSP_REPORT_MAX_BYTES + 1]
        body = loads_bounded(raw, max_bytes=CSP_REPORT_MAX_BYTES)
    except (JsonRefused, RawPostDataException):  # not a report (a form post, say)
        return HttpResponse(status=400)
    report = body.get("csp-report") if isinstance(body, dict) else None
    if isinstance(report, dict):
        csp_log.warning(
            "CSP violation on %s: %s blocked %s",
            str(report.get("document-uri", "?"))[:300],
            str(report.get("violated-directive") or report.get("effective-directive", "?"))[:100],
            str(report.get("blocked-uri", "?"))[:300],
        )
    return HttpResponse(status=204)


@lru_cache(maxsize=1)
def _plotly_bundle() -> tuple[bytes, bytes]:
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    raw = path.read_bytes()
    return raw, gzip.compress(raw, compresslevel=6, mtime=0)


# plotly.js writes a few stylesheets with content as it loads, each guarded by "unless an element
# with this id exists" (e.g. maplibre's, for map traces the portal never draws). Inline styles
# with content would break the Content-Security-Policy; charts.js puts an empty placeholder
# with each id in the page first. The ids change with plotly's version, so they are read from the
# bundle served, not written down.
_SELF_STYLE = re.compile(
    rb'getElementById\("([0-9a-f]{16,128})"\)\)\{var \w+=document\.createElement\("style"\)'
)


@lru_cache(maxsize=1)
def plotly_self_styles() -> tuple[str, ...]:
    raw, _packed = _plotly_bundle()
    return tuple(sorted({m.decode() for m in _SELF_STYLE.findall(raw)}))


@require_GET
def plotly_js(request: HttpRequest, version: str) -> HttpResponse:
    """plotly.js from the installed ``plotly`` package, versioned in the URL and cached for a
    year (a new plotly gives a new URL). Served gzipped to clients that accept it."""
    if version != plotly_version():
        raise Http404("unknown plotly.js version")
    raw, packed = _plotly_bundle()
    accepts_gzip = "gzip" in request.headers.get("Accept-Encoding", "")
    response = HttpResponse(
        packed if accepts_gzip else raw, content_type="application/javascript; charset=utf-8"
    )
    if accepts_gzip:
        response["Content-Encoding"] = "gzip"
    response["Vary"] = "Accept-Encoding"
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response
