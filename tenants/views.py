"""Portal pages of the tenants app: the team tree with quotas and current use, a team's members
and quota requests, the platform admins' quota management, API tokens and the audit log.

Views call selectors and services only; who may do what is asked of ``tenants.permissions``.
Another team's page is a 404; a page for platform admins only is a 403. Every form is a POST
protected by Django's CSRF middleware.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest, PermissionDenied
from django.db.models import QuerySet
from django.forms import Form
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import DomainError, NotFound

from . import entitlements as entitlement_services
from . import forms, permissions, selectors, services
from . import quotas as quota_services
from . import teams as team_services
from .authentication import sso_tokens_work_until
from .csvcells import safe_cell
from .models import AuditEntry, QuotaRequestStatus, Role, Team


def _team_or_404(user: permissions.Caller, slug: str) -> Team:
    try:
        return selectors.team_get(user=user, slug=slug)
    except NotFound as exc:
        raise Http404("no such team") from exc


def _require_platform_admin(user: permissions.Caller) -> None:
    if not permissions.can_manage_quotas(user):
        raise PermissionDenied("platform admins only")


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The team tree (the caller's teams; every team for platform admins) with weights,
    guarantees, borrow limits and current use."""
    is_admin = permissions.is_platform_admin(request.user)
    context = {
        "rows": selectors.quota_overview(user=request.user),
        "is_admin": is_admin,
        "capacity": selectors.capacity_overview() if is_admin else [],
        "pending_requests": (
            selectors.quota_request_list(
                user=request.user, status=QuotaRequestStatus.PENDING
            ).count()
        ),
        "page": "teams",
    }
    return render(request, "tenants/index.html", context)


@login_required
def team_detail(request: HttpRequest, slug: str) -> HttpResponse:
    team = _team_or_404(request.user, slug)
    can_manage = permissions.can_manage_team(request.user, team)
    overview = [r for r in selectors.quota_overview(user=request.user) if r.team.pk == team.pk]
    context = {
        "team": team,
        "entitlements": selectors.team_entitlements(team),
        "is_admin": permissions.is_platform_admin(request.user),
        "uses": overview[0].uses if overview else [],
        "members": selectors.membership_list(user=request.user, team=team),
        "requests": selectors.quota_request_list(user=request.user).filter(team=team)[:50],
        "can_manage": can_manage,
        "can_request": permissions.can_request_quota(request.user, team),
        "member_form": forms.MembershipForm(),
        "roles": Role.choices,
        "page": "teams",
    }
    return render(request, "tenants/team_detail.html", context)


@login_required
@require_POST
def member_set(request: HttpRequest, slug: str) -> HttpResponse:
    team = _team_or_404(request.user, slug)
    form = forms.MembershipForm(request.POST)
    if form.is_valid():
        try:
            team_services.membership_set(
                user=request.user,
                team=team,
                username=form.cleaned_data["username"],
                role=form.cleaned_data["role"],
            )
            messages.success(
                request,
                f"{form.cleaned_data['username']} is now "
                f"{form.cleaned_data['role']} of {team.slug}.",
            )
        except DomainError as exc:
            _domain_refusal(exc)
            messages.error(request, exc.message)
    else:
        messages.error(request, forms.errors_text(form))
    return redirect("tenants:team", slug=team.slug)


