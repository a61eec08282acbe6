"""Retiring (decommissioning) nodes and clusters, and reinstating them (platform admins).

A retired node is never scheduled again and leaves the platform's capacity (the snapshot, quotas'
overcommit checks, capacity figures and dashboards read ``Node.objects.in_capacity()``), but it is
not deleted: its jobs, allocations, events, telemetry and costs stay and are still shown. This is
what a Slurm, Kueue or Run:ai admin expects of a decommissioned node: drained first, gone from
capacity once nothing runs on it, its history kept.

- :func:`node_retire` drains the node (``services.node_drain``) and marks it retiring. It becomes
  retired (state ``retired``, ``retired_at``) as soon as no live allocation holds one of its GPUs:
  at once when none does, else when its last allocation ends (:func:`retirements_finish`, which
  every scheduling cycle runs under the loop's lock).
- :func:`node_reinstate` undoes it: the node comes back drained (an admin releases it as usual).
- :func:`cluster_retire` retires every node of the cluster, and no new job is routed there: a
  submission confined to it is refused, as is any submission of a team whose every allowed
  cluster is retired (``scheduler.services.retired_team_clusters_error``), and a pending job
  confined to it stays pending, its why saying so (``scheduler.snapshot``). The loop stops polling the cluster once all its nodes are
  retired and none of its jobs runs.
- :func:`cluster_reinstate` reinstates the cluster and the nodes its retirement retired.

Every function here is keyword-only, atomic, idempotent (retiring what is retired changes
nothing) and audited; node changes emit node events.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from core.errors import Conflict, Forbidden, NotFound
from tenants.audit import audit_record
from tenants.permissions import is_platform_admin

from . import reference
from .locks import scheduler_lock
from .models import Allocation, Cluster, Job, Node, NodeEvent, NodeState
from .services import node_drain, node_event_record, node_for_admin, node_reason_checked
from .states import JobState
from .triggers import request_cycle

if TYPE_CHECKING:
    from django.db.models.expressions import Combinable, NegatedExpression

# The jobs that hold a cluster's capacity: the loop polls their cluster until they end.
_HOLDING = (JobState.RUNNING, JobState.PREEMPTED)


def _retirement_state(node: Node) -> dict[str, str | None]:
    return {
        "state": node.state,
        "retiring_since": node.retiring_since.isoformat() if node.retiring_since else None,
        "retired_at": node.retired_at.isoformat() if node.retired_at else None,
    }


def _idle() -> NegatedExpression[Combinable]:
    return ~Exists(Allocation.objects.filter(node=OuterRef("pk"), ended_at__isnull=True))


def _retire_locked(node: Node, *, user: User, reason: str, now: datetime) -> None:
    """Mark the locked ``node`` retiring and drain it (nothing new starts there)."""
    before = _retirement_state(node)
    # The drain service's own audit entry, node event and backend drain; it leaves a node that
    # is already drained or quarantined as it is (either way nothing new starts there).
    node_drain(user=user, node_id=node.pk, reason=reason)
    node.refresh_from_db()
    Node.objects.filter(pk=node.pk).update(retiring_since=now, retire_reason=reason)
    node.retiring_since, node.retire_reason = now, reason
    audit_record(
        actor=user,
        action="node.retire",
        target=node,
        before=before,
        after=_retirement_state(node),
        comment=f"{reason} (by {user.get_username()})",
    )


def node_retire(*, user: User, node_id: int, reason: str = "") -> Node:
    """Retire a node (platform admins; else Forbidden, NotFound for no such node): drained now,
    retired once nothing runs on it. Its history is kept. Retiring a retiring or retired node
    changes nothing. A reason longer than the node's reason column is refused on ``reason``
    (after Forbidden and NotFound)."""
    with transaction.atomic():
        node: Node = node_for_admin(user=user, node_id=node_id)
        stored = node_reason_checked((reason or "").strip() or "retired by admin")
        if node.retiring_since is None:
            _retire_locked(node, user=user, reason=stored, now=timezone.now())
            request_cycle()
    retirements_finish_now(node_ids=[node.pk])
    node.refresh_from_db()
    return node


def node_reinstate(*, user: User, node_id: int) -> Node:
    """Undo a node's retirement (platform admins): it comes back drained, so nothing starts on it
    until an admin releases it; a node still retiring stays drained. A node that is not retired
    or retiring, or whose cluster is retired, is a Conflict (reinstate the cluster instead)."""
    with transaction.atomic():
        node: Node = node_for_admin(user=user, node_id=node_id)
        if node.retiring_since is None:
            raise Conflict(f"node is {node.state}, not retired or retiring", field="state")
        if node.cluster.retiring_since is not None:
            raise Conflict(
                f"its cluster {node.cluster.name} is retired: reinstate the cluster",
                field="cluster",
            )
        _reinstate_locked(node, user=user, now=timezone.now())
    return node


def _reinstate_locked(node: Node, *, user: User, now: datetime) -> None:
    before = _retirement_state(node)
    fields: dict[str, Any] = {"retiring_since": None, "retired_at": None, "retire_reason": ""}
    if node.state == NodeState.RETIRED:
        fields |= {"state": NodeState.DRAINING, "state_reason": "reinstated: release it to use it"}
    Node.objects.filter(pk=node.pk).update(**fields)
    for name, value in fields.items():
        setattr(node, name, value)
    message = f"reinstated by {user.get_username()}, {node.state} until released"
    audit_record(
        actor=user,
        action="node.reinstate",
        target=node,
        before=before,
        after=_retirement_state(node),
        comment=message,
    )
    node_event_record(node=node, kind=NodeEvent.Kind.REINSTATED, message=message, now=now)
    reference.clear()


def _cluster_for_admin(*, user: User, name: str) -> Cluster:
    if not is_platform_admin(user):
        raise Forbidden("cluster actions are for platform admins")
    cluster = Cluster.objects.select_for_update().filter(name=name).first()
    if cluster is None:
        raise NotFound(f"no cluster is named {name!r}", field="cluster")
    return cluster


def _cluster_state(cluster: Cluster) -> dict[str, str | None]:
    return {
        "retiring_since": cluster.retiring_since.isoformat() if cluster.retiring_since else None,
        "retired_at": cluster.retired_at.isoformat() if cluster.retired_at else None,
    }


def cluster_retire(*, user: User, name: str, reason: str = "") -> Cluster:
    """Retire a cluster (platform admins; NotFound for no such cluster): every node of it is
    retired (:func:`node_retire`), no new job is routed to it, and the loop stops polling it once
    nothing runs there. Retiring a retiring or retired cluster changes nothing. A reason too
    long is refused after Forbidden and NotFound."""
    with transaction.atomic():
        cluster = _cluster_for_admin(user=user, name=name)
        stored = node_reason_checked((reason or "").strip() or f"cluster {name} retired")
        if cluster.retiring_since is None:
            now = timezone.now()
            before = _cluster_state(cluster)
            Cluster.objects.filter(pk=cluster.pk).update(retiring_since=now)
            cluster.retiring_since = now
            audit_record(
                actor=user,
                action="cluster.retire",
                target=cluster,
                before=before,
                after=_cluster_state(cluster),
                comment=f"{stored} (by {user.get_username()})",
            )
            for node_id in cluster.nodes.filter(retiring_since__isnull=True).values_list(
                "pk", flat=True
            ):
                node = node_for_admin(user=user, node_id=node_id)
                _retire_locked(node, user=user, reason=stored, now=now)
            request_cycle()
    # A queryset update sends no signal: submissions of this process see the retirement at once.
    reference.clear()
    retirements_finish_now(node_ids=cluster.nodes.values_list("pk", flat=True))
    cluster.refresh_from_db()
    return cluster


def cluster_reinstate(*, user: User, name: str) -> Cluster:
    """Undo a cluster's retirement (platform admins): jobs may be routed to it again, the loop
    polls it again, and the nodes its retirement retired come back drained (a node retired on
    its own before stays retired). A cluster that is not retired or retiring is a Conflict."""
    with transaction.atomic():
        cluster = _cluster_for_admin(user=user, name=name)
        if cluster.retiring_since is None:
            raise Conflict(f"cluster {name} is not retired or retiring", field="cluster")
        since = cluster.retiring_since
        before = _cluster_state(cluster)
        Cluster.objects.filter(pk=cluster.pk).update(retiring_since=None, retired_at=None)
        cluster.retiring_since = cluster.retired_at = None
        audit_record(
            actor=user,
            action="cluster.reinstate",
            target=cluster,
            before=before,
            after=_cluster_state(cluster),
            comment=f"reinstated by {user.get_username()}",
        )
        for node_id in cluster.nodes.filter(retiring_since__gte=since).values_list("pk", flat=True):
            node = node_for_admin(user=user, node_id=node_id)
            _reinstate_locked(node, user=user, now=timezone.now())
        request_cycle()
    reference.clear()
    return cluster


def retirements_finish(*, now: datetime, node_ids: Iterable[int] | None = None) -> list[str]:
    """Retire each retiring node (of ``node_ids`` when given) that no live allocation holds, and
    mark retired each retiring cluster whose nodes are all retired and none of whose jobs runs.
    Returns the names of the nodes retired. Conditional UPDATEs: a repeat, or a node given a
    reinstatement meanwhile, changes nothing. Run it where no cycle can place work at the same
    time (the loop, under its lock): a run placed on a node between the check and the update
    would hold GPUs of a retired node."""
    candidates = Node.objects.filter(retiring_since__isnull=False).exclude(state=NodeState.RETIRED)
    if node_ids is not None:
        candidates = candidates.filter(pk__in=list(node_ids))
    retired = []
    for node in candidates.filter(_idle()).select_related("cluster").order_by("pk"):
        with transaction.atomic():
            changed = (
                Node.objects.filter(pk=node.pk, retiring_since__isnull=False)
                .exclude(state=NodeState.RETIRED)
                .filter(_idle())
                .update(
                    state=NodeState.RETIRED,
                    state_reason=node.retire_reason,
                    resume_state="",
                    resume_reason="",
                    probation_until=None,
                    cluster_hold="",
                    avoid_until=None,
                    retired_at=now,
                )
            )
            if not changed:
                continue
            node.refresh_from_db()
            node_event_record(
                node=node,
                kind=NodeEvent.Kind.RETIRED,
                message=f"retired: {node.retire_reason}; nothing runs on it",
                now=now,
            )
            retired.append(node.name)
    live_nodes = Node.objects.filter(cluster=OuterRef("pk")).exclude(state=NodeState.RETIRED)
    live_jobs = Job.objects.filter(cluster=OuterRef("pk"), state__in=_HOLDING)
    Cluster.objects.filter(retiring_since__isnull=False, retired_at__isnull=True).filter(
        ~Exists(live_nodes), ~Exists(live_jobs)
    ).update(retired_at=now)
    if retired:
        reference.clear()
    return retired


def retirements_finish_now(*, node_ids: Iterable[int]) -> None:
    """:func:`retirements_finish` for these nodes now, if no scheduling cycle is running (under
    the loop's lock, so no cycle places work on them meanwhile); else the running cycle's next
    one finishes them."""
    with scheduler_lock() as acquired:
        if acquired:
            retirements_finish(now=timezone.now(), node_ids=node_ids)


def retired_cluster_names() -> dict[str, datetime]:
    """Clusters being retired or retired, name -> since when: no new job is routed to them."""
    return {
        name: since
        for name, since in Cluster.objects.filter(retiring_since__isnull=False).values_list(
            "name", "retiring_since"
        )
        if since is not None  # (the filter's: mypy reads the column as nullable)
    }
