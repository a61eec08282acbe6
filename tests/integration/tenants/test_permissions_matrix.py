"""The role matrix of tenants.permissions, checked through the REST API a client would use:
who may submit, cancel, read, manage members, ask for quota, decide requests and set quotas."""

import pytest

from tenants.models import Membership, QuotaRequest

from .conftest import make_user

pytestmark = pytest.mark.django_db

# role in vision -> may (submit, cancel, read jobs, manage members, request quota, set quota,
# decide requests)
MATRIX = {
    "owner": (True, True, True, True, True, False, False),
    "admin": (True, True, True, True, True, False, False),
    "member": (True, True, True, False, False, False, False),
    "viewer": (False, False, True, False, False, False, False),
    "outsider": (False, False, False, False, False, False, False),
    "platform": (True, True, True, True, True, True, True),
}


@pytest.mark.parametrize("role", list(MATRIX))
def test_role_matrix(platform, teams, role, api_as, submit):
    if role == "platform":
        user = platform["admin"]
    elif role == "outsider":
        user = make_user("otto", teams["nlp"], "owner")  # owner elsewhere, nothing here
    else:
        user = make_user(f"u-{role}", teams["vision"], role)
    may_submit, may_cancel, may_read, may_manage, may_request, may_set, may_decide = MATRIX[role]
    client = api_as(user)

    submitted = submit(user)
    assert (submitted.status_code == 201) == may_submit, submitted.json()
    job_id = submitted.json()["id"] if may_submit else submit(platform["alice"]).json()["id"]

    read = client.get(f"/api/v1/jobs/{job_id}/")
    assert (read.status_code == 200) == may_read
    if not may_read:
        assert read.status_code == 404

    cancel = client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert (cancel.status_code == 200) == may_cancel, cancel.json()

    member = client.post(
        "/api/v1/teams/vision/members/", {"username": "bob", "role": "viewer"}, format="json"
    )
    assert (member.status_code == 201) == may_manage, member.json()
    assert Membership.objects.filter(user=platform["bob"], team=teams["vision"]).exists() == (
        may_manage
    )

    request = client.post(
        "/api/v1/quota-requests/",
        {"team": "vision", "gpu_model": "h100-80gb", "guaranteed_gpus": 2, "reason": "r"},
        format="json",
    )
    assert (request.status_code == 201) == may_request, request.json()

    quota = client.post(
        "/api/v1/quotas/",
        {"team": "vision", "gpu_model": "h100-80gb", "guaranteed_gpus": 1, "borrow_limit_gpus": 0},
        format="json",
    )
    assert (quota.status_code == 201) == may_set

    pending = QuotaRequest.objects.create(
        team=teams["vision"],
        gpu_model=platform["cluster"].nodes.first().gpu_model,
        requested_by=platform["alice"],
        guaranteed_gpus=1,
        borrow_limit_gpus=0,
        reason="x",
    )
    decide = client.post(
        f"/api/v1/quota-requests/{pending.pk}/reject/", {"comment": "no"}, format="json"
    )
    assert (decide.status_code == 200) == may_decide
