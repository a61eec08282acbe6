from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The one hook: every committed batch of stream messages (job, node, budget and quota
        # changes) reaches the intake, wherever in the platform it was published.
        from core import streams

        from .intake import on_committed

        streams.subscribe(on_committed)
