"""Django admin for the scheduler. Jobs, their allocations and events, and node events are
read-only here: a job changes state only through the services (the portal, the API, the loop),
which keep allocations, the audit trail, billing and the live streams in step; an edit in this
admin would bypass all of them. Events are the history admins and teams read to learn what
happened, so nobody rewrites or deletes them.

Clusters, nodes and GPU models are edited here (``ScheduledAdmin``): each save and delete is
audited and asks for a scheduling cycle. A node or cluster with history is not deleted (the
history is view only, so Django refuses the cascade): it is retired (the list's actions,
``scheduler.retirement``)."""

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from catalogue.models import GpuModel
from core.bounds import form_number
from core.errors import Conflict, DomainError
from tenants.admin import AuditedAdmin

from .backend_settings import cluster_backend_change_check
from .backends import backend_config_problem
from .models import Allocation, Cluster, Job, JobEvent, Node, NodeEvent
from .retirement import cluster_reinstate, cluster_retire, node_reinstate, node_retire
from .routing_admin import region_error
from .services import node_change_problems, node_drain, node_release
from .triggers import request_cycle

# ModelAdmin, ModelForm and TabularInline are generic only in django-stubs (the image has no
# django-stubs-ext to make them so at run time), as in tenants.admin.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
    _TabularInline = admin.TabularInline[Any, Any]
    _ModelForm = forms.ModelForm[Any]
else:
    _ModelAdmin = admin.ModelAdmin
    _TabularInline = admin.TabularInline
    _ModelForm = forms.ModelForm


def _admin_user(request: HttpRequest) -> User:
    # Django admin serves signed-in staff users only: never an anonymous one.
    return cast(User, request.user)


class ReadOnlyAdmin(_ModelAdmin):
    """Rows shown, never added, changed or deleted here. A row of another model whose deletion
    would take such rows along (a cascade) is not deleted here either: Django admin refuses a
    delete that needs a permission the user lacks on what it cascades to."""

    def has_add_permission(self, request: HttpRequest, obj: Any | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any | None = None) -> bool:
        return False


class ScheduledAdmin(AuditedAdmin):
    """Audited (``<model>.create|set|delete``, via ``AuditedAdmin``: who, and the row before and
    after) and asks for a scheduling cycle after each save that changed something and each
    delete, as ``cluster_routing_set`` does: whether and where pending jobs may run has changed
    (a node's rack, zone or cached datasets move placement; a GPU model's facts its jobs')."""

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change or form.has_changed():
            request_cycle()

    def delete_model(self, request: HttpRequest, obj: Model) -> None:
        super().delete_model(request, obj)
        request_cycle()

    def _each(
        self,
        request: HttpRequest,
        rows: Iterable[Any],
        verb: str,
        done_verb: str,
        act: Callable[[Any], object],
    ) -> None:
        """Apply ``act`` to each row through its service; a refusal is reported by row."""
        done = []
        for row in rows:
            try:
                act(row)
            except DomainError as exc:
                self.message_user(request, f"{row}: {verb} refused: {exc.message}", messages.ERROR)
            else:
                done.append(str(row))
        if done:
            self.message_user(request, f"{done_verb}: {', '.join(done)}")


class ClusterAdminForm(_ModelForm):
    """Refuses a backend configuration the loop's backend registry would refuse, on
    ``backend_config``, with the registry's own reason, and a region ``region_error`` refuses,
    on ``region``. A change of where the cluster's runs live (its kind, ``run_namespace``, a Slurm
    partition, ...) is refused while its jobs hold GPUs (``cluster_backend_change_check``, on
    ``backend_kind`` or ``backend_config``). Saved as posted, a misspelt Slurm setting or a bad ``run_namespace``
    surfaced only as the cluster going unavailable on the next cycle, its jobs stalled; a
    configuration that was no JSON object made every job of the cluster fail to cancel or show
    its log (a 500)."""

    class Meta:
        model = Cluster
        fields = (
            "name",
            "region",
            "interconnect",
            "backend_kind",
            "backend_config",
            "enabled",
        )

    def clean_region(self) -> str:
        # The rule of cluster_routing_set, which the routing admin API applies: a region
        # spelled otherwise ("EU-West") matched no job's regions or dataset residency.
        region: str = self.cleaned_data.get("region", "")
        if region and (problem := region_error(region)):
            raise forms.ValidationError(problem)
        return region

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean answers
        kind, config = cleaned.get("backend_kind"), cleaned.get("backend_config")
        if kind is not None and "backend_config" in cleaned:
            problem = backend_config_problem(kind, config if config is not None else {})
            if problem:
                self.add_error("backend_config", problem)
            elif self.instance.pk is not None:
                # Inside the admin's transaction: the check holds the loop off until the save.
                try:
                    cluster_backend_change_check(
                        cluster=self.instance, backend_kind=kind, backend_config=config or {}
                    )
                except Conflict as exc:
                    self.add_error(exc.field, exc.message)
        return cleaned


