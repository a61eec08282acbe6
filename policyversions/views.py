"""Portal pages of the policy history (platform admins; a 404 for everyone else): the version in
force with its edit form, the history, one version, a diff between two, rollback."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render

from core.errors import Conflict, FieldErrors, NotFound
from scheduler.models import Cluster
from tenants.permissions import is_platform_admin

from . import charts, selectors, services, whatif_runs
from .forms import PolicyForm, WhatIfForm
from .models import WhatIfRun


def _admin_only(request: HttpRequest) -> None:
    if not is_platform_admin(request.user):
        raise Http404("no such page")


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The version in force, what changed outside it, the edit form (POST applies a new
    version) and the history."""
    _admin_only(request)
    services.policy_version_seed()
    current = selectors.policy_in_force(user=request.user)
    weights, classes = services.current_tables()
    status = 200
    if request.method == "POST":
        form = PolicyForm(request.POST, version=current, weights=weights, classes=classes)
        if form.is_valid():
            try:
                version = services.policy_apply(user=request.user, **form.service_arguments())
            except (FieldErrors, Conflict) as exc:
                form.add_service_errors(exc.as_dict())
            else:
                messages.success(request, f"Policy v{version.number} is in force.")
                return redirect("policy:version", number=version.number)
        status = 400
    else:
        form = PolicyForm(version=current, weights=weights, classes=classes)
    versions = list(selectors.policy_version_list(user=request.user)[:50])
    return render(
        request,
        "policyversions/index.html",
        {
            "current": current,
            "engine": selectors.effective_engine_config(current.engine_config if current else {}),
            "drift": selectors.policy_drift(user=request.user, version=current),
            "form": form,
            "versions": versions,
            "page": "policy",
        },
        status=status,
    )


@login_required
def version(request: HttpRequest, number: int) -> HttpResponse:
    """One version: who, when, why, its content and what it changed from the one before."""
    _admin_only(request)
    try:
        shown = selectors.policy_version_get(user=request.user, number=number)
    except NotFound:
        raise Http404("no such policy version") from None
    changes: list[selectors.DiffRow] = []
    if shown.number > 1:
        changes = selectors.policy_diff(user=request.user, a=shown.number - 1, b=shown.number)
    newest = selectors.policy_in_force(user=request.user)
    return render(
        request,
        "policyversions/version.html",
        {
            "version": shown,
            "changes": changes,
            "in_force": newest is not None and newest.number == shown.number,
            "engine": selectors.effective_engine_config(shown.engine_config),
            "page": "policy",
        },
    )


@login_required
def diff(request: HttpRequest) -> HttpResponse:
    """``?a=N&b=M``: what changed from version N to version M."""
    _admin_only(request)
    errors: list[str] = []
    numbers: dict[str, int] = {}
    for key in ("a", "b"):
        number = selectors.version_number(request.GET.get(key, ""))
        if number is None:
            errors.append(f"{key}: must be a version number")
        else:
            numbers[key] = number
    rows: list[selectors.DiffRow] | None = None
    if not errors:
        try:
            rows = selectors.policy_diff(user=request.user, a=numbers["a"], b=numbers["b"])
        except NotFound:
            errors.append("a, b: no such policy version")
    versions = list(selectors.policy_version_list(user=request.user)[:200])
    return render(
        request,
        "policyversions/diff.html",
        {
            "rows": rows,
            "errors": errors,
            "numbers": numbers,
            "versions": versions,
            "page": "policy",
        },
        status=400 if errors and request.GET else 200,
    )


@login_required
def rollback(request: HttpRequest, number: int) -> HttpResponse:
    """POST: put version ``number``'s content in force again, as a new version."""
    _admin_only(request)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    try:
        restored = services.policy_rollback(
            user=request.user, number=number, reason=request.POST.get("reason", "")
        )
    except NotFound:
        raise Http404("no such policy version") from None
    except (FieldErrors, Conflict) as exc:
        for field, problems in exc.as_dict().items():
            for problem in problems:
                messages.error(request, f"Not rolled back: {field}: {problem}")
        return redirect("policy:version", number=number)
    messages.success(request, f"Policy v{restored.number} is in force (the content of v{number}).")
    return redirect("policy:version", number=restored.number)


# ------------------------------------------------------------------------------ what-if