@login_required
@require_POST
def member_remove(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    team = _team_or_404(request.user, slug)
    try:
        team_services.membership_remove(user=request.user, team=team, username=username)
        messages.success(request, f"{username} left {team.slug}.")
    except DomainError as exc:
        _domain_refusal(exc)
        messages.error(request, exc.message)
    return redirect("tenants:team", slug=team.slug)


def _domain_refusal(exc: DomainError) -> None:
    """A permission refusal is a real 403 in the portal too (not only a message)."""
    if exc.status_code == 403:
        raise PermissionDenied(exc.message)
    if exc.status_code == 404:
        raise Http404(exc.message)


@login_required
@require_http_methods(["GET", "POST"])
def quota_request_new(request: HttpRequest, slug: str) -> HttpResponse:
    team = _team_or_404(request.user, slug)
    if not permissions.can_request_quota(request.user, team):
        raise PermissionDenied("only team owners and admins request quota")
    form = forms.QuotaRequestForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            quota_services.quota_request_create(
                user=permissions.signed_in(request),
                team=team,
                gpu_model=data["gpu_model"],
                guaranteed_gpus=data["guaranteed_gpus"],
                borrow_limit_gpus=data["borrow_limit_gpus"],
                reason=data["reason"],
                until=data["until"],
            )
            messages.success(request, "Quota request sent to the platform admins.")
            return redirect("tenants:team", slug=team.slug)
        except DomainError as exc:
            forms.add_domain_error(form, exc)
    status = 400 if request.method == "POST" else 200
    return render(
        request,
        "tenants/quota_request_new.html",
        {"team": team, "form": form, "page": "teams"},
        status=status,
    )


@login_required
def quota_requests(request: HttpRequest) -> HttpResponse:
    """Requests of the caller's teams; platform admins see all and decide pending ones."""
    status = request.GET.get("status") or None
    if status not in QuotaRequestStatus.values:
        status = None
    context = {
        "requests": selectors.quota_request_list(user=request.user, status=status)[:200],
        "can_decide": permissions.can_decide_quota_request(request.user),
        "statuses": QuotaRequestStatus.choices,
        "status": status,
        "page": "teams",
    }
    return render(request, "tenants/quota_requests.html", context)


@login_required
@require_POST
def quota_request_decide(request: HttpRequest, pk: int, decision: str) -> HttpResponse:
    try:
        selectors.quota_request_get(user=request.user, request_id=pk)
    except NotFound as exc:
        raise Http404("no such quota request") from exc
    if not permissions.can_decide_quota_request(request.user):
        raise PermissionDenied("platform admins only")
    form = forms.DecisionForm(request.POST)
    if not form.is_valid():
        # Deciding without the comment that did not validate would drop what the admin wrote.
        detail = forms.errors_text(form)
        messages.error(request, f"Request #{pk}: not decided: {detail}")
        return redirect("tenants:requests")
    comment = form.cleaned_data["comment"]
    try:
        if decision == "approve":
            quota_services.quota_request_approve(
                user=request.user,
                request_id=pk,
                comment=comment,
                confirm_overcommit=form.cleaned_data.get("confirm_overcommit", False),
            )
            messages.success(request, f"Request #{pk} approved and applied.")
        else:
            quota_services.quota_request_reject(user=request.user, request_id=pk, comment=comment)
            messages.success(request, f"Request #{pk} rejected.")
    except DomainError as exc:
        detail = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.as_dict().items())
        messages.error(request, f"Request #{pk}: {detail}")
    return redirect("tenants:requests")


# --- platform admins: quotas, the tree, priority classes ---------------------------------------


def _manage_context(request: HttpRequest, **forms_in: Form) -> dict[str, Any]:
    from .models import PriorityClass

    context = {
        "rows": selectors.quota_overview(user=request.user),
        "is_admin": True,  # the page is for platform admins only
        "capacity": selectors.capacity_overview(),
        "priorities": PriorityClass.objects.order_by("-value"),
        "quota_form": forms.QuotaForm(),
        "team_form": forms.TeamCreateForm(),
        "priority_form": forms.PriorityClassForm(),
        "entitlements_form": forms.EntitlementsForm(),
        "page": "teams",
    }
    context.update(forms_in)
    return context


@login_required
def manage(request: HttpRequest) -> HttpResponse:
    """The admin page; ``?team=&gpu_model=`` prefills the quota form with that quota."""
    _require_platform_admin(request.user)
    initial: dict[str, Any] = {}
    team, model = request.GET.get("team"), request.GET.get("gpu_model")
    if team and model:
        from .models import Quota

        initial = {"team": team, "gpu_model": model}
        quota = Quota.objects.filter(team__slug=team, gpu_model__name=model).first()
        if quota is not None:
            initial |= {
                "guaranteed_gpus": quota.guaranteed_gpus,
                "borrow_limit_gpus": quota.borrow_limit_gpus,
            }
    extra: dict[str, Form] = {"quota_form": forms.QuotaForm(initial=initial)}
    if slug := request.GET.get("entitlements"):
        team_row = _team_or_404(request.user, slug)
        from .models import TeamEntitlements

        row = TeamEntitlements.objects.filter(team=team_row).first()
        extra["entitlements_form"] = forms.EntitlementsForm(
            initial={
                "team": team_row.slug,
                "priority_classes": list(row.priority_classes.all()) if row else [],
                "may_opt_out_of_preemption": row.may_opt_out_of_preemption if row else False,
                "max_pending_jobs": row.max_pending_jobs if row else None,
                "max_pending_jobs_per_user": row.max_pending_jobs_per_user if row else None,
            }
        )
    return render(request, "tenants/manage.html", _manage_context(request, **extra))


