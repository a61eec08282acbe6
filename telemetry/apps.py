"""The GPU telemetry app: node agents' samples, rollups, node health, idle jobs, and the
platform's Prometheus metrics."""

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    label = "telemetry"
    verbose_name = "GPU telemetry"

    def ready(self) -> None:
        from scheduler.loop.cycle import cycle_finished

        cycle_finished.connect(_observe_cycle, dispatch_uid="telemetry.metrics.observe_cycle")


def _observe_cycle(sender, **kwargs) -> None:
    # prometheus_client takes about 0.2 s to import: a process pays it at its first cycle (or
    # its first /metrics scrape), not every manage.py command at start-up.
    from .metrics import observe_cycle

    observe_cycle(sender, **kwargs)
