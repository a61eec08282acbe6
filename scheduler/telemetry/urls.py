"""Routes of the telemetry app (ingest API, /metrics)."""

urlpatterns: list = []
