import os

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self):
        from django.conf import settings

        # Only the serving process of the demo runs the loop (not migrate, not the test runner).
        if settings.SCHEDULER_IN_PROCESS_LOOP and os.environ.get("GPUPLATFORM_NO_LOOP") != "1":
            from .loop import start_in_process_loop

            start_in_process_loop()
