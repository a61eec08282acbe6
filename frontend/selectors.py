"""Reads that shape the portal's pages. Each takes the user and starts from a scoped queryset.

Guarantees:
- Another team's job is never named here: on the cluster grid a GPU held by a job the caller cannot
  see is only "in use" (no job id, name, team or submitter).
- Every function runs a fixed number of queries, whatever the size of the cluster or job list.
- The backend's log tail is best effort: a backend that is down yields a message, never an error.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Count, F, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from catalogue.models import GpuModel
from scheduler import selectors as scheduler_selectors
from scheduler.models import Allocation, Cluster, Job, Node, NodeEvent, NodeState
from scheduler.states import HOLDING_STATES, JobState
from tenants.models import SUBMIT_ROLES, Membership, PriorityClass, Quota, Team
from tenants.permissions import is_platform_admin, team_ids_of, visible_teams
from tenants.tree import TeamTree

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from .routing_admin import ClusterFacts

log = logging.getLogger(__name__)

FREE = "free"
IN_USE = "in use"


@dataclass(frozen=True)
class ArrayHeader:
    """What a job table's array header row shows: name, size and members' count per state."""

    id: int
    name: str
    size: int
    counts: list[tuple[str, str, int]]  # (state, label, count), non-zero counts only


def attach_array_headers(*, user: User | AnonymousUser, jobs: list[Job]) -> None:
    """Set ``job.array_header`` on each listed array member (ONE query for all the arrays the
    list touches, scoped to the caller like every array read), for ``_array_group.html``."""
    from scheduler.arrays import array_counts, array_list

    ids = {job.array_id for job in jobs if job.array_id}
    if not ids:
        return
    labels = dict(JobState.choices)
    headers = {}
    for array in array_list(user=user).filter(pk__in=ids):
        counts = array_counts(array)
        headers[array.pk] = ArrayHeader(
            id=array.pk,
            name=array.name,
            size=array.size,
            counts=[(state, labels[state], n) for state, n in counts.items() if n],
        )
    for job in jobs:
        if job.array_id:
            # A page-only attribute the model does not declare (as scheduler/api/views.py sets
            # live_allocations): _array_group.html reads it.
            job.array_header = headers.get(job.array_id)  # type: ignore[attr-defined]


def submit_teams(*, user: User | AnonymousUser) -> QuerySet[Team]:
    """Teams the caller may submit jobs to (member roles and up; every team for admins)."""
    if is_platform_admin(user):
        return Team.objects.order_by("slug")
    if not user.is_authenticated:
        return Team.objects.none()
    team_ids = Membership.objects.filter(user=user, role__in=SUBMIT_ROLES).values("team_id")
    return Team.objects.filter(pk__in=team_ids).order_by("slug")


def filter_teams(*, user: User | AnonymousUser) -> QuerySet[Team]:
    """Teams whose jobs the caller may list (for the job list's team filter)."""
    return visible_teams(user).order_by("slug")


def gpu_models() -> QuerySet[GpuModel]:
    """Every GPU model (a shared catalogue, like the API's /gpu-models/)."""
    return GpuModel.objects.order_by("name")


def clusters() -> QuerySet[Cluster]:
    """The enabled clusters a job may name in its routing (a shared catalogue, like the API's
    /clusters/)."""
    # A retired or retiring cluster takes no new job (scheduler.retirement).
    return Cluster.objects.filter(enabled=True, retiring_since__isnull=True).order_by("name")


def priority_classes() -> QuerySet[PriorityClass]:
    """Every priority class, highest first."""
    return PriorityClass.objects.order_by("-value")


def home_teams(*, user: User | AnonymousUser) -> set[int]:
    """The teams the home page summarises: the caller's memberships (all teams for an admin with
    none)."""
    ids = team_ids_of(user)
    if not ids and is_platform_admin(user):
        ids = set(Team.objects.values_list("pk", flat=True))
    return ids


@dataclass(frozen=True)
class QuotaUse:
    team: str
    gpu_model: str
    guaranteed: int | None  # None: the team has no quota of its own for the model
    borrow_limit: int | None
    in_use: int
    pending: int
    # Without a quota of its own, the nearest ancestor whose quota for the model counts the team's
    # GPUs (rule 1c), or "" when none does and the model is not limited for the team.
    counted_under: str = ""

    @property
    def ceiling(self) -> int | None:
        if self.guaranteed is None or self.borrow_limit is None:
            return None
        return self.guaranteed + self.borrow_limit

    @property
    def percent_of_guarantee(self) -> int | None:
        if self.guaranteed is None:
            return None
        if not self.guaranteed:
            return 100 if self.in_use else 0
        return round(100 * self.in_use / self.guaranteed)


def quota_use(*, user: User | AnonymousUser) -> list[QuotaUse]:
    """Per (team, GPU model) of the caller's teams: the quota, GPUs held now, GPUs asked for by
    pending jobs. Rows exist for every quota and for any model a team uses without one; such a row
    names the ancestor whose quota counts it. 4 queries.
    """
    team_ids = home_teams(user=user)
    if not team_ids:
        return []
    tree = TeamTree.load()
    teams_by_slug = {tree.slugs[pk]: pk for pk in team_ids}
    # The caller's teams' quotas and their ancestors': an ancestor's counts their GPUs too.
    above = {a for pk in team_ids for a in tree.ancestors_and_self(pk)}
    quotas_by_id = {
        (q.team_id, q.gpu_model.name): q
        for q in Quota.objects.filter(team_id__in=above).select_related("gpu_model")
    }
    quotas = {
        (tree.slugs[team_id], model): q
        for (team_id, model), q in quotas_by_id.items()
        if team_id in team_ids
    }
    in_use = {
        (row["job__team__slug"], row["node__gpu_model__name"]): row["n"]
        for row in Allocation.objects.filter(ended_at__isnull=True, job__team_id__in=team_ids)
        .values("job__team__slug", "node__gpu_model__name")
        .annotate(n=Count("id"))
    }
    pending: defaultdict[tuple[str, str], int] = defaultdict(int)
    for row in (
        Job.objects.filter(team_id__in=team_ids, state=JobState.PENDING)
        .values("team__slug", "gpu_model__name")
        .annotate(n=Sum(F("workers") * F("gpus_per_worker")))
    ):
        pending[(row["team__slug"], row["gpu_model__name"] or "any")] += row["n"] or 0
    keys = sorted(set(quotas) | set(in_use) | set(pending))
    rows = []
    for key in keys:
        quota = quotas.get(key)
        owner = None
        if quota is None:  # the nearest ancestor with a quota for the model (rule 1c)
            owner = next(
                (
                    a
                    for a in tree.ancestors_and_self(teams_by_slug[key[0]])[1:]
                    if (a, key[1]) in quotas_by_id
                ),
                None,
            )
        rows.append(
            QuotaUse(
                team=key[0],
                gpu_model=key[1],
                guaranteed=quota.guaranteed_gpus if quota else None,
                borrow_limit=quota.borrow_limit_gpus if quota else None,
                in_use=in_use.get(key, 0),
                pending=pending.get(key, 0),
                counted_under=tree.slugs[owner] if owner is not None else "",
            )
        )
    return rows


@dataclass
class GpuCell:
    index: int
    status: str  # FREE | IN_USE
    job_id: int | None = None  # only for a job the caller may see
    job_name: str = ""

    @property
    def label(self) -> str:
        if self.status == FREE:
            return FREE
        return f"{self.job_name} (#{self.job_id})" if self.job_id else IN_USE


@dataclass
class NodeCell:
    node: Node
    gpus: list[GpuCell]
    # Why the cluster keeps new work off the node, blank when it does not (Node.no_new_work).
    hold: str = ""

    @property
    def in_use(self) -> int:
        return sum(1 for gpu in self.gpus if gpu.status == IN_USE)

    @property
    def marked(self) -> bool:
        return self.node.state in (NodeState.QUARANTINED, NodeState.DRAINING, NodeState.DOWN)


@dataclass
class RackCell:
    name: str
    nodes: list[NodeCell] = field(default_factory=list)


@dataclass
class ClusterCell:
    name: str
    backend_kind: str
    backend_available: bool
    # scheduler.selectors.cluster_backend_error: the raw text for admins alone.
    backend_error: str
    racks: list[RackCell] = field(default_factory=list)
    # Routing facts (frontend.routing_admin.ClusterFacts), attached by the cluster page.
    facts: ClusterFacts | None = None
    # scheduler.retirement: since when it is being retired (None: in service), and when it was.
    retiring_since: datetime | None = None
    retired_at: datetime | None = None


def cluster_grid(*, user: User | AnonymousUser) -> list[ClusterCell]:
    """Clusters -> racks -> nodes -> GPUs with who holds each GPU, anonymised for the caller.

    A GPU held by a job of the caller's visible jobs carries that job's id and name; any other
    held GPU is only "in use". 3 queries.
    """
    # The live picture of the capacity: a retired node is none (its history stays on its pages).
    nodes = list(scheduler_selectors.node_list(user=user).exclude(state=NodeState.RETIRED))
    now = timezone.now()
    visible = set(
        Job.objects.visible_to(user).filter(state__in=HOLDING_STATES).values_list("pk", flat=True)
    )
    holders: dict[tuple[int, int], tuple[int, str]] = {}
    for node_id, gpu_index, job_id, job_name in Allocation.objects.filter(
        ended_at__isnull=True
    ).values_list("node_id", "gpu_index", "job_id", "job__name"):
        holders[(node_id, gpu_index)] = (job_id, job_name)
    clusters: dict[str, ClusterCell] = {}
    racks: dict[tuple[str, str], RackCell] = {}
    for node in nodes:
        cluster = clusters.get(node.cluster.name)
        if cluster is None:
            cluster = clusters[node.cluster.name] = ClusterCell(
                name=node.cluster.name,
                backend_kind=node.cluster.backend_kind,
                backend_available=node.cluster.backend_available,
                backend_error=scheduler_selectors.cluster_backend_error(
                    user=user, cluster=node.cluster
                ),
                retiring_since=node.cluster.retiring_since,
                retired_at=node.cluster.retired_at,
            )
        rack_key = (node.cluster.name, node.rack or "-")
        rack = racks.get(rack_key)
        if rack is None:
            rack = racks[rack_key] = RackCell(name=node.rack or "-")
            cluster.racks.append(rack)
        gpus = []
        for index in range(node.gpu_count):
            holder = holders.get((node.pk, index))
            if holder is None:
                gpus.append(GpuCell(index=index, status=FREE))
            elif holder[0] in visible:
                gpus.append(
                    GpuCell(index=index, status=IN_USE, job_id=holder[0], job_name=holder[1])
                )
            else:
                gpus.append(GpuCell(index=index, status=IN_USE))
        rack.nodes.append(NodeCell(node=node, gpus=gpus, hold=node.no_new_work(now)))
    for cluster in clusters.values():
        cluster.racks.sort(key=lambda r: r.name)
    return list(clusters.values())


@dataclass(frozen=True)
class ClusterRetirement:
    """What retiring or reinstating a cluster would touch, for the admins' confirmation."""

    name: str
    retiring_since: datetime | None
    retired_at: datetime | None
    nodes_in_service: int  # its nodes not retired
    jobs_running: int  # its running or preempted jobs (they run to their end)


class _RetirementCounts(TypedDict):
    nodes_in_service: int
    jobs_running: int


def _retirement_rows(
    user: User | AnonymousUser,
) -> QuerySet[WithAnnotations[Cluster, _RetirementCounts]]:
    # Counted in subqueries: a join of both relations would multiply every node by every job
    # the cluster ever ran.
    live_nodes = Node.objects.filter(cluster=OuterRef("pk")).exclude(state=NodeState.RETIRED)
    running = Job.objects.filter(
        cluster=OuterRef("pk"), state__in=[JobState.RUNNING, JobState.PREEMPTED]
    )
    rows = Cluster.objects.annotate(
        nodes_in_service=_row_count(live_nodes), jobs_running=_row_count(running)
    ).order_by("name")
    return rows if user.is_authenticated else rows.none()


def _row_count(rows: QuerySet[Node] | QuerySet[Job]) -> Coalesce:
    counted = rows.order_by().values("cluster").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0)


