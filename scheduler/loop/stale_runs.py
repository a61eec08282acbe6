"""Cancel the runs the platform no longer wants: defence in depth against a cluster that runs an
attempt the platform has moved past.

The platform alone requeues a job (a new attempt, resumed from its checkpoint), and backends ask
their cluster not to restart runs by itself (Slurm: ``--no-requeue``). A run the platform gave up
on can still be alive: a job Slurm had requeued before that flag existed, a cancel that was lost
while the cluster was unreachable, a pod on a node that was cut off. ``cancel_stale_runs`` runs on
every sync (``scheduler.loop.observe``, inside the scheduling lock): it lists the live runs of the
cluster's ``run_namespace`` (``Backend.live_runs``), reads their jobs in one query and cancels
every run that is

- of an attempt older than the job's current one (superseded), or
- of a job that is over in the platform (succeeded, failed, cancelled), or
- of the job's current attempt while the job holds no GPUs (requeued, waiting for its next
  attempt): the platform has released that run's GPUs and may give them to another job.

A run whose job id is not in the database, or whose attempt is newer than its job's, is left
alone and logged: it is not ours to judge (another database sharing the namespace, a restored
backup). A run owned by an account that is not its job's (``is_jobs_run``: with Slurm's
``team_accounts``, another team's account may name a job like any run) is left alone without a
word, on every sync: it is that team's business, not a stale run. The runs listed include those
of the accounts recorded with the platform's recent runs (``recorded_accounts``), so a run stays
in sight after its team is mapped to another account. Each cancel is idempotent, so a repeated
or crashed sync is safe.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db.models import Q

from ..backends import run_namespace
from ..backends.base import Backend, BackendError, LiveRun, RunRef, backend_job_name
from ..models import Cluster, Job
from ..states import FINAL_STATES, HOLDING_STATES, LIVE_STATES

log = logging.getLogger(__name__)

# How long after its job ended a run is still looked for under the account it was submitted as.
# The sweep runs on every sync: a run left behind while the account was mapped was cancelled
# then; this covers a team mapped elsewhere just after its job ended.
RECORDED_ACCOUNTS_HORIZON = timedelta(days=1)


def judge_run(*, attempt: int, job_state: str | None, job_attempts: int) -> tuple[bool, str]:
    """``(cancel, why)`` for one live run of ``attempt`` of a job now in ``job_state`` on
    ``job_attempts`` (``job_state`` None: no such job). ``(False, "")`` means the run is the one
    the platform wants; ``(False, why)`` means leave it alone but say why it looks wrong."""
    if job_state is None:
        return False, "no such job in this database"
    if attempt < job_attempts:
        return True, f"superseded: the job is on attempt {job_attempts}"
    if attempt > job_attempts:
        return False, f"newer than the job's attempt {job_attempts}"
    if job_state in FINAL_STATES:
        return True, f"the job is {job_state}"
    if job_state not in HOLDING_STATES:
        return True, f"the job was requeued and is {job_state}"
    return False, ""


def is_jobs_run(*, live_account: str, run_account: str) -> bool:
    """Whether a live run owned by ``live_account`` is the run of a job attempt submitted as
    ``run_account`` ("" for either: the backend's own identity, which submits for every team
    and so may hold any team's run)."""
    return live_account in ("", run_account)


def job_pk_of(job_id: str, namespace: str) -> int | None:
    """Our job's primary key from a run's job id (``<run_namespace><pk>``), else None."""
    if not job_id.startswith(namespace):
        return None
    rest = job_id[len(namespace) :]
    return int(rest) if rest.isascii() and rest.isdigit() else None


def recorded_accounts(*, cluster: Cluster, now: datetime) -> set[str]:
    """The accounts the platform recorded its runs on ``cluster`` as (``Job.backend_accounts``)
    for the jobs whose runs may still be alive: those not over, and those over for less than
    :data:`RECORDED_ACCOUNTS_HORIZON`. One query."""
    rows = (
        Job.objects.filter(cluster=cluster)
        .filter(Q(state__in=LIVE_STATES) | Q(finished_at__gte=now - RECORDED_ACCOUNTS_HORIZON))
        .exclude(backend_accounts={})
        .order_by()
        .values_list("backend_accounts", flat=True)
    )
    return {account for accounts in rows for account in accounts.values() if account}


def _recorded_accounts_when_read(*, cluster: Cluster, now: datetime) -> Iterator[str]:
    # Read only when the backend iterates it: one whose runs are all its own (simulated,
    # Kubernetes, Slurm without team_accounts) ignores the accounts, and every run records
    # one ("" for the backend's own identity), so the query would read every live job's row
    # on every sync for nothing.
    yield from recorded_accounts(cluster=cluster, now=now)


def cancel_stale_runs(
    *, cluster: Cluster, backend: Backend, now: datetime
) -> list[tuple[str, int, str]]:
    """Cancel the cluster's live runs the platform no longer wants (see the module docstring);
    return ``(job_id, attempt, why)`` of each one cancelled. A backend error is logged and ends
    this pass; the next sync tries again."""
    namespace = run_namespace(cluster)
    try:
        runs = backend.live_runs(namespace, _recorded_accounts_when_read(cluster=cluster, now=now))
    except BackendError as exc:
        log.warning("cluster %s: cannot list live runs: %s", cluster.name, exc)
        return []
    ours: dict[int, list[LiveRun]] = {}
    for live in runs:
        pk = job_pk_of(live.job_id, namespace)
        if pk is not None:
            ours.setdefault(pk, []).append(live)
    if not ours:
        return []
    jobs = {
        pk: (state, attempts, team, accounts or {})
        for pk, state, attempts, team, accounts in Job.objects.filter(pk__in=ours).values_list(
            "pk", "state", "attempts", "team__slug", "backend_accounts"
        )
    }
    cancelled = []
    for pk, job_runs in sorted(ours.items()):
        state, attempts, team, accounts = jobs.get(pk, (None, 0, "", {}))
        for live in sorted(job_runs):
            job_id, attempt = live.job_id, live.attempt
            # The account the attempt was submitted as; for one recorded without any (submitted
            # before accounts were recorded) or as the backend's own identity (""), the account
            # the team's runs are submitted as now, as the backend reads a RunRef with no
            # account. The backend's own runs are the job's either way (is_jobs_run).
            account = accounts.get(str(attempt)) or backend.team_account(team)
            if state is not None and not is_jobs_run(
                live_account=live.account, run_account=account
            ):
                continue
            cancel, why = judge_run(attempt=attempt, job_state=state, job_attempts=attempts)
            name = backend_job_name(job_id, attempt)
            if not cancel:
                if why:
                    log.warning("cluster %s: leaving run %s alone: %s", cluster.name, name, why)
                continue
            try:
                # As the job's team's run: a job of another team's account that took the
                # run's name is not cancelled (the Slurm backend with team_accounts).
                backend.cancel(RunRef(job_id, attempt, team, accounts.get(str(attempt), "")))
            except BackendError as exc:
                log.warning(
                    "cluster %s: could not cancel stale run %s: %s", cluster.name, name, exc
                )
                continue
            log.warning("cluster %s: cancelled stale run %s (%s)", cluster.name, name, why)
            cancelled.append((job_id, attempt, why))
    return cancelled
