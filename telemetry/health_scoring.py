"""Node health scoring of the telemetry app: the evidence of each node gathered from its
telemetry and job failures, scored by the pure rules of ``telemetry.health``, and the automatic
quarantine of a node a rule condemns.

``health_evaluate`` is idempotent: re-running it with the same ``now`` changes nothing more.
Quarantine and every later step is a conditional UPDATE plus a ``NodeEvent`` published to the
admin group after commit, like the loop's own failure quarantine (``scheduler.loop.observe``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Max, Q, Sum

from scheduler.models import Allocation, Node, NodeEvent, NodeState
from scheduler.services import node_event_record, publish_node_status
from scheduler.states import JobState

from . import conf
from .health import NodeEvidence, Verdict, evaluate
from .models import GpuErrorEvent, GpuErrorKind, GpuRollup, NodeTelemetry

log = logging.getLogger(__name__)


def _node_event(node: Node, kind: str, message: str, now: datetime) -> None:
    node_event_record(node=node, kind=kind, message=message, now=now)


def node_quarantine_health(*, node: Node, reason: str, now: datetime) -> bool:
    """Quarantine a ready or draining node on a health rule, with a probation of
    ``SCHEDULER_PROBATION_SECONDS``; the loop releases it after probation once its health is
    back above ``SCHEDULER_RELEASE_MIN_HEALTH``. A node an admin had drained gets no probation:
    it stays out until an admin releases it (the loop's release would have put a node under
    maintenance back in service). Returns False (and does nothing) if the node was not
    ready/draining any more (another worker got there first, or it is down)."""
    from django.conf import settings

    from scheduler.backends import get_backend
    from scheduler.backends.base import BackendError

    until = now + timedelta(seconds=settings.SCHEDULER_PROBATION_SECONDS)
    message = f"health rule: {reason}"[:300]
    with transaction.atomic():
        # Locked, so the probation is decided from the state the quarantine replaces.
        was = (
            Node.objects.select_for_update(no_key=True)
            .filter(pk=node.pk, state__in=[NodeState.READY, NodeState.DRAINING])
            .values_list("state", flat=True)
            .first()
        )
        if was is None:
            return False
        probation = None if was == NodeState.DRAINING else until
        Node.objects.filter(pk=node.pk).update(
            state=NodeState.QUARANTINED, state_reason=message, probation_until=probation
        )
        node.state, node.state_reason, node.probation_until = (
            NodeState.QUARANTINED,
            message,
            probation,
        )
        _node_event(node, NodeEvent.Kind.QUARANTINED, message, now)
        if probation is None:
            _node_event(
                node,
                NodeEvent.Kind.PROBATION,
                "drained by an admin: stays out until an admin releases it",
                now,
            )
        else:
            _node_event(
                node,
                NodeEvent.Kind.PROBATION,
                f"probation until {until:%Y-%m-%d %H:%M:%S} UTC",
                now,
            )

        def drain() -> None:
            try:
                get_backend(node.cluster).drain_node(node.name, message)
            except BackendError:
                log.warning("could not drain %s on the backend; next sync retries", node.name)

        transaction.on_commit(drain)
    return True


def _gather_evidence(
    nodes: list[Node], rules: dict[str, Any], now: datetime
) -> dict[int, NodeEvidence]:
    window = now - timedelta(seconds=rules["window_seconds"])
    thermal_window = now - timedelta(seconds=rules["thermal"]["window_seconds"])
    ids = [n.pk for n in nodes]
    # A quarantine and a release each start a clean slate: a quarantined node is judged on what
    # happened since (the release check asks whether it stayed clean), and a node an admin or
    # the loop released is not re-quarantined for the errors that had it quarantined.
    since: dict[int, datetime] = dict(
        NodeEvent.objects.filter(
            node_id__in=ids,
            kind__in=[NodeEvent.Kind.QUARANTINED, NodeEvent.Kind.RELEASED],
            time__gte=window,
        )
        .values("node_id")
        .annotate(t=Max("time"))
        .values_list("node_id", "t")
    )

    def after(field: str, floor: datetime, *, strictly: bool = False) -> Q:
        """The rows of ``field`` that count for each node: from ``floor``, or from the node's
        quarantine or release when that came later (``strictly``: only rows after it). In SQL,
        so the database sums the evidence: reading a quarantined node's rows one by one here
        cost a row per error event, every tick."""
        q = Q(node_id__in=[i for i in ids if i not in since], **{f"{field}__gte": floor})
        for node_id, t in since.items():
            op = "gt" if strictly and t >= floor else "gte"
            q |= Q(node_id=node_id, **{f"{field}__{op}": max(t, floor)})
        return q

    sbe: dict[int, int] = defaultdict(int)
    dbe: dict[int, int] = defaultdict(int)
    xids: dict[int, list[int]] = defaultdict(list)
    # Errors at the quarantine's instant are those that caused it: only later ones count.
    for node_id, kind, code, n in (
        GpuErrorEvent.objects.filter(after("time", window, strictly=True), time__gte=window)
        .values("node_id", "kind", "code")
        .annotate(n=Sum("count"))
        .values_list("node_id", "kind", "code", "n")
        .order_by()
    ):
        if kind == GpuErrorKind.ECC_SBE:
            sbe[node_id] += n
        elif kind == GpuErrorKind.ECC_DBE:
            dbe[node_id] += n
        elif (
            code is not None
        ):  # an XID row (the ingest always sets its code): the code and its repeats
            xids[node_id].extend([code] * n)

    samples: dict[int, int] = defaultdict(int)
    throttled: dict[int, int] = defaultdict(int)
    for node_id, n, hot in (
        GpuRollup.objects.filter(after("bucket", thermal_window), bucket__gte=thermal_window)
        .values("node_id")
        .annotate(n=Sum("samples"), hot=Sum("throttled"))
        .values_list("node_id", "n", "hot")
        .order_by()
    ):
        samples[node_id], throttled[node_id] = n, hot

    submitters: dict[int, int] = dict(
        Allocation.objects.filter(
            after("job__finished_at", window),
            job__state=JobState.FAILED,
            job__finished_at__gte=window,
            attempt=F("job__attempts"),
        )
        .values("node_id")
        .annotate(n=Count("job__submitter_id", distinct=True))
        .values_list("node_id", "n")
        .order_by()
    )

    return {
        n.pk: NodeEvidence(
            ecc_sbe=sbe[n.pk],
            ecc_dbe=dbe[n.pk],
            xid_codes=tuple(xids[n.pk]),
            samples=samples[n.pk],
            throttled=throttled[n.pk],
            failed_job_submitters=submitters.get(n.pk, 0),
        )
        for n in nodes
    }


def health_evaluate(
    *, now: datetime, node_ids: list[int] | None = None, raise_quarantine_failure: bool = False
) -> dict[int, Verdict]:
    """Score every node (or ``node_ids``) from its telemetry and job failures, write the score
    to ``Node.health`` and the reasons to ``NodeTelemetry``, quarantine a ready or draining
    node a rule condemns, and announce (once per probation) a quarantined node whose health
    check fails at the end of its probation. A fixed number of queries plus one small
    transaction per quarantined node. Idempotent for a given ``now``.

    A quarantine that fails is logged and the other nodes go on (the next tick retries it);
    with ``raise_quarantine_failure`` the first such failure is raised once all were tried (the
    ingest's check of one node, whose caller must know it did not finish)."""
    rules = conf.health_rules()
    query = Node.objects.select_related("cluster").order_by("pk")
    if node_ids is not None:
        query = query.filter(pk__in=node_ids)
    nodes = list(query)
    if not nodes:
        return {}
    evidence = _gather_evidence(nodes, rules, now)
    verdicts = {n.pk: evaluate(evidence[n.pk], rules) for n in nodes}
    telemetry = {t.pk: t for t in NodeTelemetry.objects.filter(pk__in=[n.pk for n in nodes])}

    changed = [n for n in nodes if abs(n.health - verdicts[n.pk].score) > 1e-6]
    # Announced when the score moved far; the GPUs in use of all of them in one query (not one
    # per node: a rack overheating moves many nodes in one tick).
    moved_far = [n for n in changed if abs(n.health - verdicts[n.pk].score) >= 0.05]
    in_use: dict[int, set[int]] = defaultdict(set)
    if moved_far:
        for node_id, gpu in Allocation.objects.filter(
            node_id__in=[n.pk for n in moved_far], ended_at__isnull=True
        ).values_list("node_id", "gpu_index"):
            in_use[node_id].add(gpu)
    for node in changed:
        node.health = verdicts[node.pk].score
    for node in moved_far:
        publish_node_status(node=node, now=now, in_use=in_use[node.pk])
    try:
        _scores_write(nodes, changed, verdicts, now)
    except IntegrityError:
        # A node deleted since it was read (an admin removing one added by mistake) fails its
        # telemetry row's foreign key at commit, which took every node's scores with it.
        present = set(
            Node.objects.filter(pk__in=[n.pk for n in nodes]).values_list("pk", flat=True)
        )
        if len(present) == len(nodes):
            raise
        nodes = [n for n in nodes if n.pk in present]
        _scores_write(nodes, [n for n in changed if n.pk in present], verdicts, now)

    min_health = rules["release_min_health"]
    quarantine_failure: Exception | None = None
    for node in nodes:
        verdict = verdicts[node.pk]
        if verdict.quarantine and node.state in (NodeState.READY, NodeState.DRAINING):
            try:
                node_quarantine_health(node=node, reason=verdict.quarantine, now=now)
            except Exception as exc:  # the other condemned nodes are still quarantined
                log.exception("quarantine of node %s failed; retried next tick", node.name)
                quarantine_failure = quarantine_failure or exc
        elif (
            node.state == NodeState.QUARANTINED
            and node.probation_until is not None
            and node.probation_until <= now
            and verdict.score < min_health
        ):
            seen = telemetry.get(node.pk)
            if seen is not None and seen.release_blocked_for == node.probation_until:
                continue
            with transaction.atomic():
                NodeTelemetry.objects.filter(pk=node.pk).update(
                    release_blocked_for=node.probation_until
                )
                why = "; ".join(verdict.reasons) or "low health"
                _node_event(
                    node,
                    NodeEvent.Kind.PROBATION,
                    f"health check failed ({verdict.score:.2f} < {min_health:.2f}: {why}); "
                    "stays quarantined",
                    now,
                )
    if raise_quarantine_failure and quarantine_failure is not None:
        raise quarantine_failure
    return verdicts


def _scores_write(
    nodes: list[Node], changed: list[Node], verdicts: dict[int, Verdict], now: datetime
) -> None:
    with transaction.atomic():
        if changed:
            Node.objects.bulk_update(changed, ["health"])
        NodeTelemetry.objects.bulk_create(
            [
                NodeTelemetry(
                    node=n, health_reasons=list(verdicts[n.pk].reasons), health_evaluated_at=now
                )
                for n in nodes
            ],
            update_conflicts=True,
            unique_fields=["node"],
            update_fields=["health_reasons", "health_evaluated_at"],
        )
