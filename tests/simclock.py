"""A test helper: moving the simulated cluster forward without waiting."""

from __future__ import annotations


class SimulatedClock:
    """The simulated cluster at one simulated minute per real second (one step of a simulated
    job's log per second); ``advance`` moves its runs forward without waiting."""

    @staticmethod
    def advance(seconds: float) -> None:
        from datetime import timedelta

        from scheduler.models import SimulatedRun

        for run in SimulatedRun.objects.all():
            run.started_at -= timedelta(seconds=seconds)
            run.save(update_fields=["started_at"])

    @staticmethod
    def stop_real_time(monkeypatch) -> None:
        """From now on the simulated cluster's clock moves only with ``advance``. A test that
        reads a log twice and expects nothing new in between otherwise fails whenever a loaded
        machine lets a real second pass between the two reads (one more step of the log)."""
        from django.utils import timezone

        from scheduler.backends.simulated import SimulatedBackend

        stopped_at = timezone.now()
        monkeypatch.setattr(SimulatedBackend, "_now", lambda self: stopped_at)
