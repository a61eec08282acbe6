from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "scheduler.telemetry"
    label = "telemetry"
    verbose_name = "GPU telemetry"
