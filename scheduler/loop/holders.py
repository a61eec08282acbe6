"""The running jobs a sync looks at, read as plain rows.

Every sync (``scheduler.loop.observe.sync_cluster``, each cycle, under the scheduling lock)
polls the run of every job holding GPUs on the cluster, and on most syncs nearly every run is
simply still running. Building a full ``Job`` (47 columns, with its team and cluster) for each
was most of the sync's own cost: about a second per 5,000 running jobs on this VM, against a
tenth of that for the few columns the poll needs (``benchmarks/loop_observe.py``). So the sync
reads these rows, and full jobs only for the ones with news to apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..backends.base import BackendJobState, BackendJobStatus, RunRef
from ..models import Cluster, Job
from ..states import JobState

HOLDING_STATES = (JobState.RUNNING, JobState.PREEMPTED)


@dataclass(slots=True)
class Holder:
    """A job holding GPUs on the cluster, as the poll needs it."""

    pk: int
    attempts: int
    state: str
    team_slug: str
    backend_ref: str
    accounts: dict[str, str]  # Job.backend_accounts: attempt -> the account it runs as
    checkpointed_progress_s: float
    cluster_pending_since: datetime | None

    def run_id(self, namespace: str) -> str:
        return f"{namespace}{self.pk}"  # as backends.backend_run_id

    def run_ref(self, namespace: str) -> RunRef:
        """As ``backends.backend_run_ref`` of the job."""
        account = self.accounts.get(str(self.attempts), "")
        return RunRef(self.run_id(namespace), self.attempts, self.team_slug, account)


def holders_read(cluster: Cluster) -> list[Holder]:
    rows = (
        Job.objects.filter(cluster=cluster, state__in=HOLDING_STATES)
        .exclude(backend_ref="")
        .order_by("pk")
        .values_list(
            "pk",
            "attempts",
            "state",
            "team__slug",
            "backend_ref",
            "backend_accounts",
            "checkpointed_progress_s",
            "cluster_pending_since",
        )
    )
    return [
        Holder(pk, attempts, state, slug, ref, accounts or {}, progress, pending_since)
        for pk, attempts, state, slug, ref, accounts, progress, pending_since in rows
    ]


def holding_jobs(cluster: Cluster, holders: list[Holder]) -> list[Job]:
    """The full jobs of ``holders`` (with their team; ``cluster`` shared), in their order, that
    still hold GPUs on the cluster in the attempt read: news about an attempt the job has left
    since is the next sync's to read afresh."""
    read = {h.pk: h.attempts for h in holders}
    jobs = (
        Job.objects.filter(pk__in=read, cluster=cluster, state__in=HOLDING_STATES)
        .select_related("team")
        .order_by("pk")
    )
    out = []
    for job in jobs:
        if job.attempts == read[job.pk]:
            job.cluster = cluster
            out.append(job)
    return out


def has_news(holder: Holder, status: BackendJobStatus) -> bool:
    """Whether ``status`` asks anything of the job (``observe._sync_job`` would act): False
    only for a run still pending or running as the job already records it."""
    if status.state not in (BackendJobState.RUNNING, BackendJobState.PENDING):
        return True
    if status.checkpointed_progress_s is not None and (
        status.checkpointed_progress_s > holder.checkpointed_progress_s + 1e-6
    ):
        return True
    if holder.state != JobState.RUNNING:
        return False
    if status.state == BackendJobState.PENDING:
        return status.held_by_cluster  # queued by the cluster's own scheduler
    return holder.cluster_pending_since is not None  # started after waiting on the cluster