def _retirement(row: WithAnnotations[Cluster, _RetirementCounts]) -> ClusterRetirement:
    return ClusterRetirement(
        name=row.name,
        retiring_since=row.retiring_since,
        retired_at=row.retired_at,
        nodes_in_service=row.nodes_in_service,
        jobs_running=row.jobs_running,
    )


def cluster_retirement(*, user: User | AnonymousUser, name: str) -> ClusterRetirement | None:
    """The cluster ``name`` as its retirement's confirmation shows it, or None when there is no
    such cluster. Clusters are shared (no team's), like nodes. One query."""
    row = _retirement_rows(user).filter(name=name).first()
    return _retirement(row) if row is not None else None


def retired_clusters_off_grid(
    *, user: User | AnonymousUser, grid: list[ClusterCell]
) -> list[ClusterRetirement]:
    """Clusters being retired or retired that ``grid`` does not show (every node of theirs is
    retired, and the grid is the live capacity): the cluster page lists them, so a platform admin
    can reinstate them there. One query."""
    shown = [cell.name for cell in grid]
    rows = _retirement_rows(user).filter(retiring_since__isnull=False).exclude(name__in=shown)
    return [_retirement(row) for row in rows]


def cluster_totals(grid: list[ClusterCell]) -> dict[str, int]:
    """GPUs free, in use and unavailable (on a node that is not ready, or that the cluster
    itself holds) across ``grid``."""
    totals = {"free": 0, "in_use": 0, "unavailable": 0, "total": 0}
    for cluster in grid:
        for rack in cluster.racks:
            for cell in rack.nodes:
                for gpu in cell.gpus:
                    totals["total"] += 1
                    if gpu.status == IN_USE:
                        totals["in_use"] += 1
                    elif cell.node.state != NodeState.READY or cell.hold:
                        totals["unavailable"] += 1
                    else:
                        totals["free"] += 1
    return totals


