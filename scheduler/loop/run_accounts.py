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
as itself answers "" for each run without asking its cluster.

Every run submitted since records its account at submission (``scheduler.loop.enforce``; "" for
the backend's own identity), so after one sync nothing is left to learn and each sync only
checks the records of the runs it already read (benchmarks/run_accounts.py).
"""

from __future__ import annotations

import json
import logging

from django.db import transaction

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
    learnt = job_run_accounts_record(
        accounts=[
            (unrecorded[ref], account) for ref, account in owners.items() if ref in unrecorded
        ]
    )
    by_pk = {job.pk: job for job in unrecorded.values()}
    for pk in learnt:
        job = by_pk[pk]
        log.info(
            "job %s: attempt %s runs as %r (learnt from the cluster)",
            pk,
            job.attempts,
            job.backend_accounts[str(job.attempts)],
        )
    return learnt


def job_run_account_record(*, job: Job, account: str) -> bool:
    """Record ``account`` ("" : the backend's own identity) as the account of ``job``'s current
    attempt (see :func:`job_run_accounts_record`); True when recorded."""
    return bool(job_run_accounts_record(accounts=[(job, account)]))


# Jobs recorded per statement: a bounded parameter list on every database.
_RECORD_BATCH = 1000


def job_run_accounts_record(*, accounts: list[tuple[Job, str]]) -> list[int]:
    """Record each ``(job, account)``'s account as that of the job's current attempt, unless one
    is recorded already (a record is never changed) or the job's row has moved to another
    attempt or run, or had another record written, since it was read; the copies are updated
    too. Returns the ids recorded, sorted. One locked read and one UPDATE per batch of jobs
    that share an attempt number, an account and their records before (after an upgrade: a
    handful of batches for every run of a cluster), where a statement per job made the first
    sync of a cluster with 5,000 live runs take about a minute."""
    groups: dict[tuple[int, str, str], list[Job]] = {}
    for job, account in accounts:
        before = job.backend_accounts or {}
        if str(job.attempts) not in before:
            key = (job.attempts, account, json.dumps(before, sort_keys=True))
            groups.setdefault(key, []).append(job)
    recorded: list[int] = []
    for (attempts, account, _), members in groups.items():
        before = members[0].backend_accounts or {}
        after = {**before, str(attempts): account}
        for start in range(0, len(members), _RECORD_BATCH):
            batch = {job.pk: job for job in members[start : start + _RECORD_BATCH]}
            with transaction.atomic():
                rows = (
                    Job.objects.select_for_update()
                    .filter(pk__in=batch, attempts=attempts, backend_accounts=before)
                    .values_list("pk", "backend_ref")
                )
                kept = [pk for pk, ref in rows if ref and ref == batch[pk].backend_ref]
                if kept:
                    Job.objects.filter(pk__in=kept).update(backend_accounts=after)
            for pk in kept:
                batch[pk].backend_accounts = dict(after)
            recorded.extend(kept)
    return sorted(recorded)
