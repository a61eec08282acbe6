from django.contrib import admin

from .models import ApiToken, AuditEntry, Membership, PriorityClass, Quota, QuotaRequest, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "parent", "fair_share_weight")
    search_fields = ("slug", "name")
    inlines = [MembershipInline, QuotaInline]


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ("name", "value", "preemptible_by_default")


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ("team", "gpu_model", "guaranteed_gpus", "borrow_limit_gpus")
    list_filter = ("gpu_model",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "user",
        "key_prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = ("key_hash", "key_prefix", "last_used_at")


@admin.register(QuotaRequest)
class QuotaRequestAdmin(admin.ModelAdmin):
    """Read-only here: approving or rejecting goes through the portal (it applies and audits)."""

    list_display = ("team", "gpu_model", "guaranteed_gpus", "status", "until", "requested_by")
    list_filter = ("status", "gpu_model")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit log is append-only: nobody edits or deletes entries, not even here."""

    list_display = ("time", "actor_name", "action", "target_repr", "team")
    list_filter = ("action",)
    search_fields = ("actor_name", "target_repr", "comment")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
