"""The meter and the other periodic tasks go on for everyone when one row cannot be processed
(issue 26: "same for metering and the other periodic tasks")."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing import meter
from billing.models import MAX_COST, LostWork, Statement, UsageRecord
from scheduler.models import JobEvent

from .conftest import utc

pytestmark = [pytest.mark.django_db, pytest.mark.engines]


def test_a_loss_too_large_to_price_leaves_every_other_team_metered(
    make_job, allocate, price, bob, platform_admin
):
    """The highest price the book accepts times an enormous loss does not fit a money column:
    that one loss is left out (and logged) instead of failing the whole meter every minute."""
    price("h100", "on_demand", "100000", utc(2026, 1, 1))
    huge = make_job(team="nlp", user=bob, name="giant", lost_gpu_seconds=1e12)
    allocate(huge, "n1", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 1))
    JobEvent.objects.create(job=huge, kind="preempted", time=utc(2026, 12, 1, 1))
    normal = make_job(name="normal", lost_gpu_seconds=3600.0)
    allocate(normal, "n2", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 2))
    JobEvent.objects.create(job=normal, kind="preempted", time=utc(2026, 12, 1, 2))

    result = meter.meter_run(now=utc(2026, 12, 1, 3))  # before the fix: numeric overflow

    assert UsageRecord.objects.filter(job=normal).count() == 2
    assert list(LostWork.objects.values_list("job_id", flat=True)) == [normal.pk]
    assert all(abs(row.cost) <= MAX_COST for row in LostWork.objects.all())
    assert Statement.objects.filter(team__slug="vision").exists()
    assert result.lost_rows == 1
    # The next run neither crashes nor meters the loss twice.
    meter.meter_run(now=utc(2026, 12, 1, 4))
    assert LostWork.objects.count() == 1
    admin = Client()
    admin.force_login(platform_admin)
    assert admin.get("/billing/overview/?month=2026-12").status_code == 200


def test_a_failing_idle_source_does_not_stop_metering(make_job, allocate, price):
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    job = make_job()
    allocate(job, "n1", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 1))

    def broken(slices):
        raise ConnectionError("telemetry database unreachable")

    meter.meter_run(now=utc(2026, 12, 1, 2), idle_source=broken)
    row = UsageRecord.objects.get()
    assert row.cost == Decimal("2.000000") and row.idle_fraction is None


def test_one_quota_request_that_cannot_expire_does_not_block_the_others(
    teams, gpu_models, platform_admin, caplog, monkeypatch
):
    from tenants import quotas as quota_services
    from tenants.models import QuotaRequest, QuotaRequestStatus

    now = timezone.now()
    common = {
        "gpu_model": gpu_models["h100"],
        "requested_by": platform_admin,
        "guaranteed_gpus": 1,
        "borrow_limit_gpus": 0,
        "reason": "r",
        "until": now - timedelta(minutes=1),
        "status": QuotaRequestStatus.PENDING,
    }
    broken = QuotaRequest.objects.create(team=teams["nlp"], **common)
    fine = QuotaRequest.objects.create(team=teams["vision"], **common)
    real_claim = quota_services._claim

    def claim(req_id, **kwargs):  # a storage fault on one row only
        if req_id == broken.pk:
            raise RuntimeError("could not read the row")
        return real_claim(req_id, **kwargs)

    monkeypatch.setattr(quota_services, "_claim", claim)
    quota_services.quota_requests_expire(now)
    fine.refresh_from_db()
    broken.refresh_from_db()
    assert fine.status == QuotaRequestStatus.EXPIRED
    assert broken.status == QuotaRequestStatus.PENDING  # retried by the next run
    assert "could not be expired" in caplog.text
