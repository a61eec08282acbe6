from django.contrib import admin

from .models import GpuModel


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = ("name", "memory_gib")
