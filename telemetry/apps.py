"""The GPU telemetry app: node agents' samples, rollups, node health, idle jobs, and the
platform's Prometheus metrics."""

from typing import Any

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    label = "telemetry"
    verbose_name = "GPU telemetry"

    def ready(self) -> None:
        from scheduler.loop.cycle import cycle_finished

        cycle_finished.connect(_observe_cycle, dispatch_uid="telemetry.metrics.observe_cycle")

        from django.db.models.signals import post_delete, post_save

        from .models import NodeAgentToken

        # Cache invalidation (infrastructure): whatever path writes a token row (the services,
        # the admin, a shell, a node's deletion cascading to its tokens), the token caches of
        # telemetry.tokens follow at once.
        post_save.connect(_token_saved, sender=NodeAgentToken, dispatch_uid="telemetry.token_saved")
        post_delete.connect(
            _token_deleted, sender=NodeAgentToken, dispatch_uid="telemetry.token_deleted"
        )


def _observe_cycle(sender: object, **kwargs: Any) -> None:
    # prometheus_client takes about 0.2 s to import: a process pays it at its first cycle (or
    # its first /metrics scrape), not every manage.py command at start-up.
    from .metrics import observe_cycle

    observe_cycle(sender, **kwargs)


def _token_saved(sender: type, instance: Any, **kwargs: Any) -> None:
    from .tokens import forget_unknown_token, tokens_changed

    if instance.revoked_at is None:
        forget_unknown_token(instance.key_hash)
    else:
        tokens_changed()


def _token_deleted(sender: type, instance: Any, **kwargs: Any) -> None:
    from .tokens import tokens_changed

    tokens_changed()
