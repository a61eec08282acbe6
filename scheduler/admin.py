"""Django admin for the scheduler. Jobs, their allocations and events are read-only here: a job
changes state only through the services (the portal, the API, the loop), which keep allocations,
the audit trail, billing and the live streams in step; an edit in this admin would bypass all of
them."""

from django import forms
from django.contrib import admin

from .backends import backend_config_problem
from .models import Allocation, Cluster, Job, JobEvent, Node, NodeEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows shown, never added, changed or deleted here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ClusterAdminForm(forms.ModelForm):
    """Refuses a backend configuration the loop's backend registry would refuse, on
    ``backend_config``, with the registry's own reason. Saved as posted, a misspelt Slurm
    setting or a bad ``run_namespace`` surfaced only as the cluster going unavailable on the
    next cycle, its jobs stalled; a configuration that was no JSON object made every job of
    the cluster fail to cancel or show its log (a 500)."""

    class Meta:
        model = Cluster
        fields = (
            "name",
            "region",
            "interconnect",
            "backend_kind",
            "backend_config",
            "enabled",
            "backend_available",
            "backend_error",
            "backend_checked_at",
        )

    def clean(self):
        cleaned = super().clean()
        kind, config = cleaned.get("backend_kind"), cleaned.get("backend_config")
        if kind is not None and "backend_config" in cleaned:
            problem = backend_config_problem(kind, config if config is not None else {})
            if problem:
                self.add_error("backend_config", problem)
        return cleaned


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterAdminForm
    list_display = ("name", "backend_kind", "enabled", "backend_available")


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "cluster", "gpu_model", "gpu_count", "rack", "state", "health", "spot")
    list_filter = ("cluster", "state", "gpu_model", "rack")
    search_fields = ("name",)


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ("time", "kind", "message", "data")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
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
class NodeEventAdmin(admin.ModelAdmin):
    list_display = ("node", "kind", "time", "message")
    list_filter = ("kind",)
