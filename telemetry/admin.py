"""Django admin for telemetry: agent tokens (issue one from a node's row: the plain token is shown
once, in the confirmation message), node telemetry and idle flags (view only)."""

from __future__ import annotations

from typing import Any, NoReturn

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduler.admin import ReadOnlyAdmin
from scheduler.models import Node

from .models import JobIdleFlag, NodeAgentToken, NodeTelemetry
from .tokens import node_token_issue, node_token_revoke


# ModelAdmin is generic only in django-stubs: `ModelAdmin[NodeAgentToken]` fails at run time
# without django-stubs-ext's monkeypatch, a run-time dependency the image does not carry.
@admin.register(NodeAgentToken)
class NodeAgentTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("key_prefix", "node", "created_at", "last_used_at", "revoked_at")
    list_filter = ("node__cluster",)
    # The node and the revocation too: a token moved to another node here reported for that
    # node (its health samples could quarantine it), and a revoked one, its revocation cleared,
    # worked again. Revoking is the action below; a new node gets a new token.
    readonly_fields = (
        "node",
        "key_prefix",
        "created_at",
        "created_by",
        "revoked_at",
        "last_used_at",
    )
    # The key's hash is neither shown nor editable: what the agent's token is checked against.
    exclude = ("key_hash",)
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are issued by the node action or `telemetry_issue_token`

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[NodeAgentToken]) -> None:
        revoked = sum(node_token_revoke(token=t) for t in queryset)
        self.message_user(request, f"{revoked} token(s) revoked")


# The ingest keeps these rows. With every field read-only but add still allowed, the add page
# saved a row without its node or job (a 500); a delete dropped what the ingest keeps (a
# probation's announced failed check, a job's idle flag).
@admin.register(NodeTelemetry)
class NodeTelemetryAdmin(ReadOnlyAdmin):
    list_display = ("node", "last_sample_at", "agent_version", "agent_dropped", "samples_received")

    def has_delete_permission(self, request: HttpRequest, obj: NodeTelemetry | None = None) -> bool:
        # Django admin asks this of every row a node's delete cascades to, and a node's
        # telemetry goes with its node. Deleted alone, it is refused: its own delete page and
        # the list's bulk delete.
        return True

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> NoReturn:
        raise PermissionDenied

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


@admin.register(JobIdleFlag)
class JobIdleFlagAdmin(ReadOnlyAdmin):
    list_display = ("job", "idle_since", "flagged_at", "utilization", "cleared_at")


@admin.action(description="Issue a telemetry agent token")
def issue_agent_token(
    modeladmin: admin.ModelAdmin[Node], request: HttpRequest, queryset: QuerySet[Node]
) -> None:
    for node in queryset:
        _, raw = node_token_issue(node=node, created_by=request.user)
        modeladmin.message_user(
            request, f"{node.name}: {raw} (shown once; store it on the node)", messages.WARNING
        )


# The node admin belongs to the scheduler app; add the action to it without replacing it.
_node_admin = admin.site._registry.get(Node)
if _node_admin is not None:
    _node_admin.actions = [*(_node_admin.actions or []), issue_agent_token]
