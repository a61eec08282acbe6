"""URL wiring: the portal, the REST API v1, its OpenAPI schema and docs, Django admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularSwaggerSplitView,
)
from rest_framework.routers import DefaultRouter
from rest_framework.viewsets import ViewSetMixin

from billing import api as billing_api
from core.ids import ID_REGEX
from gpuplatform.apidocs import RedocView, redoc_bundle
from notifications import api as notifications_api
from scheduler.api import arrays as scheduler_arrays_api
from scheduler.api import estimate as scheduler_estimate_api
from scheduler.api import outcomes as scheduler_outcomes_api
from scheduler.api import records as scheduler_records_api
from scheduler.api import routing_admin as scheduler_routing_admin_api
from scheduler.api import views as scheduler_views
from tenants import api as tenants_api


class ApiRouter(DefaultRouter):
    # No format-suffix routes (`/jobs.json/`): the Accept header chooses JSON; suffixes only
    # added URL variants that some action handlers did not accept.
    include_format_suffixes = False

    def get_lookup_regex(self, viewset: type[ViewSetMixin], lookup_prefix: str = "") -> str:
        """Detail routes keyed by id accept a database key only (core.ids): a thirty-digit
        id is a 404 at the router, not a database overflow in the view."""
        if getattr(viewset, "lookup_field", "pk") == "pk" and not getattr(
            viewset, "lookup_value_regex", None
        ):
            kwarg = getattr(viewset, "lookup_url_kwarg", None) or "pk"
            return f"(?P<{lookup_prefix}{kwarg}>{ID_REGEX})"
        return super().get_lookup_regex(viewset, lookup_prefix)


router = ApiRouter()
router.register("jobs", scheduler_views.JobViewSet, basename="job")
router.register("job-arrays", scheduler_arrays_api.JobArrayViewSet, basename="job-array")
router.register("clusters", scheduler_views.ClusterViewSet, basename="cluster")
router.register("nodes", scheduler_views.NodeViewSet, basename="node")
router.register("admin/nodes", scheduler_views.NodeAdminViewSet, basename="node-admin")
router.register(
    "admin/clusters",
    scheduler_routing_admin_api.ClusterRoutingAdminViewSet,
    basename="cluster-admin",
)
router.register(
    "admin/datasets", scheduler_routing_admin_api.DatasetAdminViewSet, basename="dataset-admin"
)
router.register(
    "admin/team-clusters",
    scheduler_routing_admin_api.TeamClustersAdminViewSet,
    basename="team-clusters-admin",
)
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
router.register(
    "notifications/webhooks", notifications_api.WebhookViewSet, basename="notification-webhook"
)
router.register(
    "notifications/deliveries", notifications_api.DeliveryViewSet, basename="notification-delivery"
)

urlpatterns = [
    path("api/v1/auth/token", tenants_api.TokenExchangeView.as_view(), name="api-token"),
    path("api/v1/auth/me", tenants_api.MeView.as_view(), name="api-me"),
    path(
        "api/v1/notifications/preferences",
        notifications_api.PreferencesView.as_view(),
        name="notification-preferences",
    ),
    path("api/v1/admin/last-cycle", scheduler_views.LastCycleView.as_view(), name="last-cycle"),
    path(
        "api/v1/jobs/estimate/",
        scheduler_estimate_api.JobEstimateView.as_view(),
        name="job-estimate",
    ),
    path(
        "api/v1/jobs/<id:job_id>/records/",
        scheduler_records_api.JobRecordsView.as_view(),
        name="job-records",
    ),
    path(
        "api/v1/jobs/<id:job_id>/records/<id:attempt>/",
        scheduler_records_api.JobRecordView.as_view(),
        name="job-record",
    ),
    path(
        "api/v1/jobs/<id:job_id>/resubmit/",
        scheduler_records_api.JobResubmitView.as_view(),
        name="api-job-resubmit",
    ),
    path("api/v1/outcomes/", scheduler_outcomes_api.OutcomesView.as_view(), name="api-outcomes"),
    path("api/v1/policy/", include("policyversions.api")),
    # A namespace of their own: the portal names its pages like the router's routes ("job-list"
    # is /jobs/), and the API root reversed the portal's names for its links.
    path("api/v1/", include((router.urls, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's init script as a file (no inline script: the CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", RedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("api/redoc/redoc.<str:digest>.js", redoc_bundle, name="api-redoc-bundle"),
    path("admin/", admin.site.urls),
    path("teams/", include("tenants.urls")),
    path("billing/", include("billing.urls")),
    path("notifications/", include("notifications.urls")),
    path("policy/", include("policyversions.urls")),
    path("", include("telemetry.urls")),
    path("", include("frontend.urls")),
]

# Never a traceback to a client: JSON for the API, plain pages for the portal (DEBUG off).
handler500 = "gpuplatform.api.server_error"
handler404 = "gpuplatform.api.page_not_found"
handler400 = "gpuplatform.api.bad_request"
