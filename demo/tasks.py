"""The demo's periodic task (registered in PERIODIC_TASKS only when DEMO_WORKLOAD is on)."""

from __future__ import annotations

from celery import shared_task

from .seed import demo_workload_tick


@shared_task(name="demo.tasks.demo_workload", ignore_result=True)
def demo_workload() -> int:
    """The demo's steady trickle of jobs; does nothing outside DEBUG or before the seed."""
    return demo_workload_tick()
