"""The meter's lost work: each increase of a job's lost GPU-seconds becomes one priced row
(``_meter_lost_work``), tagged with what lost it. Called by ``billing.meter``'s per-minute run.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, TypedDict

from django.db.models import F, Max, Q

from scheduler.models import Allocation, Job, JobEvent
from scheduler.outcomes import loss_cause

from . import calc
from .models import Capacity, LostKind, LostWork
from .services import PriceBook
from .usage import MeterResult, _check_cost

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

log = logging.getLogger(__name__)


LOSS_EVENT_KINDS = (LostKind.PREEMPTED.value, LostKind.NODE_FAILED.value)
# scheduler.outcomes.loss_cause's causes as lost-work kinds
_LOSS_KIND = {"preemption": LostKind.PREEMPTED, "node_failure": LostKind.NODE_FAILED}


class _Metered(TypedDict):
    # The job's lost GPU-seconds metered so far (its latest row's cumulative value); None: none.
    metered: float | None


def _meter_lost_work(*, now: datetime, result: MeterResult) -> None:
    """Meter each increase of ``Job.lost_gpu_seconds`` once, as its own row (keyed by the new
    cumulative value), priced at the rate in force when the loss happened."""
    jobs: list[WithAnnotations[Job, _Metered]] = list(
        Job.objects.filter(lost_gpu_seconds__gt=0)
        .annotate(metered=Max("lost_work__cumulative_gpu_seconds"))
        .filter(Q(metered__isnull=True) | Q(lost_gpu_seconds__gt=F("metered") + 1e-6))
        .select_related("team")
    )
    if not jobs:
        return
    job_ids = [j.pk for j in jobs]
    last_loss: dict[int, tuple[str, datetime]] = {}
    for job_id, kind, time in (
        JobEvent.objects.filter(job_id__in=job_ids, kind__in=LOSS_EVENT_KINDS, time__lte=now)
        .order_by("job_id", "time", "id")
        .values_list("job_id", "kind", "time")
    ):
        last_loss[job_id] = (kind, time)
    # Every loss is recorded with a requeue; only the platform's own preemptions leave an event
    # of their own before it (`preempted`; `node_failed` ones come from the demo's history). A
    # requeue with none (a node failure, the cluster's own preemption, a run the backend lost)
    # is the loss itself: its time, its reason's cause.
    requeues: dict[int, list[tuple[datetime, str]]] = defaultdict(list)
    for job_id, time, data in (
        JobEvent.objects.filter(job_id__in=job_ids, kind="requeued", time__lte=now)
        .order_by("job_id", "time", "id")
        .values_list("job_id", "time", "data")
    ):
        if (data or {}).get("never_ran"):
            continue  # a run the cluster never started lost nothing: no loss to tag
        requeues[job_id].append((time, str((data or {}).get("reason", ""))))
    nodes: dict[int, list[tuple[datetime, tuple[int, bool, int | None]]]] = defaultdict(list)
    for job_id, started_at, model_id, on_spot, at_cluster_id in (
        Allocation.objects.filter(job_id__in=job_ids, started_at__lt=now)
        .order_by("job_id", "started_at", "id")
        .values_list("job_id", "started_at", "node__gpu_model_id", "node__spot", "node__cluster_id")
    ):
        nodes[job_id].append((started_at, (model_id, on_spot, at_cluster_id)))
    book = PriceBook.load()
    rows = []
    for job in jobs:
        delta = job.lost_gpu_seconds - (job.metered or 0.0)
        kind, occurred_at = last_loss.get(job.pk, (LostKind.OTHER, now))
        mine = requeues.get(job.pk)
        if mine:
            last_at, reason = mine[-1]
            before_at = mine[-2][0] if len(mine) > 1 else None
            if job.pk not in last_loss or (before_at is not None and occurred_at <= before_at):
                # no event of its own, or that event belongs to an earlier requeue
                kind, occurred_at = _LOSS_KIND.get(loss_cause(reason), LostKind.OTHER), last_at
        # The work was lost where the job ran before the loss: a requeued attempt may already
        # run on another GPU model, capacity or cluster when the meter sees the loss.
        ran = nodes.get(job.pk, [])
        before = [node for started_at, node in ran if started_at < occurred_at] or [
            node for _, node in ran
        ]
        gpu_model_id, spot, cluster_id = before[-1] if before else (job.gpu_model_id, False, None)
        capacity = Capacity.SPOT if spot else Capacity.ON_DEMAND
        cost = Decimal(0)
        rate = None
        if gpu_model_id is not None:
            schedule = book.schedule(
                cluster_id=cluster_id, gpu_model_id=gpu_model_id, capacity=capacity
            )
            rate = schedule.rate_at(occurred_at)
        try:
            if rate is not None:
                cost = (rate * Decimal(repr(delta)) / Decimal(3600)).quantize(calc.COST_QUANTUM)
            _check_cost(cost)
        except (ArithmeticError, ValueError) as exc:
            # Logged and left unmetered; every other job's loss is still metered.
            log.error("lost work of job %s not metered: %r", job.pk, exc)
            continue
        rows.append(
            LostWork(
                job_id=job.pk,
                cumulative_gpu_seconds=job.lost_gpu_seconds,
                team_id=job.team_id,
                user_id=job.submitter_id,
                gpu_model_id=gpu_model_id,
                capacity=capacity,
                kind=kind,
                occurred_at=occurred_at,
                gpu_seconds=delta,
                cost=cost,
            )
        )
        result.months.add(calc.month_start(occurred_at))
    LostWork.objects.bulk_create(rows, ignore_conflicts=True)
    result.lost_rows += len(rows)
