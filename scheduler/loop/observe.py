"""Observe: what the backends report, and live rows no engine can read, written to the database.

Runs inside the scheduling lock (``cycle.run_cycle`` calls it first). Every step is a conditional update, so a sync repeated after a crash is
safe.

Fault tolerance:
- A node the backend reports down gets a ``failed`` node event; its jobs are requeued to resume
  from their last checkpoint (lost work recorded) ahead of their peers (``requeued`` jobs).
- A node failing ``SCHEDULER_QUARANTINE_FAILURES`` times within
  ``SCHEDULER_QUARANTINE_WINDOW_SECONDS`` is quarantined (drained on the backend) when it comes
  back, with a probation of ``SCHEDULER_PROBATION_SECONDS``; after probation and a health check
  it is released. Each step is an event streamed to admins.
- A run recorded without the account it runs as (submitted before the platform recorded
  them) learns it from the cluster before the poll (``run_accounts``).
- Runs the platform gave up on (an older attempt, a job that is over or requeued) and that the
  cluster still runs are cancelled (``stale_runs``).
- A running job whose run the cluster keeps waiting (Slurm PENDING) is noted, and put back in
  the queue, its run cancelled and nothing billed, after a grace (``cluster_pending``).
- Finished runs a backend keeps (Kubernetes pods and Services) are deleted once they have been
  finished longer than the backend's retention (``finished_run_ttl_s``).
- Only node-down reports count against a node. A job that exits with an error is the job's
  failure, never the node's, so a job failing on node after node quarantines nothing.

Isolation: a backend error about one job (its status cannot be computed, applying it raises)
fails that job alone, with the reason in its events; an error about one cluster marks that
cluster unavailable and the others are still observed. A live job whose numbers break the
bounds the Job model declares is failed before the snapshot (``fail_jobs_out_of_bounds``).
Nothing one job or one cluster does stops the cycle for everyone.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from core import streams
from core.bounds import bounds, number_error

from ..backends import backend_run_ref, get_backend, run_namespace
from ..backends.base import Backend, BackendError, BackendJobState, BackendJobStatus, BackendNode
from ..models import Allocation, Cluster, Job, Node, NodeEvent, NodeState
from ..services import cluster_backend_mark, node_event_record
from ..states import LIVE_STATES, JobState
from ..transitions import event_record, job_fail, job_finish, job_requeue
from .cluster_pending import sync_cluster_pending
from .holders import Holder, has_news, holders_read, holding_jobs
from .run_accounts import learn_run_accounts
from .stale_runs import cancel_stale_runs

log = logging.getLogger(__name__)


def sync_all(*, now: datetime | None = None) -> None:
    # A retired cluster runs nothing and is no longer asked (scheduler.retirement); a retiring
    # one is, until its last job ends.
    for cluster in Cluster.objects.filter(enabled=True, retired_at__isnull=True):
        try:
            sync_cluster(cluster, now=now or timezone.now())
        except Exception as exc:  # one cluster's fault must not hide the others' news
            log.exception("sync of cluster %s raised", cluster.name)
            cluster_backend_mark(cluster=cluster, error=f"sync failed: {type(exc).__name__}: {exc}")


def sync_cluster(cluster: Cluster, *, now: datetime) -> None:
    try:
        backend = get_backend(cluster)
    except (ValueError, TypeError, BackendError) as exc:
        # A misconfigured cluster must not stop the loop for the others.
        cluster_backend_mark(cluster=cluster, error=f"backend configuration error: {exc}")
        log.error("cluster %s: cannot build its backend: %s", cluster.name, exc)
        return
    try:
        backend_nodes = {n.name: n for n in backend.list_nodes()}
        holders = holders_read(cluster)
        namespace = run_namespace(cluster)
        try:
            # Before the poll, which must look for each run as the account that owns it.
            _learn_run_accounts(cluster, backend, holders)
        except BackendError:
            raise
        except Exception:  # the runs are then looked for as before: no reason to stop the sync
            log.exception("cluster %s: learning the accounts of runs raised", cluster.name)
        try:
            polled = backend.poll_jobs([h.run_ref(namespace) for h in holders])
        except BackendError:
            raise
        except Exception:
            # Something about one run broke the batch: ask run by run, failing only the jobs
            # whose status cannot be had.
            log.exception("polling cluster %s raised; polling its runs one by one", cluster.name)
            polled = _poll_each(backend, holding_jobs(cluster, holders), now)
        statuses = {(s.job_id, s.attempt): s for s in polled}
    except BackendError as exc:
        # Jobs keep their state; the cluster shows as unavailable until the backend answers.
        cluster_backend_mark(cluster=cluster, error=str(exc) or exc.__class__.__name__)
        log.warning("backend of cluster %s unavailable: %s", cluster.name, exc)
        return
    cluster_backend_mark(cluster=cluster)
    # What the poll reported was true when it was read, after the pass began: a checkpoint
    # written meanwhile is dated no earlier than it happened, so lost work is never understated.
    now = max(now, timezone.now())
    _sync_nodes(cluster, backend_nodes, now)
    news = {}
    for holder in holders:
        status = statuses.get((holder.run_id(namespace), holder.attempts))
        if status is not None and has_news(holder, status):
            news[holder.pk] = (holder, status)
    for job in holding_jobs(cluster, [holder for holder, _ in news.values()]):
        status = news[job.pk][1]
        try:
            _sync_job(job, status, now)
        except Exception as exc:
            log.exception("applying the backend's news about job %s raised", job.pk)
            job_fail(
                job=job,
                now=now,
                reason=f"its status from cluster {cluster.name} could not be applied "
                f"({type(exc).__name__}: {exc})",
            )
    # After the jobs above: a run this pass just requeued is already stale here.
    steps = (
        (
            "cancelling stale runs",
            lambda: cancel_stale_runs(cluster=cluster, backend=backend, now=now),
        ),
        ("purging finished runs", lambda: _purge_finished_runs(cluster, backend)),
        ("releasing after probation", lambda: _release_after_probation(cluster, backend, now)),
        ("sampling utilization", lambda: _publish_utilization(cluster, backend)),
    )
    for what, step in steps:
        try:
            step()
        except BackendError as exc:
            log.warning("cluster %s: %s failed: %s", cluster.name, what, exc)
        except Exception:
            log.exception("cluster %s: %s raised", cluster.name, what)


def _learn_run_accounts(cluster: Cluster, backend: Backend, holders: list[Holder]) -> None:
    """``learn_run_accounts`` for the holders whose attempt records no account (runs from
    before accounts were recorded: rare), their rows updated with what was learnt."""
    unrecorded = [h for h in holders if str(h.attempts) not in h.accounts]
    if not unrecorded:
        return
    jobs = holding_jobs(cluster, unrecorded)
    learn_run_accounts(backend=backend, jobs=jobs)
    learnt = {job.pk: job.backend_accounts or {} for job in jobs}
    for holder in unrecorded:
        holder.accounts = learnt.get(holder.pk, holder.accounts)


def _poll_each(backend: Backend, holders: list[Job], now: datetime) -> list[BackendJobStatus]:
    """Statuses of ``holders`` asked one run at a time; a job whose own status raises is failed
    (its run stopped), the others are returned. A backend outage still raises BackendError."""
    statuses: list[BackendJobStatus] = []
    for job in holders:
        try:
            statuses.extend(backend.poll_jobs([backend_run_ref(job)]))
        except BackendError:
            raise
        except Exception as exc:
            log.exception("polling job %s raised", job.pk)
            job_fail(
                job=job,
                now=now,
                reason="the cluster could not report the run's status "
                f"({type(exc).__name__}: {exc}); it was stopped",
            )
    return statuses


def _sync_job(job: Job, status: BackendJobStatus, now: datetime) -> None:
    if status.checkpointed_progress_s is not None and (
        status.checkpointed_progress_s > job.checkpointed_progress_s + 1e-6
    ):
        Job.objects.filter(pk=job.pk).update(
            checkpointed_progress_s=status.checkpointed_progress_s, last_checkpoint_at=now
        )
        job.last_checkpoint_at = now
        job.checkpointed_progress_s = status.checkpointed_progress_s
        event_record(
            job=job,
            kind="checkpoint",
            time=now,
            message=f"checkpoint at {status.checkpointed_progress_s:.0f} s of work",
        )
    if sync_cluster_pending(job, status, now):
        return
    if status.state in (BackendJobState.SUCCEEDED, BackendJobState.FAILED):
        target = (
            JobState.SUCCEEDED if status.state == BackendJobState.SUCCEEDED else JobState.FAILED
        )
        job_finish(
            job=job, target=target, now=now, exit_code=status.exit_code, message=status.reason
        )
    elif status.state == BackendJobState.NODE_FAILED:
        job_requeue(
            job=job,
            now=now,
            reason=f"node failure ({status.reason or 'node lost'})",
            checkpointed_progress_s=status.checkpointed_progress_s,
        )
    elif status.state == BackendJobState.INTERRUPTED:
        # The cluster's own scheduler stopped it (Slurm preemption): lost work, not the job's
        # end, and not the node's fault.
        job_requeue(
            job=job,
            now=now,
            reason=status.reason or "interrupted by the cluster",
            checkpointed_progress_s=status.checkpointed_progress_s,
        )
    elif status.state == BackendJobState.UNKNOWN and job.state == JobState.RUNNING:
        # The backend lost the run (e.g. restarted without state): run it again from the
        # checkpoint rather than leave GPUs held by a ghost.
        job_requeue(
            job=job,
            now=now,
            reason="the backend has no record of the run",
            checkpointed_progress_s=job.checkpointed_progress_s,
        )
    elif status.state == BackendJobState.CANCELLED and job.state == JobState.RUNNING:
        # Someone stopped it on the cluster itself (a site admin's scancel): a cancel, as Slurm
        # records it, not a failure to retry.
        message = "cancelled on the cluster, outside the platform"
        job_finish(
            job=job,
            target=JobState.CANCELLED,
            now=now,
            message=f"{message} ({status.reason})" if status.reason else message,
        )


def _purge_finished_runs(cluster: Cluster, backend: Backend) -> None:
    """Let backends that keep finished runs around (Kubernetes pods, kept for their logs) delete
    those finished long enough ago. Runs after this pass recorded every polled run's final
    state, so nothing is deleted before the platform knows how it ended; a failure only
    postpones the cleanup to the next pass."""
    purge = getattr(backend, "purge_finished", None)
    if purge is None:
        return
    try:
        purged = purge()
    except BackendError as exc:
        log.info("cluster %s: purging finished runs failed (retried next pass): %s", cluster, exc)
        return
    if purged:
        log.info("cluster %s: purged %d finished run(s): %s", cluster, len(purged), purged[:10])


def _node_event(node: Node, kind: str, message: str, now: datetime) -> None:
    node_event_record(node=node, kind=kind, message=message, now=now)


_SERVICE_FIELDS = ["state", "state_reason", "resume_state", "resume_reason"]


def _sync_nodes(cluster: Cluster, backend_nodes: dict[str, BackendNode], now: datetime) -> None:
    window = timedelta(seconds=settings.SCHEDULER_QUARANTINE_WINDOW_SECONDS)
    # A retired node is out of service for good (scheduler.retirement): what the backend says
    # of it (down, back, or gone) changes nothing until an admin reinstates it.
    for node in Node.objects.filter(cluster=cluster).exclude(state=NodeState.RETIRED):
        seen = backend_nodes.get(node.name)
        if seen is None:
            continue
        if seen.state == "down" and node.state != NodeState.DOWN:
            # A drained or quarantined node keeps that state to return to, read in the same
            # UPDATE that marks it down (so an admin's drain committed just before is kept).
            held = Q(state__in=[NodeState.DRAINING, NodeState.QUARANTINED])
            with transaction.atomic():
                if (
                    not Node.objects.filter(pk=node.pk)
                    .exclude(state=NodeState.DOWN)
                    .update(
                        state=NodeState.DOWN,
                        # The cluster's reason may be any length (an admin's text, a health
                        # check's output); the column keeps 300 characters.
                        state_reason=(seen.reason or "node failure")[:300],
                        resume_state=Case(When(held, then=F("state")), default=Value("")),
                        resume_reason=Case(When(held, then=F("state_reason")), default=Value("")),
                    )
                ):
                    continue
                # The hold was decided by the UPDATE, not from this (possibly stale) copy; read
                # back, so the node.status of the failure tells views what it comes back as.
                node.refresh_from_db(fields=_SERVICE_FIELDS)
                _node_event(node, NodeEvent.Kind.FAILED, seen.reason or "node failure", now)
            _requeue_jobs_on(node, now)
        elif seen.state != "down" and node.state == NodeState.DOWN and node.resume_state:
            # Back, but an admin (or a health rule) had taken it out: it stays out, as it was
            # left, until released; its failures quarantine nothing more. Only while it still
            # holds one: a release committed since it was read leaves it to come back ready.
            if (
                Node.objects.filter(pk=node.pk, state=NodeState.DOWN)
                .exclude(resume_state="")
                .update(
                    state=F("resume_state"),
                    state_reason=F("resume_reason"),
                    resume_state="",
                    resume_reason="",
                )
            ):
                node.refresh_from_db(fields=_SERVICE_FIELDS)
                _node_event(
                    node, NodeEvent.Kind.RECOVERED, f"node is back, still {node.state}", now
                )
        elif seen.state != "down" and node.state == NodeState.DOWN:
            failures = NodeEvent.objects.filter(
                node=node, kind=NodeEvent.Kind.FAILED, time__gte=now - window
            ).count()
            if failures >= settings.SCHEDULER_QUARANTINE_FAILURES:
                node_quarantine_auto(node, now=now, failures=failures)
            # Only if no admin drained or quarantined it since it was read: that hold is what
            # it comes back to, the next pass.
            elif Node.objects.filter(pk=node.pk, state=NodeState.DOWN, resume_state="").update(
                state=NodeState.READY, state_reason=""
            ):
                node.state = NodeState.READY
                _node_event(node, NodeEvent.Kind.RECOVERED, "node is back", now)
        elif seen.state == "ready" and node.state in (NodeState.DRAINING, NodeState.QUARANTINED):
            # Taken out here but not on the backend: the drain asked for then failed (the
            # backend unreachable for a moment, or Slurm refusing an account below its Admin
            # level). Ask again each pass, so the backend stops scheduling it too.
            _drain_on_backend(node, node.state_reason)
        _sync_cluster_hold(node, seen, now)


def _cluster_hold(node: Node, seen: BackendNode) -> str:
    """Why the backend keeps new work off a node the platform has ready, or ""."""
    if node.state != NodeState.READY:
        return ""  # the platform's own hold, or down: those say more
    if seen.state in ("drained", "draining"):
        return f"drained on the cluster: {seen.reason or 'no reason given'}"[:300]
    if seen.reserved:
        return f"reserved on the cluster: {seen.reserved}"[:300]
    return ""


def _sync_cluster_hold(node: Node, seen: BackendNode, now: datetime) -> None:
    """A node the backend holds out of service by itself (a site admin's drain, an active
    reservation) takes no new work here either, until the backend lets it go: a run placed
    there would wait in the backend's queue while the platform counted it as running."""
    hold = _cluster_hold(node, seen)
    if hold == node.cluster_hold:
        return
    with transaction.atomic():
        # A node deleted since it was read (an admin removing one just imported) has no hold to
        # record; one updated stays locked, so not deleted, until its event is written.
        if not Node.objects.filter(pk=node.pk).update(cluster_hold=hold):
            return
        node.cluster_hold = hold
        if hold:
            _node_event(node, NodeEvent.Kind.DRAINED, f"held by the cluster: {hold}", now)
        elif node.state == NodeState.READY:  # else the platform's own hold or an outage did
            _node_event(node, NodeEvent.Kind.RECOVERED, "the cluster let it go", now)


