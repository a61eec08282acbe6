"""The settings of a cluster that say where its runs live, and the refusal to change them while
runs live there.

Backends find a run by what their settings name: its name (``run_namespace``), the Slurm
partition squeue is filtered by, the host and ``slurm_conf`` the commands reach, the Kubernetes
namespace and API server the pod watcher reads, the directories a run's log and checkpoint
progress are written to. Changed while runs live, the next poll looks for each run where it is
not: the run reads as lost (UNKNOWN), the job is requeued as a new attempt, and the old run keeps
its GPUs on the cluster with nothing left that finds, polls or stops it (the stale-run sweep
asks the same wrong place). So such a change is refused while any job of the cluster holds or is
starting GPUs, or is pending again while the cluster still runs its earlier run (a requeued job
whose old run a cancel has not reached yet: the stale-run sweep stops it at the next sync, under
the settings it was started with); an admin drains or retires the cluster, waits for its jobs to
end, then changes it. Every other setting (Slurm's ``team_accounts``: a run keeps the account
recorded with it; retries, timeouts, ``dry_run``) changes as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from django.db import OperationalError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.errors import Conflict

from .backends import get_backend, run_namespace
from .backends.base import BackendError
from .locks import ADVISORY_KEY
from .loop.stale_runs import job_pk_of, recorded_accounts
from .models import Cluster, Job
from .states import HOLDING_STATES, JobState

# Per backend kind, the settings that say where its runs are (besides the kind itself and every
# kind's run_namespace). Slurm: the controller the commands reach (slurm_conf, command_prefix),
# the partition every squeue and scancel is filtered by, and the directories its runs' logs and
# checkpoint progress are written to (the job script has them built in). Kubernetes: the API
# server (host, in_cluster, kubeconfig, context) and the namespace of the pods.
RUN_LOCATING_SETTINGS: dict[str, tuple[str, ...]] = {
    "simulated": ("run_namespace",),
    "slurm": (
        "command_prefix",
        "job_workdir",
        "log_dir",
        "partition",
        "run_namespace",
        "slurm_conf",
    ),
    "kubernetes": ("context", "host", "in_cluster", "kubeconfig", "namespace", "run_namespace"),
}

# How long a change waits for a running scheduling cycle to end before it is refused.
CYCLE_WAIT_S = 20


def run_locating_changes(
    old_kind: str, old_config: Mapping[str, Any], new_kind: str, new_config: Mapping[str, Any]
) -> list[str]:
    """The settings that say where runs live (``RUN_LOCATING_SETTINGS``) that differ between
    the old and the new configuration, sorted; ``["backend_kind"]`` when the kind changes. A
    setting left out and one set empty are the same (the backends read both as unset)."""
    if old_kind != new_kind:
        return ["backend_kind"]
    keys = RUN_LOCATING_SETTINGS.get(new_kind, ("run_namespace",))
    return [key for key in keys if (old_config.get(key) or None) != (new_config.get(key) or None)]


def cluster_backend_change_check(
    *, cluster: Cluster, backend_kind: str, backend_config: Mapping[str, Any]
) -> None:
    """Refuse (``Conflict``, 409, on ``backend_kind`` or ``backend_config``) to change where
    ``cluster``'s runs live while any of its jobs holds or is starting GPUs (running, including
    submitted but not yet confirmed, or preempted and stopping), or is pending while the
    cluster still runs its earlier run (asked of the backend when such a job exists; refused
    too when the backend cannot answer); the message names the settings and the number of jobs
    and says to drain or retire first. Returns without a word for any other change.

    Call it inside the transaction that saves the change. For a change it refuses while no job
    runs, it holds the scheduling loop's lock until that transaction ends (waiting up to
    ``CYCLE_WAIT_S`` for a running cycle, then refusing), so no cycle starts a job under the old
    settings between this check and the save."""
    stored = Cluster.objects.filter(pk=cluster.pk).values("backend_kind", "backend_config").first()
    if stored is None:  # a cluster being created: no runs anywhere yet
        return
    changed = run_locating_changes(
        stored["backend_kind"], stored["backend_config"] or {}, backend_kind, backend_config or {}
    )
    if not changed:
        return
    what = "the backend kind" if changed == ["backend_kind"] else ", ".join(changed)
    field = "backend_kind" if changed == ["backend_kind"] else "backend_config"
    with transaction.atomic():
        _hold_the_loop_until_commit(cluster)
        live = Job.objects.filter(cluster_id=cluster.pk, state__in=HOLDING_STATES).count()
        try:
            stopping = _requeued_with_a_live_run(cluster.pk)
        except BackendError as exc:
            if live:  # refused all the same, for the jobs holding GPUs
                stopping = 0
            else:
                _refuse_unanswered(cluster, what, field, exc)
    if not live and not stopping:
        return
    holding = ""
    if live:
        jobs = "1 job holds" if live == 1 else f"{live} jobs hold"
        holding = f"{jobs} or {'is' if live == 1 else 'are'} starting GPUs"
    if stopping:
        runs = "1 job's earlier run is" if stopping == 1 else f"{stopping} jobs' earlier runs are"
        holding += f"{' and ' if holding else ''}{runs} still being stopped"
    raise Conflict(
        f"{what} cannot change while {holding} on cluster {cluster.name}: the platform would "
        "look for their runs where they are not, requeue the jobs and leave the old runs "
        "holding their GPUs. Drain the cluster's nodes or retire the cluster, wait for its "
        "jobs to end, then change it",
        field=field,
    )


def _refuse_unanswered(cluster: Cluster, what: str, field: str, exc: BackendError) -> NoReturn:
    # No answer is no proof that the runs are gone: the admin tries again when there is one.
    requeued = _requeued(cluster.pk).count()
    jobs = "1 requeued job" if requeued == 1 else f"{requeued} requeued jobs"
    raise Conflict(
        f"{what} cannot change while cluster {cluster.name} cannot say whether the earlier runs "
        f"of its {jobs} still live ({exc}): a run that does would be left holding its GPUs "
        "with nothing that finds or stops it. Try again when the cluster answers",
        field=field,
    ) from exc


def _requeued(cluster_id: int) -> QuerySet[Job]:
    # Pending again after a run on this cluster: a job keeps the cluster it last ran on.
    return Job.objects.filter(cluster_id=cluster_id, state=JobState.PENDING, attempts__gte=1)


def _requeued_with_a_live_run(cluster_id: int) -> int:
    """How many pending jobs of the cluster it still runs an earlier run of, as the stale-run
    sweep lists them (``Backend.live_runs`` under the stored settings). Only asked when such a
    job exists, so a cluster whose backend is down or misconfigured can be changed while no
    job could have a run left there; a backend that cannot be built from the stored settings
    finds no run either (nor does the loop), so it counts none. BackendError propagates."""
    pending = set(_requeued(cluster_id).values_list("pk", flat=True))
    if not pending:
        return 0
    stored = Cluster.objects.get(pk=cluster_id)
    try:
        backend = get_backend(stored)
    except (ValueError, TypeError):
        return 0
    namespace = run_namespace(stored)
    runs = backend.live_runs(namespace, recorded_accounts(cluster=stored, now=timezone.now()))
    return len({job_pk_of(run.job_id, namespace) for run in runs} & pending)


def _hold_the_loop_until_commit(cluster: Cluster) -> None:
    """Take the scheduling loop's lock (``scheduler.locks``) for the rest of the transaction:
    a cycle that started a job now would submit it under the settings about to be replaced.
    The embedded SQLite demo runs one process, whose cycles run between requests."""
    if connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # A transaction-level lock on the loop's key: the loop's session-level try-lock
            # fails while it is held, and it is released at commit or rollback.
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{CYCLE_WAIT_S}s"])
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_KEY])
            cursor.execute("SET LOCAL lock_timeout TO DEFAULT")
    except OperationalError as exc:
        raise Conflict(
            f"a scheduling cycle has been running for over {CYCLE_WAIT_S} s; try the change "
            f"of cluster {cluster.name} again in a moment",
            field="backend_config",
        ) from exc
