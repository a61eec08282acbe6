"""Enforce: after the apply stage's commit, make each backend match the database.

Reads state rather than remembering what the decide step did, and every backend call is
idempotent by our job id, so a crash between commit and backend call is healed by the next
cycle, which re-issues the call:

- runs that are RUNNING in the database but not yet on their backend are submitted; one whose
  job left that attempt while it was submitted (a member's cancel) is stopped at once. What the
  submits read and write is read and written once for the whole batch (``submit_batch``); only
  the backend's calls are made job by job;
- preemption victims are asked to checkpoint, then stopped and requeued once a checkpoint is
  saved after the preemption, or when their grace ends;
- jobs that opted in are asked to checkpoint on the advised schedule.

Isolation: a backend refusal or error about one job fails that job alone
(``transitions.job_fail``, the reason in its events) and the next job is still handled; an
outage marks its cluster (``services.cluster_backend_mark``) and changes no job.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from django.db.models import Max, Q
from django.utils import timezone

from ..backends import backend_run_id, backend_run_ref, get_backend
from ..backends.base import Backend, BackendError, BackendJobSpec, BackendRejected, RunRef
from ..checkpoint_advice import advice_env, request_due_checkpoints
from ..models import Job
from ..reproducibility import AcceptedRun, attempt_records_write, policy_in_force
from ..services import cluster_backend_mark
from ..states import JobState
from ..transitions import job_fail, job_requeue
from .submit_batch import checkpoint_grace_s, run_refs_write, submit_batch_read

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django_stubs_ext import WithAnnotations

log = logging.getLogger(__name__)


class _Preempted(TypedDict):
    # When the platform preempted the victim (its latest `preempted` event); None: no event.
    preempted_at: datetime | None


def job_spec(
    job: Job,
    placement: dict[str, list[int]],
    *,
    advice: dict[str, str] | None = None,
    grace_s: int | None = None,
) -> BackendJobSpec:
    """What the backend runs for the job's current attempt. ``advice`` is the job's checkpoint
    advice and ``grace_s`` the checkpoint grace a stopped run gets (``checkpoint_grace_s``),
    when read for many jobs at once; else they are read here."""
    env = {str(k): str(v) for k, v in (job.env or {}).items()}
    if job.checkpoint_interval_s:
        env.setdefault("CHECKPOINT_INTERVAL_S", str(job.checkpoint_interval_s))
    if advice is None:
        advice = advice_env(job, placement, now=timezone.now())
    for name, value in advice.items():
        env.setdefault(name, value)
    return BackendJobSpec(
        job_id=backend_run_id(job),
        attempt=job.attempts,
        name=job.name,
        team=job.team.slug,
        image=job.image,
        command=job.command,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        placement={n: tuple(g) for n, g in sorted(placement.items())},
        env=env,
        runtime_limit_s=job.runtime_limit_s,
        checkpoint_grace_s=checkpoint_grace_s() if grace_s is None else grace_s,
        # Simulated clusters only; without it the simulated backend's default amount of work.
        service_time_s=job.simulated_duration_s,
        resume_from_s=job.checkpointed_progress_s,
    )


def reconcile(*, now: datetime) -> None:
    """Make each backend match the database. Safe to run any number of times. A refusal or an
    error about one job fails that job alone; an outage marks its cluster and changes no job."""
    # Runs that are RUNNING in the database but not yet submitted (or whose submit was lost),
    # and what their submits read, for the whole batch.
    batch = submit_batch_read()
    submitted: list[AcceptedRun] = []
    for job in batch.jobs:
        if job.cluster is None:
            continue
        try:
            backend = get_backend(job.cluster)
        except Exception as exc:  # a misconfigured cluster; the sync reports it on the cluster
            log.warning("cluster %s: no backend to submit to: %s", job.cluster.name, exc)
            continue
        try:
            spec = job_spec(
                job,
                batch.placements.get(job.pk, {}),
                advice=batch.advice.get(job.pk, {}),
                grace_s=batch.checkpoint_grace_s,
            )
            ref = backend.submit(spec)
        except BackendRejected as exc:
            # The cluster refuses this job; retrying it every cycle will not help.
            job_fail(job=job, now=now, reason=f"cluster {job.cluster.name} refused the job: {exc}")
            continue
        except BackendError as exc:
            cluster_backend_mark(cluster=job.cluster, error=f"submit failed: {exc}")
            continue
        except Exception as exc:
            # One job the backend chokes on must not keep every later job from starting.
            log.exception("submitting job %s to cluster %s raised", job.pk, job.cluster.name)
            job_fail(
                job=job,
                now=now,
                reason=f"could not be started on cluster {job.cluster.name} "
                f"({type(exc).__name__}: {exc})",
            )
            continue
        cluster_backend_mark(cluster=job.cluster)
        submitted.append(AcceptedRun(job, spec, backend, ref, backend.team_account(spec.team)))
    # The policy in force, read once for every record of the cycle (three queries each).
    policy = policy_in_force() if submitted else None
    written = run_refs_write(submitted)
    for run in submitted:
        if run.job.pk not in written:
            _stop_unwanted_run(run.job, run.backend, run.account)
    if policy is not None:
        _record_attempts(
            [run for run in submitted if run.job.pk in written], now, policy, batch.node_models()
        )
    # Preemption victims: ask for a checkpoint; stop and requeue once one is saved after the
    # preemption (nothing more to save; the GPUs are wanted), else when the grace is over.
    victims: QuerySet[WithAnnotations[Job, _Preempted]] = (
        Job.objects.filter(state=JobState.PREEMPTED)
        .select_related("team", "cluster")
        .annotate(preempted_at=Max("events__time", filter=Q(events__kind="preempted")))
    )
    for job in victims:
        try:
            stopper = get_backend(job.cluster) if job.cluster else None
        except Exception as exc:
            # As for a submission: the sync reports the cluster's misconfiguration; the victim
            # keeps its GPUs until its run can be stopped.
            log.warning("cluster %s: no backend to stop job %s: %s", job.cluster, job.pk, exc)
            continue
        saved = (
            job.last_checkpoint_at is not None
            and job.preempted_at is not None
            and job.last_checkpoint_at > job.preempted_at
        )
        try:
            if stopper is not None and job.backend_ref and not saved:
                stopper.checkpoint(backend_run_ref(job))
            if saved or (job.preempt_deadline and job.preempt_deadline <= now):
                progress = None
                if stopper is not None and job.backend_ref:
                    # No status at all when the backend cannot read the run's state: stopped
                    # all the same, with the checkpoint the platform last saw.
                    for status in stopper.poll_jobs([backend_run_ref(job)]):
                        progress = status.checkpointed_progress_s
                    stopper.cancel(backend_run_ref(job))
                job_requeue(job=job, now=now, reason="preempted", checkpointed_progress_s=progress)
        except BackendError as exc:
            if job.cluster:
                cluster_backend_mark(cluster=job.cluster, error=f"preemption failed: {exc}")
        except Exception as exc:
            log.exception("preempting job %s raised", job.pk)
            job_fail(
                job=job,
                now=now,
                reason=f"could not be stopped for preemption ({type(exc).__name__}: {exc})",
            )
    # Jobs that opted in are asked to checkpoint on the advised schedule.
    request_due_checkpoints(now=now)


def _stop_unwanted_run(job: Job, backend: Backend, account: str) -> None:
    """Stop the run just submitted for ``job``, which left that attempt since it was read (its
    member cancelled it, say, between this stage's read and the submit: the cancel had no run
    to stop yet). Without this the run held the GPUs the cancel freed until the next sync's
    stale-run sweep, which remains the fallback when the backend cannot be reached now."""
    run = RunRef(backend_run_id(job), job.attempts, job.team.slug, account)
    try:
        backend.cancel(run)
    except BackendError as exc:
        log.warning(
            "job %s: its unwanted run was not stopped (the next sync will): %s", job.pk, exc
        )
        return
    except Exception:  # as for a refusal: this job's fault must not stop the stage
        log.exception("job %s: stopping its unwanted run raised; the next sync will", job.pk)
        return
    log.info("job %s: left its attempt while its run was submitted; the run was stopped", job.pk)


def _record_attempts(
    runs: list[AcceptedRun],
    now: datetime,
    policy: dict[str, Any],
    node_models: dict[int, dict[str, str]],
) -> None:
    # Records that cannot be written must not stop the runs the cluster already accepted.
    try:
        attempt_records_write(runs=runs, now=now, policy=policy, node_models=node_models)
    except Exception:
        log.exception("the reproducibility records of %d runs were not written", len(runs))
