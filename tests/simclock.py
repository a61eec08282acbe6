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
