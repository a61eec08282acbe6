"""The periodic expiry task wraps the idempotent service."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tenants import quotas as quota_services
from tenants.models import Quota, QuotaRequest
from tenants.tasks import expire_quota_requests

pytestmark = pytest.mark.django_db


def test_task_reverts_due_requests_once(platform, teams, gpu_models, vera):
    req = quota_services.quota_request_create(
        user=vera,
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=3,
        reason="burst",
        until=timezone.now() + timedelta(seconds=1),
    )
    quota_services.quota_request_approve(user=platform["admin"], request_id=req.pk)
    QuotaRequest.objects.filter(pk=req.pk).update(until=timezone.now() - timedelta(seconds=1))
    assert expire_quota_requests.apply().get() == 1
    assert expire_quota_requests.apply().get() == 0
    assert Quota.objects.get(team=teams["vision"]).guaranteed_gpus == 0