def _requeue_jobs_on(node: Node, now: datetime) -> None:
    jobs = (
        Job.objects.filter(
            allocations__node=node,
            allocations__ended_at__isnull=True,
            state__in=[JobState.RUNNING, JobState.PREEMPTED],
        )
        .select_related("team", "cluster")
        .distinct()
    )
    for job in jobs:
        progress = None
        if job.cluster and job.backend_ref:
            backend = get_backend(job.cluster)
            try:
                # No status at all when the backend cannot read the run's state.
                for status in backend.poll_jobs([backend_run_ref(job)]):
                    progress = status.checkpointed_progress_s
                backend.cancel(backend_run_ref(job))  # the gang's other workers stop too
            except BackendError:
                log.warning("could not stop job %s after node failure", job.pk, exc_info=True)
        job_requeue(
            job=job, now=now, reason=f"node {node.name} failed", checkpointed_progress_s=progress
        )


def node_quarantine_auto(node: Node, *, now: datetime, failures: int) -> None:
    """Quarantine a down node that failed too often as it comes back; it is released after
    probation. Nothing changes if it is no longer down without a hold (an admin drained or
    quarantined it since it was read)."""
    until = now + timedelta(seconds=settings.SCHEDULER_PROBATION_SECONDS)
    reason = f"failed {failures} times within {settings.SCHEDULER_QUARANTINE_WINDOW_SECONDS:.0f} s"
    with transaction.atomic():
        if not Node.objects.filter(pk=node.pk, state=NodeState.DOWN, resume_state="").update(
            state=NodeState.QUARANTINED, state_reason=reason, probation_until=until
        ):
            return
        node.state, node.state_reason, node.probation_until = NodeState.QUARANTINED, reason, until
        _node_event(node, NodeEvent.Kind.QUARANTINED, reason, now)
        _node_event(
            node, NodeEvent.Kind.PROBATION, f"probation until {until:%Y-%m-%d %H:%M:%S} UTC", now
        )
    _drain_on_backend(node, reason)


