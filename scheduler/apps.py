import os

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from django.conf import settings
        from django.urls import register_converter

        from core.ids import IdConverter

        # ``<id:...>`` in every URL module: an id beyond a database key is a 404 (core.ids).
        register_converter(IdConverter, "id")

        # Only the serving process of the demo runs the loop (not migrate, not the test runner).
        if settings.SCHEDULER_IN_PROCESS_LOOP and os.environ.get("GPUPLATFORM_NO_LOOP") != "1":
            from .loop.inprocess import start_in_process_loop

            start_in_process_loop()
