"""A URL configuration for a server without billing: only the token exchange and the job API,
so ``/api/v1/billing/statements/`` is a plain 404 (used by the ``gpuctl cost`` test)."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from scheduler.api import views as scheduler_views
from tenants import api as tenants_api

router = DefaultRouter()
router.register("jobs", scheduler_views.JobViewSet, basename="job")

urlpatterns = [
    path("api/v1/auth/token", tenants_api.TokenExchangeView.as_view(), name="api-token"),
    path("api/v1/", include(router.urls)),
]
