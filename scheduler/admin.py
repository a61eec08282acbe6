from django.contrib import admin

from .models import Allocation, Cluster, GpuModel, Job, JobEvent, Node, NodeEvent


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = ("name", "memory_gib")


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
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


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "team", "state", "workers", "gpus_per_worker", "submitted_at")
    list_filter = ("state", "team", "priority_class")
    search_fields = ("name",)
    inlines = [JobEventInline]
    raw_id_fields = ("submitter",)


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ("job", "node", "gpu_index", "attempt", "started_at", "ended_at")
    raw_id_fields = ("job", "node")


@admin.register(NodeEvent)
class NodeEventAdmin(admin.ModelAdmin):
    list_display = ("node", "kind", "time", "message")
    list_filter = ("kind",)
