"""Two clusters to route between, shared by the routing tests of the CLI, the portal and the
API: the conftest's ``test`` cluster (on-prem, eu-west, InfiniBand) and a cloud in us-east
(Ethernet) with one on-demand and one spot H100 node; the price book has H100 at 2.00 on demand
and 0.80 spot. (The idea of tests/integration/scheduler/test_routing_snapshot.py.)"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal


def make_two_clusters(platform, gpu_models) -> dict:
    from django.utils import timezone

    from billing.models import PriceRate
    from scheduler.models import Cluster, Node

    onprem = platform["cluster"]
    Cluster.objects.filter(pk=onprem.pk).update(region="eu-west", interconnect="infiniband")
    onprem.refresh_from_db()
    cloud = Cluster.objects.create(
        name="cloud", backend_kind="simulated", region="us-east", interconnect="ethernet"
    )
    for i, spot in ((1, False), (2, True)):
        Node.objects.create(
            cluster=cloud, name=f"c{i}", gpu_model=gpu_models["h100"], gpu_count=8, spot=spot
        )
    start = timezone.now() - timedelta(days=1)
    for capacity, rate in (("on_demand", "2.00"), ("spot", "0.80")):
        PriceRate.objects.create(
            gpu_model=gpu_models["h100"],
            capacity=capacity,
            effective_from=start,
            rate_per_gpu_hour=Decimal(rate),
        )
    return {**platform, "cluster": onprem, "cloud": cloud}


def run_one_cycle():
    """One real scheduling cycle on fresh simulated backends (started job ids)."""
    from scheduler.backends import reset_backends
    from scheduler.loop.cycle import run_cycle

    reset_backends()
    try:
        return run_cycle().started
    finally:
        reset_backends()
