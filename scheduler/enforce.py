"""Enforce: tell the backend what the committed decisions mean.

Everything here runs after the database commit and is safe to repeat: a crash between commit and
backend call is healed by the next cycle's reconciliation (``scheduler.cycle``), which re-issues
the idempotent backend call.
"""

from __future__ import annotations

import logging

from django.db import transaction

from .backends import backend_run_id, get_backend
from .backends.base import BackendError

log = logging.getLogger(__name__)


def backend_cancel_after_commit(job) -> None:
    """Stop the job's current run on its backend once the cancellation has committed."""
    cluster, job_id, attempt = job.cluster, backend_run_id(job), job.attempts

    def _cancel() -> None:
        try:
            get_backend(cluster).cancel(job_id, attempt)
        except BackendError:
            # The sync reconciles: a run still alive for a cancelled job is cancelled again.
            log.warning("backend cancel of job %s failed; sync will retry", job_id, exc_info=True)

    transaction.on_commit(_cancel)
