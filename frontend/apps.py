from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    verbose_name = "Portal"

    def ready(self):
        from . import signals

        signals.connect()