@admin.register(Cluster)
class ClusterAdmin(ScheduledAdmin):
    """Each save and delete is audited (``cluster.create|set|delete``) and asks for a scheduling
    cycle (``ScheduledAdmin``). What the loop records of the backend is read-only, and so is the
    name once the cluster exists: jobs name their clusters (``Job.routing``), and a renamed
    cluster left those that may run only on it waiting for a name no cluster has. Retire and
    reinstate are the list's actions (``cluster_retire``, ``cluster_reinstate``)."""

    form = ClusterAdminForm
    list_display = ("name", "backend_kind", "enabled", "backend_available", "retired_at")
    readonly_fields = (
        "backend_available",
        "backend_error",
        "backend_checked_at",
        "retiring_since",
        "retired_at",
    )
    actions = ["retire_clusters", "reinstate_clusters"]

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        if obj is None:
            return self.readonly_fields
        return ("name", *self.readonly_fields)

    @admin.action(description="Retire selected clusters (their nodes drain, then retire)")
    def retire_clusters(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._each(
            request,
            queryset.order_by("name"),
            "retire",
            "Retired, or retiring until their jobs end",
            lambda c: cluster_retire(user=_admin_user(request), name=c.name, reason=""),
        )

    @admin.action(description="Reinstate selected retired clusters (their nodes come back drained)")
    def reinstate_clusters(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._each(
            request,
            queryset.order_by("name"),
            "reinstate",
            "Reinstated",
            lambda c: cluster_reinstate(user=_admin_user(request), name=c.name),
        )


@admin.register(GpuModel)
class GpuModelAdmin(ScheduledAdmin):
    """The GPU model catalogue. Registered here rather than in ``catalogue`` (which imports
    nothing above it) so its saves are audited and ask for a cycle, like clusters and nodes."""

    list_display = ("name", "memory_gib")


class NodeAdminForm(_ModelForm):
    """Refuses, on the field, a rename, cluster move or GPU change of a node jobs are running
    on (``node_change_problems``, the services' rule)."""

    gpu_count = form_number(Node, "gpu_count")

    class Meta:
        model = Node
        fields = (
            "cluster",
            "name",
            "gpu_model",
            "gpu_count",
            "zone",
            "rack",
            "nvlink_domain",
            "fabric",
            "spot",
            "datasets",
        )

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean answers
        problems = node_change_problems(node=self.instance, changed=self.changed_data)
        for field, reason in problems.items():
            if field in cleaned:
                self.add_error(field, reason)
        return cleaned


@admin.register(Node)
class NodeAdmin(ScheduledAdmin):
    """A node's facts are edited here, audited (``node.create|set|delete``) and followed by a
    scheduling cycle (``ScheduledAdmin``); its state is not. Drain, release, retire and
    reinstate are the actions of the node list, through ``node_drain``, ``node_release``,
    ``node_retire`` and ``node_reinstate`` (audit entry, node event, live streams, the backend's
    drain or undrain); a quarantine, which needs a reason, is on the cluster view or
    ``/api/v1/admin/nodes/<id>/quarantine/``. Set here, a state skipped all of those: a
    quarantined node set to ready took work while still drained on the backend. The loop and
    the telemetry rules own the other read-only fields."""

    form = NodeAdminForm
    list_display = ("name", "cluster", "gpu_model", "gpu_count", "rack", "state", "health", "spot")
    list_filter = ("cluster", "state", "gpu_model", "rack")
    search_fields = ("name",)
    readonly_fields = (
        "state",
        "state_reason",
        "resume_state",
        "resume_reason",
        "probation_until",
        "cluster_hold",
        "avoid_until",
        "health",
        "retiring_since",
        "retired_at",
        "retire_reason",
        "updated_at",
    )
    actions = ["drain_nodes", "release_nodes", "retire_nodes", "reinstate_nodes"]

    @admin.action(description="Drain selected nodes (running work finishes, nothing new starts)")
    def drain_nodes(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._each(
            request,
            queryset.order_by("pk"),
            "drain",
            "Drained",
            lambda node: node_drain(user=_admin_user(request), node_id=node.pk, reason=""),
        )

    @admin.action(description="Release selected drained or quarantined nodes")
    def release_nodes(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._each(
            request,
            queryset.order_by("pk"),
            "release",
            "Released",
            lambda node: node_release(user=_admin_user(request), node_id=node.pk),
        )

    @admin.action(description="Retire selected nodes (drained, retired once nothing runs there)")
    def retire_nodes(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._each(
            request,
            queryset.order_by("pk"),
            "retire",
            "Retired, or retiring until their jobs end",
            lambda node: node_retire(user=_admin_user(request), node_id=node.pk, reason=""),
        )

    @admin.action(description="Reinstate selected retired nodes (they come back drained)")
    def reinstate_nodes(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._each(
            request,
            queryset.order_by("pk"),
            "reinstate",
            "Reinstated",
            lambda node: node_reinstate(user=_admin_user(request), node_id=node.pk),
        )


class JobEventInline(_TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ("time", "kind", "message", "data")

    def has_add_permission(self, request: HttpRequest, obj: Any | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any | None = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "team", "state", "workers", "gpus_per_worker", "submitted_at")
    list_filter = ("state", "team", "priority_class")
    search_fields = ("name",)
    inlines = [JobEventInline]
    raw_id_fields = ("submitter",)


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ("job", "node", "gpu_index", "attempt", "started_at", "ended_at")
    raw_id_fields = ("job", "node")


@admin.register(NodeEvent)
class NodeEventAdmin(ReadOnlyAdmin):
    """A node's history as the loop, the health rules and the node services wrote it: what
    quarantine counts and the cluster page shows. Edited here, a "failed" could read
    "recovered"; deleted, an outage never happened."""

    list_display = ("node", "kind", "time", "message")
    list_filter = ("kind",)