def _drain_on_backend(node: Node, reason: str) -> None:
    cluster = node.cluster
    try:
        get_backend(cluster).drain_node(node.name, reason)
    except BackendError as exc:
        log.warning("could not drain %s on the backend (asked again next pass): %s", node.name, exc)


def _release_after_probation(cluster: Cluster, backend: Backend, now: datetime) -> None:
    min_health = getattr(settings, "SCHEDULER_RELEASE_MIN_HEALTH", 0.5)
    # A retiring node stays out of service after its probation: it is leaving.
    for node in Node.objects.filter(
        cluster=cluster,
        state=NodeState.QUARANTINED,
        probation_until__lte=now,
        retiring_since__isnull=True,
    ):
        if node.health < min_health:
            continue  # the health check before release failed; stays quarantined
        try:
            backend.undrain_node(node.name)
        except BackendError:
            continue
        if Node.objects.filter(pk=node.pk, state=NodeState.QUARANTINED).update(
            state=NodeState.READY, state_reason="", probation_until=None
        ):
            node.state = NodeState.READY
            _node_event(node, NodeEvent.Kind.RELEASED, "probation passed, health check ok", now)


def _publish_utilization(cluster: Cluster, backend: Backend) -> None:
    sampler = getattr(backend, "gpu_utilization", None)
    if sampler is None:
        return
    busy: dict[str, list[int]] = {}
    # From the allocations side: a node without any (its LEFT JOIN's ended_at is NULL too) is
    # idle and must not be sampled.
    for name, gpu in Allocation.objects.filter(
        node__cluster=cluster, ended_at__isnull=True
    ).values_list("node__name", "gpu_index"):
        busy.setdefault(name, []).append(gpu)
    samples = sampler(busy)
    if not samples:
        return
    # One message for the whole cluster, to the sockets showing the cluster view only.
    payload: streams.ClusterUtilizationPayload = {
        "type": "cluster.utilization",
        "nodes": samples,
        "time": timezone.now().isoformat(),
    }
    streams.publish(streams.UTILIZATION_GROUP, dict(payload))