@login_required
def whatif_index(request: HttpRequest) -> HttpResponse:
    """The what-if runs (newest first) and the form that starts one (POST queues it and goes
    to its page, where the progress shows)."""
    _admin_only(request)
    services.policy_version_seed()
    in_force = selectors.policy_in_force(user=request.user)
    clusters = list(
        Cluster.objects.filter(enabled=True).order_by("name").values_list("name", flat=True)
    )
    versions = list(selectors.policy_version_list(user=request.user)[:50])
    weights, classes = services.current_tables()
    status = 200
    if request.method == "POST":
        form = WhatIfForm(
            request.POST,
            clusters=clusters,
            versions=versions,
            in_force=in_force,
            weights=weights,
            classes=classes,
        )
        if form.is_valid():
            try:
                run = whatif_runs.whatif_run_start(user=request.user, **form.service_arguments())
            except (FieldErrors, Conflict) as exc:
                form.add_service_errors(exc.as_dict())
            else:
                return redirect("policy:whatif-run", run_id=run.pk)
        status = 400
    else:
        form = WhatIfForm(
            clusters=clusters,
            versions=versions,
            in_force=in_force,
            weights=weights,
            classes=classes,
        )
    return render(
        request,
        "policyversions/whatif_index.html",
        {
            "form": form,
            "in_force": in_force,
            "runs": list(selectors.whatif_run_list(user=request.user)[:50]),
            "page": "policy",
        },
        status=status,
    )


def _run_or_404(request: HttpRequest, run_id: int) -> WhatIfRun:
    try:
        return selectors.whatif_run_get(user=request.user, run_id=run_id)
    except NotFound:
        raise Http404("no such what-if run") from None


@login_required
def whatif_run(request: HttpRequest, run_id: int) -> HttpResponse:
    """One run: its progress (live over the stream) and cancel button while it runs; once done,
    the policies side by side, per team, and the charts; from there a candidate can be applied."""
    _admin_only(request)
    run = _run_or_404(request, run_id)
    policies = selectors.whatif_policies(run)
    context: dict[str, Any] = {"run": run, "policies": policies, "page": "policy"}
    if run.status == "succeeded":
        teams = selectors.whatif_team_rows(run)
        context.update(
            rows=selectors.whatif_side_by_side(run),
            teams=teams,
            notes=selectors.whatif_candidate_notes(run),
            figures=[
                ("whatif-wait", charts.wait_distribution_figure(policies, run.details)),
                ("whatif-team-wait", charts.team_wait_figure(policies, teams)),
                ("whatif-team-share", charts.team_share_figure(policies, teams)),
                ("whatif-utilization", charts.utilization_figure(policies, run.details)),
            ],
        )
    return render(request, "policyversions/whatif_run.html", context)


@login_required
def whatif_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    """POST: stop a queued or running replay."""
    _admin_only(request)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _run_or_404(request, run_id)
    try:
        whatif_runs.whatif_run_cancel(user=request.user, run_id=run_id)
    except Conflict as exc:
        messages.error(request, f"Not cancelled: {exc.message}")
    else:
        messages.success(request, "Cancel requested: the replay stops at its next step.")
    return redirect("policy:whatif-run", run_id=run_id)


@login_required
def whatif_apply(request: HttpRequest, run_id: int) -> HttpResponse:
    """``?candidate=NAME``: what putting the candidate in force changes (the diff against the
    version in force) and why; POST applies it as the next version."""
    _admin_only(request)
    run = _run_or_404(request, run_id)
    name = request.POST.get("candidate") or request.GET.get("candidate", "")
    if name not in run.candidates:
        raise Http404("no such candidate in this run")
    in_force = selectors.policy_in_force(user=request.user)
    current = services.version_content(in_force) if in_force else {}
    policy = run.candidates[name]
    proposed = (
        services.policy_content_with(
            services.policy_base(in_force),
            engine_config=policy.get("engine_config"),
            team_weights=policy.get("team_weights"),
            priority_classes=policy.get("priority_classes"),
        )
        if in_force is not None
        else {}
    )
    error = ""
    changed_since = in_force is not None and in_force.number != run.baseline_version
    if request.method == "POST":
        try:
            version = whatif_runs.whatif_candidate_apply(
                user=request.user,
                run_id=run.pk,
                candidate=name,
                reason=request.POST.get("reason", ""),
            )
        except (FieldErrors, Conflict) as exc:
            error = "; ".join(f"{k}: {', '.join(v)}" for k, v in exc.as_dict().items())
        else:
            messages.success(
                request, f"Policy v{version.number} is in force (candidate {name} of run {run.pk})."
            )
            return redirect("policy:version", number=version.number)
    return render(
        request,
        "policyversions/whatif_apply.html",
        {
            "run": run,
            "candidate": name,
            "in_force": in_force,
            "changes": selectors.diff_contents(current, proposed),
            "changed_since": changed_since,
            "error": error,
            "page": "policy",
        },
        status=(409 if changed_since else 400) if error else 200,
    )
