"""The cluster page's retire and reinstate of a whole cluster (platform admins, as the API's
``/api/v1/admin/clusters/<name>/retire|reinstate/``): a GET shows what the action touches and
asks to confirm, the POST (CSRF-checked) calls ``scheduler.retirement``. Everyone else gets a
403 for both, as from the API; an unknown cluster or action is a 404. A refusal of the service
(a reason too long: the page again with the error at the field, a 400; a cluster not retired
to reinstate, the API's 409: a message on the cluster page) is never a 500."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from core.errors import Conflict, DomainError, NotFound
from scheduler import retirement
from scheduler.models import Node
from tenants.permissions import is_platform_admin

from . import selectors as page_selectors

ACTIONS = ("retire", "reinstate")
# The column the reason is kept in (each node's, as the service stores it).
REASON_MAX_LENGTH = Node._meta.get_field("retire_reason").max_length


class RetireForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX_LENGTH, required=False)


@login_required
@require_http_methods(["GET", "POST"])
def cluster_retirement(
    request: HttpRequest, name: str, action: str
) -> HttpResponse | HttpResponseRedirect:
    """Confirm (GET) and do (POST) ``action`` (retire or reinstate) on the cluster ``name``."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("platform admins only")
    if action not in ACTIONS:
        raise Http404("no such action")
    cluster = page_selectors.cluster_retirement(user=request.user, name=name)
    if cluster is None:
        raise Http404("no such cluster")
    if request.method == "GET":
        return _confirmation(request, cluster, action)
    form = RetireForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(str(message) for message in form.errors.get("reason", []))
        reason = request.POST.get("reason", "").replace("\x00", "")
        return _confirmation(
            request, cluster, action, reason=reason, reason_error=errors, status=400
        )
    reason = form.cleaned_data["reason"]
    try:
        if action == "retire":
            done = retirement.cluster_retire(user=request.user, name=name, reason=reason)
        else:
            done = retirement.cluster_reinstate(user=request.user, name=name)
    except NotFound:
        raise Http404("no such cluster") from None
    except Conflict as exc:
        messages.error(request, f"Cluster {name} not {action}d: {exc.message}")
        return redirect(reverse("cluster"))
    except DomainError as exc:
        # Any refusal but one of the reason (there is no other input) shows above the form.
        at_reason = exc.field == "reason"
        return _confirmation(
            request,
            cluster,
            action,
            reason=reason,
            reason_error=exc.message if at_reason else "",
            error="" if at_reason else exc.message,
            status=400,
        )
    if done.retired_at is not None:
        messages.success(request, f"Cluster {name}: retired. Its history stays.")
    elif done.retiring_since is not None:
        messages.success(
            request,
            f"Cluster {name}: retiring. Its nodes are drained and retire as their jobs end; "
            "no new job is routed to it.",
        )
    else:
        messages.success(
            request,
            f"Cluster {name}: reinstated. Its nodes are back drained: release each to use it.",
        )
    return redirect(reverse("cluster") + f"#cluster-{name}")


def _confirmation(
    request: HttpRequest,
    cluster: page_selectors.ClusterRetirement,
    action: str,
    *,
    reason: str = "",
    reason_error: str = "",
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    return render(
        request,
        "frontend/cluster_retirement.html",
        {
            "cluster": cluster,
            "action": action,
            "reason": reason,
            "reason_error": reason_error,
            "error": error,
            "reason_max_length": REASON_MAX_LENGTH,
            "page": "cluster",
        },
        status=status,
    )