@login_required
@require_POST
def manage_quota(request: HttpRequest) -> HttpResponse:
    _require_platform_admin(request.user)
    form = forms.QuotaForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            quota = quota_services.quota_set(
                user=request.user,
                team=data["team"],
                gpu_model=data["gpu_model"],
                guaranteed_gpus=data["guaranteed_gpus"],
                borrow_limit_gpus=data["borrow_limit_gpus"],
                confirm_overcommit=data["confirm_overcommit"],
                comment=data["comment"],
            )
            messages.success(request, f"Quota saved: {quota}.")
            return redirect("tenants:manage")
        except DomainError as exc:
            forms.add_domain_error(form, exc)
    return render(
        request, "tenants/manage.html", _manage_context(request, quota_form=form), status=400
    )


@login_required
@require_POST
def manage_team_new(request: HttpRequest) -> HttpResponse:
    _require_platform_admin(request.user)
    form = forms.TeamCreateForm(request.POST)
    if form.is_valid():
        try:
            team = team_services.team_create(user=request.user, **form.cleaned_data)
            messages.success(request, f"Team {team.slug} created.")
            return redirect("tenants:manage")
        except DomainError as exc:
            forms.add_domain_error(form, exc)
    return render(
        request, "tenants/manage.html", _manage_context(request, team_form=form), status=400
    )


@login_required
@require_POST
def manage_team_weight(request: HttpRequest, slug: str) -> HttpResponse:
    _require_platform_admin(request.user)
    team = _team_or_404(request.user, slug)
    form = forms.TeamWeightForm(request.POST)
    if form.is_valid():
        try:
            team_services.team_update(
                user=request.user,
                team=team,
                fair_share_weight=form.cleaned_data["fair_share_weight"],
            )
            messages.success(request, f"Weight of {team.slug} saved.")
            return redirect("tenants:manage")
        except DomainError as exc:
            forms.add_domain_error(form, exc)
    errors = forms.errors_text(form)
    messages.error(request, f"{team.slug}: {errors}")
    return render(request, "tenants/manage.html", _manage_context(request), status=400)


@login_required
@require_POST
def manage_priority(request: HttpRequest) -> HttpResponse:
    _require_platform_admin(request.user)
    form = forms.PriorityClassForm(request.POST)
    if form.is_valid():
        try:
            pc = entitlement_services.priority_class_set(user=request.user, **form.cleaned_data)
            messages.success(request, f"Priority class {pc.name} saved.")
            return redirect("tenants:manage")
        except DomainError as exc:
            forms.add_domain_error(form, exc)
    return render(
        request, "tenants/manage.html", _manage_context(request, priority_form=form), status=400
    )


@login_required
@require_POST
def manage_entitlements(request: HttpRequest) -> HttpResponse:
    """Set a team's entitlements and pending caps (platform admins)."""
    _require_platform_admin(request.user)
    form = forms.EntitlementsForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            entitlement_services.entitlements_set(
                user=request.user,
                team=data["team"],
                priority_classes=[p.name for p in data["priority_classes"]],
                may_opt_out_of_preemption=data["may_opt_out_of_preemption"],
                max_pending_jobs=data["max_pending_jobs"],
                max_pending_jobs_per_user=data["max_pending_jobs_per_user"],
            )
            messages.success(request, f"Quota settings of {data['team'].slug} saved.")
            return redirect("tenants:team", slug=data["team"].slug)
        except DomainError as exc:
            forms.add_domain_error(form, exc)
    return render(
        request,
        "tenants/manage.html",
        _manage_context(request, entitlements_form=form),
        status=400,
    )


@login_required
@require_POST
def manage_priority_delete(request: HttpRequest, name: str) -> HttpResponse:
    _require_platform_admin(request.user)
    try:
        entitlement_services.priority_class_delete(user=request.user, name=name)
        messages.success(request, f"Priority class {name} deleted.")
    except NotFound as exc:
        raise Http404("no such priority class") from exc
    except DomainError as exc:
        messages.error(request, f"{name}: {exc.message}")
    return redirect("tenants:manage")


