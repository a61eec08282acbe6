"""Routes of the telemetry app (ingest API, /metrics); included at the site root."""

from django.urls import path

from . import api

urlpatterns = [
    path("api/v1/telemetry/samples", api.SampleBatchView.as_view(), name="telemetry-samples"),
    path("metrics", api.MetricsView.as_view(), name="metrics"),
]
