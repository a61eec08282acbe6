"""Fill the cluster of usage metered before usage recorded it, and split the daily rollup by it.

``UsageRecord.cluster`` comes from allocation -> node -> cluster, one UPDATE. A row whose
allocation is gone (its node or job deleted since) keeps a NULL cluster: nothing left says where
it ran, and a guess (the job's other attempts, the only cluster today) could put money on a
cluster that never ran it; dashboards show such usage as its own "(unknown)" bucket, so the
split by cluster still adds up to the spend.

``UsageDaily`` is then rebuilt from usage for every (team, day) that has usage rows, the way the
meter rebuilds it (absolute sums). Rollup rows with no usage rows under them are left as they
were (cluster unknown): their source is not there to split.

Reversible: going back merges the daily rows of a (team, day, GPU model, capacity) again.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from django.db import migrations
from django.db.models import Case, F, FloatField, OuterRef, Subquery, Sum, When
from django.db.models.functions import TruncDay

_QUANTUM = Decimal("0.000001")


def _rebuild_daily(apps, *, by_cluster: bool) -> None:
    UsageRecord = apps.get_model("billing", "UsageRecord")
    UsageDaily = apps.get_model("billing", "UsageDaily")
    telemetered = Case(When(idle_fraction__isnull=False, then=F("gpu_seconds")), default=0.0)
    keys = ["team_id", "day", "gpu_model_id", "capacity"] + (["cluster_id"] if by_cluster else [])
    rows = (
        UsageRecord.objects.annotate(day=TruncDay("hour"))
        .values(*keys)
        .annotate(
            s_secs=Sum("gpu_seconds"),
            s_cost=Sum("cost"),
            s_unpriced=Sum("unpriced_gpu_seconds"),
            s_tel=Sum(telemetered, output_field=FloatField()),
            s_idle_secs=Sum(F("gpu_seconds") * F("idle_fraction"), output_field=FloatField()),
            s_idle_cost=Sum(F("cost") * F("idle_fraction"), output_field=FloatField()),
        )
        .order_by()
    )
    fresh = defaultdict(list)
    for r in rows:
        day = r["day"].date()
        fresh[day].append(
            UsageDaily(
                team_id=r["team_id"],
                day=day,
                gpu_model_id=r["gpu_model_id"],
                capacity=r["capacity"],
                cluster_id=r.get("cluster_id"),
                gpu_seconds=r["s_secs"] or 0.0,
                cost=r["s_cost"] or Decimal(0),
                unpriced_gpu_seconds=r["s_unpriced"] or 0.0,
                telemetry_gpu_seconds=r["s_tel"] or 0.0,
                idle_gpu_seconds=r["s_idle_secs"] or 0.0,
                idle_cost=Decimal(repr(r["s_idle_cost"] or 0.0)).quantize(_QUANTUM),
            )
        )
    for day, daily in fresh.items():
        UsageDaily.objects.filter(day=day, team_id__in={d.team_id for d in daily}).delete()
        UsageDaily.objects.bulk_create(daily, batch_size=2000)


def forwards(apps, schema_editor):
    UsageRecord = apps.get_model("billing", "UsageRecord")
    Allocation = apps.get_model("scheduler", "Allocation")
    UsageRecord.objects.filter(cluster__isnull=True).update(
        cluster_id=Subquery(
            Allocation.objects.filter(pk=OuterRef("allocation_id")).values("node__cluster_id")[:1]
        )
    )
    _rebuild_daily(apps, by_cluster=True)


def backwards(apps, schema_editor):
    _rebuild_daily(apps, by_cluster=False)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0004_prices_and_usage_by_cluster_egress"),
        ("scheduler", "0014_routing_facts"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
