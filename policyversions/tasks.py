"""Celery tasks of the policy history: the what-if replay, off the request, and the sweep that
ends what-if runs whose worker died.

``run_whatif`` takes a run id and calls ``whatif_runs.whatif_run_execute``, which claims the run
with a conditional UPDATE (a duplicated or late delivery does nothing), records every ending
(succeeded, cancelled, failed with the reason) and never raises for a replay's own failure. It is
not retried: a replay that stopped half-way is marked failed by ``reap_stale_whatifs`` (on the
beat) or the next start on its cluster (``WHATIF_STALE_AFTER_S`` without a heartbeat) and the
admin runs it again.
"""

from __future__ import annotations

from celery import shared_task

from .whatif_runs import RUN_WHATIF_TASK, whatif_run_execute, whatif_run_reap_stale


@shared_task(name=RUN_WHATIF_TASK, ignore_result=True, acks_late=False)
def run_whatif(run_id: int) -> None:
    """Replay what-if run ``run_id`` (a missing or already claimed run is a clean exit)."""
    whatif_run_execute(run_id=run_id)


@shared_task(name="policyversions.tasks.reap_stale_whatifs", ignore_result=True)
def reap_stale_whatifs() -> None:
    """Mark failed every what-if run whose worker went silent or that no worker took
    (idempotent: conditional UPDATEs)."""
    whatif_run_reap_stale()