@cache
def _bounded_job_fields() -> tuple[tuple[str, object, object], ...]:
    """The Job fields with declared bounds (core.bounds), with their bounds."""
    found = []
    for model_field in Job._meta.concrete_fields:
        try:
            lo, hi = bounds(Job, model_field.name)
        except ImproperlyConfigured:
            continue
        found.append((model_field.name, lo, hi))
    return tuple(found)


def fail_jobs_out_of_bounds(*, now: datetime) -> list[int]:
    """Fail every live job whose numbers break the bounds the Job model declares, naming the
    field; returns their ids.

    Submissions are checked against the same bounds, so only rows written around the services
    (before the bounds existed, a manual UPDATE) are caught here; one such row used to overflow
    date arithmetic in every cycle until someone cancelled it. One query whatever the queue's
    size (PostgreSQL also sorts NaN above every bound)."""
    condition = Q()
    for name, lo, hi in _bounded_job_fields():
        condition |= Q(**{f"{name}__lt": lo}) | Q(**{f"{name}__gt": hi})
    failed = []
    for job in Job.objects.filter(state__in=list(LIVE_STATES)).filter(condition):
        problems = []
        for name, _lo, _hi in _bounded_job_fields():
            value = getattr(job, name)
            if value is not None and (problem := number_error(Job, name, value)):
                problems.append(f"{name} {problem} (it is {value!r})")
        reason = "the platform cannot run this job: " + "; ".join(problems or ["bad numbers"])
        if job_fail(job=job, reason=reason + "; submit it again with valid values", now=now):
            failed.append(job.pk)
    return failed
