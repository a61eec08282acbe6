"""The meter's egress charges: once per job attempt that started on a cluster without a copy of
its dataset (``_meter_egress``), dropped again for an attempt the cluster never started
(``_drop_egress_of_unstarted``). Called by ``billing.meter`` for each batch of allocations.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from decimal import Decimal

from django.db.models import Exists, F, OuterRef, Q

from scheduler.models import Allocation, ClusterDataset, Dataset

from . import calc
from .models import AllocationMeter, EgressCharge
from .usage import MeterResult, _check_cost

log = logging.getLogger(__name__)


def _meter_egress(*, allocations: list[Allocation], result: MeterResult) -> None:
    """Charge the data movement of each job attempt the meter sees for the first time: when the
    attempt's cluster holds no copy of the job's dataset and some cluster does, the dataset's
    size x the cheapest holder's egress price per GB (``scheduler.policy.routing.egress_cost``'s
    rule; ties go to the holder first by name). Unknown size, no holder, or a copy on the
    attempt's cluster: no charge.

    Decided once per attempt, with the facts of the first run that meters it (an attempt some of
    whose allocations were metered before is left alone, so a fact changed later never charges
    it after the fact); written once (unique (job, attempt), conflicts ignored). Allocations
    that held no time are left out: an attempt that never ran is not charged, and one whose
    charge was made while it waited loses it (``_drop_egress_of_unstarted``)."""
    attempts: dict[tuple[int, int], Allocation] = {}
    for alloc in sorted(allocations, key=lambda a: (a.started_at, a.pk)):
        # An allocation ended at its start held nothing: a run the cluster never started, or
        # the wait of one it started late (its attempt is charged from its real start).
        if alloc.job.dataset and (alloc.ended_at is None or alloc.ended_at > alloc.started_at):
            attempts.setdefault((alloc.job_id, alloc.attempt), alloc)
    if not attempts:
        return
    job_ids = {job_id for job_id, _ in attempts}
    seen = set(
        AllocationMeter.objects.filter(allocation__job_id__in=job_ids).values_list(
            "allocation__job_id", "allocation__attempt"
        )
    )
    seen |= set(EgressCharge.objects.filter(job_id__in=job_ids).values_list("job_id", "attempt"))
    fresh = {key: alloc for key, alloc in attempts.items() if key not in seen}
    if not fresh:
        return
    names = {alloc.job.dataset for alloc in fresh.values()}
    sizes = dict(Dataset.objects.filter(name__in=names).values_list("name", "size_gb"))
    holders: dict[str, list[tuple[Decimal, str, int]]] = defaultdict(list)
    for name, cluster_id, cluster_name, price in ClusterDataset.objects.filter(
        dataset__name__in=names
    ).values_list("dataset__name", "cluster_id", "cluster__name", "egress_price_per_gb"):
        holders[name].append((price, cluster_name, cluster_id))
    charges = []
    for (job_id, attempt), alloc in sorted(fresh.items()):
        dataset = alloc.job.dataset
        size = sizes.get(dataset)
        held = holders.get(dataset, [])
        if not size or not held or alloc.node.cluster_id in {c for _, _, c in held}:
            continue
        price, _, from_cluster_id = min(held)
        try:
            cost = (Decimal(repr(float(size))) * price).quantize(calc.COST_QUANTUM)
            _check_cost(cost)
        except (ArithmeticError, ValueError) as exc:
            log.error("egress of job %s attempt %s not charged: %r", job_id, attempt, exc)
            continue
        charges.append(
            EgressCharge(
                job_id=job_id,
                attempt=attempt,
                team_id=alloc.job.team_id,
                dataset=dataset,
                from_cluster_id=from_cluster_id,
                to_cluster_id=alloc.node.cluster_id,
                size_gb=float(size),
                price_per_gb=price,
                cost=cost,
                time=alloc.started_at,
            )
        )
        result.months.add(calc.month_start(alloc.started_at))
    EgressCharge.objects.bulk_create(charges, ignore_conflicts=True)
    result.egress_rows += len(charges)


def _drop_egress_of_unstarted(*, attempts: set[tuple[int, int]], result: MeterResult) -> None:
    """Remove the egress charge of each of ``attempts`` (job, attempt) none of whose allocations
    held a GPU for any time: a run the cluster never started moved no data, and is billed
    nothing, its usage rows as its egress (the charge was made when the meter first saw it
    waiting). An attempt the cluster started late keeps its charge: it ran."""
    if not attempts:
        return
    held = Allocation.objects.filter(job_id=OuterRef("job_id"), attempt=OuterRef("attempt")).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=F("started_at"))
    )
    which = Q()
    for job_id, attempt in sorted(attempts):
        which |= Q(job_id=job_id, attempt=attempt)
    unmoved = EgressCharge.objects.filter(which).exclude(Exists(held))
    # Their months' statements and budgets are looked at again, as for any metered change.
    result.months.update(calc.month_start(t) for t in unmoved.values_list("time", flat=True))
    unmoved.delete()
