"""URL wiring: the portal, the REST API v1, its OpenAPI schema and docs, Django admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from billing import api as billing_api
from scheduler.api import arrays as scheduler_arrays_api
from scheduler.api import views as scheduler_views
from tenants import api as tenants_api


# No format-suffix routes (`/jobs.json/`): the Accept header chooses JSON; suffixes only added
# URL variants that some action handlers did not accept.
class ApiRouter(DefaultRouter):
    include_format_suffixes = False


router = ApiRouter()
router.register("jobs", scheduler_views.JobViewSet, basename="job")
router.register("job-arrays", scheduler_arrays_api.JobArrayViewSet, basename="job-array")
router.register("clusters", scheduler_views.ClusterViewSet, basename="cluster")
router.register("nodes", scheduler_views.NodeViewSet, basename="node")
router.register("admin/nodes", scheduler_views.NodeAdminViewSet, basename="node-admin")
router.register("gpu-models", scheduler_views.GpuModelViewSet, basename="gpu-model")
router.register("teams", tenants_api.TeamViewSet, basename="team")
router.register("quotas", tenants_api.QuotaViewSet, basename="quota")
router.register("priority-classes", tenants_api.PriorityClassViewSet, basename="priority-class")
router.register("billing/prices", billing_api.PriceRateViewSet, basename="price")
router.register("billing/budgets", billing_api.BudgetViewSet, basename="budget")
router.register("billing/alerts", billing_api.BudgetAlertViewSet, basename="budget-alert")
router.register("billing/statements", billing_api.StatementViewSet, basename="statement")
router.register("billing/costs", billing_api.CostViewSet, basename="cost")
router.register("quota-requests", tenants_api.QuotaRequestViewSet, basename="quota-request")
router.register("tokens", tenants_api.TokenViewSet, basename="token")
router.register("audit", tenants_api.AuditEntryViewSet, basename="audit")

urlpatterns = [
    path("api/v1/auth/token", tenants_api.TokenExchangeView.as_view(), name="api-token"),
    path("api/v1/admin/last-cycle", scheduler_views.LastCycleView.as_view(), name="last-cycle"),
    path("api/v1/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("admin/", admin.site.urls),
    path("teams/", include("tenants.urls")),
    path("billing/", include("billing.urls")),
    path("", include("scheduler.telemetry.urls")),
    path("", include("frontend.urls")),
]
