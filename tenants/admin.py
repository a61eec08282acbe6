from django.contrib import admin

from .models import ApiToken, Membership, PriorityClass, Quota, Team


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
