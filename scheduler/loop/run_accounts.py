"""Runs recorded without an account learn it from their cluster.

Every call about a run names the account it was submitted as (``Job.backend_accounts``, one per
attempt), so a team mapped to another account keeps its live runs in sight. Runs submitted
before the platform recorded accounts have none, and were looked for as their team's account
now: after a remap the poll found nothing, the loop started the next attempt beside the one
still running, and no cancel or stale-run sweep reached the old one.

``learn_run_accounts`` runs on every sync (``scheduler.loop.observe``, inside the scheduling
lock) before the poll: for each run the platform holds GPUs for whose attempt has no account
recorded, it asks the backend whose the run's job is (``Backend.run_owners``: for Slurm, the
owner of the job id sbatch returned) and records that, once. The first sync after the upgrade
comes before any remap in practice, and if a remap came first the cluster's owner of the job is
still the truth. From then on the run is called as a new run is. A backend that runs everything
as itself answers without asking its cluster, so this costs nothing there.
"""

from __future__ import annotations

import logging

from ..backends import backend_run_ref
from ..backends.base import Backend
from ..models import Job

log = logging.getLogger(__name__)


def learn_run_accounts(*, backend: Backend, jobs: list[Job]) -> list[int]:
    """Record, for each of ``jobs`` (selected with their team) whose current attempt has a
    backend reference but no recorded account, the account the backend says owns its run; the
    copies in ``jobs`` are updated too, so calls later in the same pass name it. Returns the
    ids of the jobs that learnt one. A backend error propagates (the caller treats it as the
    cluster's outage); a run the backend does not find is asked about again next sync."""
    unrecorded = {
        job.backend_ref: job
        for job in jobs
        if job.backend_ref and str(job.attempts) not in (job.backend_accounts or {})
    }
    if not unrecorded:
        return []
    owners = backend.run_owners({ref: backend_run_ref(job) for ref, job in unrecorded.items()})
    learnt = []
    for ref, account in sorted(owners.items()):
        job = unrecorded.get(ref)
        if job is not None and job_run_account_record(job=job, account=account):
            log.info(
                "job %s: attempt %s runs as %r (learnt from the cluster)",
                job.pk,
                job.attempts,
                account,
            )
            learnt.append(job.pk)
    return learnt


def job_run_account_record(*, job: Job, account: str) -> bool:
    """Record ``account`` ("" : the backend's own identity) as the account of ``job``'s current
    attempt, unless one is recorded already (a record is never changed) or the job has moved to
    another attempt or run since it was read; True when recorded. One conditional UPDATE."""
    key = str(job.attempts)
    accounts = {**(job.backend_accounts or {}), key: account}
    updated = (
        Job.objects.filter(pk=job.pk, attempts=job.attempts, backend_ref=job.backend_ref)
        .exclude(backend_accounts__has_key=key)
        .update(backend_accounts=accounts)
    )
    if updated:
        job.backend_accounts = accounts
    return bool(updated)
