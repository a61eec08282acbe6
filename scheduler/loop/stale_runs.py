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
backup). Each cancel is idempotent, so a repeated or crashed sync is safe.
"""

from __future__ import annotations

import logging

from ..backends import run_namespace
from ..backends.base import Backend, BackendError, RunRef, backend_job_name
from ..models import Job
from ..states import FINAL_STATES, HOLDING_STATES

log = logging.getLogger(__name__)


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


def job_pk_of(job_id: str, namespace: str) -> int | None:
    """Our job's primary key from a run's job id (``<run_namespace><pk>``), else None."""
    if not job_id.startswith(namespace):
        return None
    rest = job_id[len(namespace) :]
    return int(rest) if rest.isascii() and rest.isdigit() else None


def cancel_stale_runs(*, cluster, backend: Backend) -> list[tuple[str, int, str]]:
    """Cancel the cluster's live runs the platform no longer wants (see the module docstring);
    return ``(job_id, attempt, why)`` of each one cancelled. A backend error is logged and ends
    this pass; the next sync tries again."""
    namespace = run_namespace(cluster)
    try:
        runs = backend.live_runs(namespace)
    except BackendError as exc:
        log.warning("cluster %s: cannot list live runs: %s", cluster.name, exc)
        return []
    ours: dict[int, list[tuple[str, int]]] = {}
    for job_id, attempt in runs:
        pk = job_pk_of(job_id, namespace)
        if pk is not None:
            ours.setdefault(pk, []).append((job_id, attempt))
    if not ours:
        return []
    jobs = {
        pk: (state, attempts, team)
        for pk, state, attempts, team in Job.objects.filter(pk__in=ours).values_list(
            "pk", "state", "attempts", "team__slug"
        )
    }
    cancelled = []
    for pk, job_runs in sorted(ours.items()):
        state, attempts, team = jobs.get(pk, (None, 0, ""))
        for job_id, attempt in sorted(job_runs):
            cancel, why = judge_run(attempt=attempt, job_state=state, job_attempts=attempts)
            name = backend_job_name(job_id, attempt)
            if not cancel:
                if why:
                    log.warning("cluster %s: leaving run %s alone: %s", cluster.name, name, why)
                continue
            try:
                # As the job's team's run: a job of another team's account that took the
                # run's name is not cancelled (the Slurm backend with team_accounts).
                backend.cancel(RunRef(job_id, attempt, team))
            except BackendError as exc:
                log.warning(
                    "cluster %s: could not cancel stale run %s: %s", cluster.name, name, exc
                )
                continue
            log.warning("cluster %s: cancelled stale run %s (%s)", cluster.name, name, why)
            cancelled.append((job_id, attempt, why))
    return cancelled
