"""Quota requests: team admins ask, platform admins approve (applied) or reject (with a comment),
expiry reverts exactly what was applied, idempotently."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import DomainError
from tenants import quotas as quota_services
from tenants.models import AuditEntry, Quota, QuotaRequest

pytestmark = pytest.mark.django_db


@pytest.fixture
def h100(gpu_models):
    return gpu_models["h100"]


def _quota(team, model):
    q = Quota.objects.filter(team=team, gpu_model=model).first()
    return (q.guaranteed_gpus, q.borrow_limit_gpus) if q else None


def _ask(user, team, model, n, *, days=None, borrow=None):
    until = timezone.now() + timedelta(days=days) if days else None
    return quota_services.quota_request_create(
        user=user,
        team=team,
        gpu_model=model,
        guaranteed_gpus=n,
        borrow_limit_gpus=borrow,
        reason="paper deadline",
        until=until,
    )


def test_request_approve_applies_and_expiry_reverts(platform, teams, h100, vera):
    admin = platform["admin"]
    quota_services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=4, borrow_limit_gpus=2
    )
    req = _ask(vera, teams["vision"], h100, 8, days=7)
    assert req.status == "pending" and req.borrow_limit_gpus == 2  # kept the current limit
    assert _quota(teams["vision"], h100) == (4, 2)
    approved = quota_services.quota_request_approve(user=admin, request_id=req.pk, comment="ok")
    assert approved.status == "approved" and approved.decided_by == admin
    assert _quota(teams["vision"], h100) == (8, 2)
    # Not due yet: nothing happens.
    assert quota_services.quota_requests_expire(timezone.now()) == 0
    later = timezone.now() + timedelta(days=8)
    assert quota_services.quota_requests_expire(later) == 1
    assert _quota(teams["vision"], h100) == (4, 2)
    assert QuotaRequest.objects.get(pk=req.pk).status == "expired"
    # Idempotent: a second run (or a duplicate worker) changes nothing.
    audit_count = AuditEntry.objects.count()
    assert quota_services.quota_requests_expire(later) == 0
    assert _quota(teams["vision"], h100) == (4, 2)
    assert AuditEntry.objects.count() == audit_count
    revert = AuditEntry.objects.get(action="quota.revert")
    assert revert.actor is None and revert.actor_name == "system"
    assert revert.before["guaranteed_gpus"] == 8 and revert.after["guaranteed_gpus"] == 4


def test_overlapping_grants_compose(platform, teams, h100, vera):
    admin = platform["admin"]
    first = _ask(vera, teams["vision"], h100, 4, days=1)  # 0 -> 4 until day 1
    quota_services.quota_request_approve(user=admin, request_id=first.pk)
    second = _ask(vera, teams["vision"], h100, 6, days=3)  # 4 -> 6 until day 3
    quota_services.quota_request_approve(user=admin, request_id=second.pk)
    now = timezone.now()
    quota_services.quota_requests_expire(now + timedelta(days=2))
    assert _quota(teams["vision"], h100)[0] == 2  # the first +4 is gone, the second +2 stays
    quota_services.quota_requests_expire(now + timedelta(days=4))
    assert _quota(teams["vision"], h100)[0] == 0


def test_permanent_request_never_expires(platform, teams, h100, vera):
    req = _ask(vera, teams["vision"], h100, 3)
    quota_services.quota_request_approve(user=platform["admin"], request_id=req.pk)
    assert quota_services.quota_requests_expire(timezone.now() + timedelta(days=3650)) == 0
    assert _quota(teams["vision"], h100)[0] == 3


def test_pending_request_past_its_date_expires_without_change(platform, teams, h100, vera):
    req = _ask(vera, teams["vision"], h100, 3, days=1)
    quota_services.quota_requests_expire(timezone.now() + timedelta(days=2))
    assert QuotaRequest.objects.get(pk=req.pk).status == "expired"
    assert _quota(teams["vision"], h100) is None


def test_reject_needs_a_comment_and_changes_nothing(platform, teams, h100, vera):
    req = _ask(vera, teams["vision"], h100, 3)
    with pytest.raises(DomainError) as err:
        quota_services.quota_request_reject(user=platform["admin"], request_id=req.pk, comment=" ")
    assert err.value.field == "comment"
    rejected = quota_services.quota_request_reject(
        user=platform["admin"], request_id=req.pk, comment="no budget"
    )
    assert rejected.status == "rejected" and rejected.decision_comment == "no budget"
    assert _quota(teams["vision"], h100) is None
    with pytest.raises(DomainError) as err:
        quota_services.quota_request_approve(user=platform["admin"], request_id=req.pk)
    assert err.value.status_code == 409


def test_approval_respects_overcommit(platform, teams, h100, vera):
    req = _ask(vera, teams["vision"], h100, 20)
    with pytest.raises(DomainError) as err:
        quota_services.quota_request_approve(user=platform["admin"], request_id=req.pk)
    assert err.value.field == "guaranteed_gpus"
    assert QuotaRequest.objects.get(pk=req.pk).status == "pending"
    quota_services.quota_request_approve(
        user=platform["admin"], request_id=req.pk, confirm_overcommit=True
    )
    assert _quota(teams["vision"], h100)[0] == 20


def test_who_may_ask_and_decide(platform, teams, h100, vera, nick):
    with pytest.raises(DomainError) as err:  # a member
        _ask(platform["alice"], teams["vision"], h100, 2)
    assert err.value.status_code == 403
    with pytest.raises(DomainError) as err:  # another team's admin
        _ask(nick, teams["vision"], h100, 2)
    assert err.value.status_code == 404
    req = _ask(vera, teams["vision"], h100, 2)
    with pytest.raises(DomainError) as err:  # team admins do not approve their own
        quota_services.quota_request_approve(user=vera, request_id=req.pk)
    assert err.value.status_code == 403
    with pytest.raises(DomainError) as err:
        _ask(vera, teams["vision"], h100, -2)
    assert "guaranteed_gpus" in err.value.errors
    with pytest.raises(DomainError) as err:
        quota_services.quota_request_create(
            user=vera,
            team=teams["vision"],
            gpu_model=h100,
            guaranteed_gpus=2,
            reason="",
            until=timezone.now() - timedelta(days=1),
        )
    assert {"reason", "until"} <= set(err.value.errors)
    assert QuotaRequest.objects.count() == 1


def test_rest_flow(platform, teams, h100, vera, nick, api_as):
    body = {
        "team": "vision",
        "gpu_model": "h100-80gb",
        "guaranteed_gpus": 4,
        "reason": "eval sprint",
        "until": (timezone.now() + timedelta(days=2)).isoformat(),
    }
    created = api_as(vera).post("/api/v1/quota-requests/", body, format="json")
    assert created.status_code == 201, created.json()
    rid = created.json()["id"]
    # The other team's admin neither sees it nor can file one for vision.
    assert api_as(nick).get(f"/api/v1/quota-requests/{rid}/").status_code == 404
    assert api_as(nick).get("/api/v1/quota-requests/").json()["results"] == []
    smuggled = api_as(nick).post("/api/v1/quota-requests/", body, format="json")
    assert smuggled.status_code == 400 and "team" in smuggled.json()
    # A member of vision sees it but cannot approve.
    assert api_as(platform["alice"]).get(f"/api/v1/quota-requests/{rid}/").status_code == 200
    assert api_as(vera).post(f"/api/v1/quota-requests/{rid}/approve/", {}).status_code == 403
    approved = api_as(platform["admin"]).post(
        f"/api/v1/quota-requests/{rid}/approve/", {"comment": "fine"}, format="json"
    )
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert _quota(teams["vision"], h100) == (4, 0)
    again = api_as(platform["admin"]).post(
        f"/api/v1/quota-requests/{rid}/reject/", {"comment": "x"}, format="json"
    )
    assert again.status_code == 409


@pytest.mark.django_db(transaction=True)
def test_two_approvals_at_once_revert_to_the_quota_before_them(platform, teams, h100, vera):
    """Two temporary requests of one team approved at the same moment: the second read the
    quota from before the first (4) and stored its difference against it (+2 instead of -2),
    so when both expired the team was left with 0 of its 4 GPUs. Approvals of one GPU model now
    wait for each other, and expiry gives back exactly the quota from before."""
    from tests.integration.concurrency import race

    admin = platform["admin"]
    quota_services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=4, borrow_limit_gpus=0
    )
    first = _ask(vera, teams["vision"], h100, 8, days=1)
    second = _ask(vera, teams["vision"], h100, 6, days=3)
    outcome = race(
        lambda: quota_services.quota_request_approve(user=admin, request_id=first.pk),
        lambda: quota_services.quota_request_approve(user=admin, request_id=second.pk),
    )
    assert isinstance(outcome, QuotaRequest) and outcome.status == "approved"
    assert _quota(teams["vision"], h100) == (6, 0)
    now = timezone.now()
    quota_services.quota_requests_expire(now + timedelta(days=2))
    assert _quota(teams["vision"], h100) == (2, 0)
    quota_services.quota_requests_expire(now + timedelta(days=4))
    assert _quota(teams["vision"], h100) == (4, 0)


@pytest.mark.django_db(transaction=True)
def test_a_rejection_racing_an_approval_says_what_happened(platform, teams, h100, vera):
    """Approved and rejected at the same moment: one decision wins, the other is a 409 that says
    what the request became (it said "the request is already pending": the state it read
    before it waited)."""
    from tests.integration.concurrency import race

    admin = platform["admin"]
    req = _ask(vera, teams["vision"], h100, 4)
    outcome = race(
        lambda: quota_services.quota_request_approve(user=admin, request_id=req.pk),
        lambda: quota_services.quota_request_reject(user=admin, request_id=req.pk, comment="no"),
    )
    assert isinstance(outcome, DomainError) and outcome.status_code == 409
    assert outcome.message == "the request is already approved"
    req.refresh_from_db()
    assert req.status == "approved" and req.decision_comment == ""
    assert _quota(teams["vision"], h100) == (4, 0)
    assert not AuditEntry.objects.filter(action="quota_request.reject").exists()
