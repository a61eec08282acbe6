"""`seed_demo` gives the demo a past: after it, alice's cost page shows a month of spend by day
and GPU model, the cluster page a utilization history, and the past is consistent (no GPU held
twice at once, every job finished, usage matching the rollups, preemptions, node failures, a
quarantine, budget alerts and audit entries)."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(settings):
    settings.DEBUG = True
    call_command("seed_demo", "--jobs", "0", stdout=io.StringIO())
    return timezone.now()


def _login(client, username):
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(username=username))
    return client


def test_alice_sees_a_month_of_spend_by_day_and_model_and_a_utilization_history(seeded, client):
    from billing import calc

    now = seeded
    last_month = calc.month_start(now.replace(day=1) - timedelta(days=1))
    page = _login(client, "alice").get(f"/billing/teams/vision/?month={last_month:%Y-%m}")
    assert page.status_code == 200
    dashboard = page.context["d"]
    by_model = dashboard.daily_by_model()
    assert set(by_model) == {"a100-40gb", "h100-80gb"}
    days_with_spend = {d.day for d in dashboard.days if d.cost > 0}
    month_days = (calc.next_month(last_month) - last_month).days
    assert len(days_with_spend) == month_days
    assert dashboard.spend > 1000
    assert dashboard.lost, "preemptions and node failures show as lost work"
    assert dashboard.budget.alerts, "vision's budget alerts fired last month"

    # ... and the cluster page a utilization history.
    page = client.get("/cluster/")
    assert page.status_code == 200
    figure = page.context["usage_figure"]
    in_use = figure["data"][0]["y"]
    assert len(in_use) > 24 * 28
    assert max(in_use) <= 256
    assert sum(in_use) / len(in_use) > 256 * 0.25
    assert max(figure["data"][1]["y"]) >= 8, "the quarantine and node failures show"


def test_the_past_is_consistent_idempotent_and_left_alone_by_the_meter(seeded):
    from billing.models import AllocationMeter, BudgetAlert, LostWork, UsageDaily, UsageRecord
    from scheduler.models import Allocation, Job, NodeEvent
    from scheduler.states import FINAL_STATES
    from tenants.models import AuditEntry

    now = seeded
    jobs = Job.objects.all()
    assert jobs.count() > 500
    assert not jobs.exclude(state__in=list(FINAL_STATES)).exists()
    assert not jobs.filter(finished_at__gt=now).exists()
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()
    # No GPU held twice at once: per GPU, each allocation starts after the previous one ended.
    last_end = {}
    for node, gpu, began, ended in Allocation.objects.order_by(
        "node_id", "gpu_index", "started_at"
    ).values_list("node_id", "gpu_index", "started_at", "ended_at"):
        assert began >= last_end.get((node, gpu), began)
        last_end[(node, gpu)] = ended
    usage = UsageRecord.objects.aggregate(s=Sum("gpu_seconds"), c=Sum("cost"))
    daily = UsageDaily.objects.aggregate(s=Sum("gpu_seconds"), c=Sum("cost"))
    assert usage["s"] == pytest.approx(daily["s"])
    assert usage["c"] == daily["c"]
    # the past ran on the demo cluster, and its spend says so (billing splits spend by cluster)
    demo_cluster = Job.objects.values_list("cluster_id", flat=True).first()
    assert set(UsageRecord.objects.values_list("cluster_id", flat=True).distinct()) == {
        demo_cluster
    }
    assert set(UsageDaily.objects.values_list("cluster_id", flat=True).distinct()) == {demo_cluster}
    assert AllocationMeter.objects.filter(finalized=False).count() == 0
    assert jobs.filter(requeued=True).count() >= 3
    assert LostWork.objects.filter(kind="preempted").exists()
    assert LostWork.objects.filter(kind="node_failed").exists()
    assert NodeEvent.objects.filter(kind="quarantined").count() == 1
    assert BudgetAlert.objects.filter(threshold=100).exists()
    assert AuditEntry.objects.filter(action="node.quarantine").exists()

    # Seeding again adds nothing; the live meter does not re-read the past.
    from billing.meter import meter_run

    jobs_before = Job.objects.count()
    call_command("seed_demo", stdout=io.StringIO())
    assert Job.objects.count() == jobs_before
    before = UsageDaily.objects.aggregate(c=Sum("cost"))["c"]
    rows = UsageRecord.objects.count()
    meter_run(now=timezone.now())
    assert UsageRecord.objects.count() == rows
    assert UsageDaily.objects.aggregate(c=Sum("cost"))["c"] == before