# --- API tokens ---------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """The caller's tokens. A created token is shown once, in this response only (never stored
    in the session or a message, never logged); the page is marked no-store."""
    form = forms.TokenForm(request.POST or None)
    created = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                token, raw = services.token_create(
                    user=permissions.signed_in(request), **form.cleaned_data
                )
                created = {"token": token, "raw": raw}
                form = forms.TokenForm()
            except DomainError as exc:
                forms.add_domain_error(form, exc)
                status = 400
        else:
            status = 400
    response = render(
        request,
        "tenants/tokens.html",
        {
            "tokens": selectors.token_list(user=request.user),
            "form": form,
            "created": created,
            "page": "tokens",
            "sso_tokens_work_until": sso_tokens_work_until(request.user),
            "sso_confirmation_days": settings.OIDC_TOKEN_CONFIRMATION_DAYS,
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        token = services.token_revoke(user=permissions.signed_in(request), token_id=pk)
    except NotFound as exc:
        raise Http404("no such token") from exc
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("tenants:tokens")


# --- audit log ----------------------------------------------------------------------------------


def _audit_entries(
    request: HttpRequest,
) -> tuple[forms.AuditFilterForm, QuerySet[AuditEntry] | None]:
    if not permissions.can_view_audit(request.user):
        raise PermissionDenied("platform admins and team admins only")
    form = forms.AuditFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        # A filter that does not parse is said to be wrong: ignored, it showed (and exported)
        # the whole log as if it were the answer.
        return form, None
    filters = form.cleaned_data if form.is_bound else {}
    try:
        entries = selectors.audit_list(
            user=request.user,
            team=filters.get("team") or None,
            action=filters.get("action") or None,
            actor=filters.get("actor") or None,
            since=filters.get("since"),
            until=filters.get("until"),
        )
    except NotFound:
        raise Http404("no such team") from None
    return form, entries


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    form, entries = _audit_entries(request)
    return render(
        request,
        "tenants/audit.html",
        {
            "form": form,
            "entries": entries[:500] if entries is not None else [],
            "query": request.GET.urlencode(),
            "page": "audit",
        },
        status=400 if entries is None else 200,
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


@login_required
def audit_csv(request: HttpRequest) -> StreamingHttpResponse:
    """The filtered audit log as CSV (streamed, so a long log does not sit in memory)."""
    form, entries = _audit_entries(request)
    if entries is None:
        raise BadRequest(forms.errors_text(form))
    writer = csv.writer(_Echo())

    def rows() -> Iterator[str]:
        yield writer.writerow(selectors.AUDIT_CSV_COLUMNS)
        for chunk_start in range(0, 10**9, 1000):
            chunk = list(entries[chunk_start : chunk_start + 1000])
            if not chunk:
                return
            for row in selectors.audit_csv_rows(chunk):
                yield writer.writerow([safe_cell(c) for c in row])

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="audit.csv"'
    return response


@login_required
def manage_sso(request: HttpRequest) -> HttpResponse:
    """Single sign-on group rules (platform admins): provider group -> team and role, applied at
    each member's next login."""
    from django.conf import settings

    from . import identity
    from .models import SsoGroupRule

    _require_platform_admin(request.user)
    form = forms.SsoRuleForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                rule = identity.sso_rule_create(
                    user=request.user,
                    group=data["group"],
                    team=data["team"].slug,
                    role=data["role"],
                )
                messages.success(request, f"Group {rule.group} now maps to {rule.team.slug}.")
                return redirect("tenants:manage-sso")
            except DomainError as exc:
                forms.add_domain_error(form, exc)
                status = 400
        else:
            status = 400
    context = {
        "rules": SsoGroupRule.objects.select_related("team").order_by("group", "team__slug"),
        "form": form,
        "sso_enabled": settings.SSO_ENABLED,
        "groups_claim": settings.OIDC_GROUPS_CLAIM,
        "page": "teams",
    }
    return render(request, "tenants/manage_sso.html", context, status=status)


@login_required
@require_POST
def manage_sso_delete(request: HttpRequest, pk: int) -> HttpResponse:
    from . import identity

    _require_platform_admin(request.user)
    try:
        identity.sso_rule_delete(user=request.user, rule_id=pk)
    except NotFound as exc:
        raise Http404("no such rule") from exc
    messages.success(request, "Rule removed; it stops applying at each member's next login.")
    return redirect("tenants:manage-sso")
