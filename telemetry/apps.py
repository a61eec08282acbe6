"""The GPU telemetry app: node agents' samples, rollups, node health, idle jobs, and the
platform's Prometheus metrics."""

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    label = "telemetry"
    verbose_name = "GPU telemetry"

    def ready(self) -> None:
        from scheduler.loop.cycle import cycle_finished

        from .metrics import observe_cycle

        cycle_finished.connect(observe_cycle, dispatch_uid="telemetry.metrics.observe_cycle")