def node_events(*, user: User | AnonymousUser, limit: int = 30) -> list[NodeEvent]:
    """The latest node events (quarantines, failures, releases) for platform admins; nothing for
    anyone else."""
    if not is_platform_admin(user):
        return []
    return list(NodeEvent.objects.select_related("node").order_by("-time", "-id")[:limit])


def job_placement_nodes(*, job: Job) -> list[dict[str, object]]:
    """The nodes the job runs on, each with its GPUs and which of them are the job's. 1 query."""
    placement = scheduler_selectors.job_placement(job)
    if not placement:
        return []
    nodes = Node.objects.filter(name__in=placement.keys()).select_related("gpu_model")
    if job.cluster_id:
        nodes = nodes.filter(cluster_id=job.cluster_id)
    out = []
    for node in nodes.order_by("rack", "name"):
        mine = set(placement.get(node.name, []))
        out.append(
            {
                "node": node,
                "gpus": [{"index": i, "mine": i in mine} for i in range(node.gpu_count)],
                "count": len(mine),
            }
        )
    return out


def job_log_tail(*, user: User | AnonymousUser, job: Job, lines: int = 60) -> str:
    """The last lines of the job's current (or last) run as its backend reports them, read as
    every read of a job's output is (``scheduler.selectors.job_log``): a viewer of the job's
    team sees its env values and secrets masked.

    ``job`` must come from a user-scoped selector. Best effort: "" when the job never ran, a short
    notice when the backend cannot be asked.
    """
    if not job.cluster_id or not job.attempts:
        return ""
    try:
        chunk = scheduler_selectors.job_log_read(
            job=job, user=user, attempt=None, cursor=None, limit_bytes=min(lines * 512, 1 << 20)
        )
    except Exception:  # a backend outage must not break the job page
        log.warning("log tail of job %s unavailable", job.pk, exc_info=True)
        return "(the backend did not answer; the log will be shown when it does)"
    return "\n".join(chunk.text.splitlines()[-lines:])
