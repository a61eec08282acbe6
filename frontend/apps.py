from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    verbose_name = "Portal"

    def ready(self) -> None:
        from . import signals

        signals.connect()
