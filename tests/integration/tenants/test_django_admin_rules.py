"""Django admin refuses the rows the services refuse where such a row would hurt other teams or
the loop, through the services' own checks: posted to the admin's real change pages."""

import pytest

from tenants import services
from tenants.models import AuditEntry, Quota

pytestmark = pytest.mark.django_db


def _quota_post(team, gpu_model, guaranteed_gpus, borrow_limit_gpus=0):
    return {
        "team": team.pk,
        "gpu_model": gpu_model.pk,
        "guaranteed_gpus": guaranteed_gpus,
        "borrow_limit_gpus": borrow_limit_gpus,
    }


def test_admin_refuses_guarantees_above_the_clusters_capacity(platform, teams, gpu_models, client):
    """The cluster has 16 H100s; vision holds 10. Admin saved nlp's 10 more as posted (20
    guaranteed of 16): reclaiming nlp's "guarantee" preempted vision inside its own."""
    h100 = gpu_models["h100"]
    admin = platform["admin"]
    services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=10, borrow_limit_gpus=0
    )
    client.force_login(admin)
    response = client.post("/admin/tenants/quota/add/", _quota_post(teams["nlp"], h100, 10))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["guaranteed_gpus"]
    assert "guarantees of h100-80gb would sum to 20, above the cluster's capacity of 16" in errors
    assert list(Quota.objects.values_list("team__slug", "guaranteed_gpus")) == [("vision", 10)]
    assert not AuditEntry.objects.filter(action__startswith="quota.create").exists()
    # Within capacity it saves.
    response = client.post("/admin/tenants/quota/add/", _quota_post(teams["nlp"], h100, 6))
    assert response.status_code == 302
    assert Quota.objects.get(team=teams["nlp"]).guaranteed_gpus == 6


def test_admin_refuses_a_childs_guarantee_above_its_parents(platform, teams, gpu_models, client):
    h100 = gpu_models["h100"]
    admin = platform["admin"]
    services.quota_set(
        user=admin, team=teams["research"], gpu_model=h100, guaranteed_gpus=12, borrow_limit_gpus=0
    )
    quota = services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=8, borrow_limit_gpus=0
    )
    client.force_login(admin)
    response = client.post(
        f"/admin/tenants/quota/{quota.pk}/change/", _quota_post(teams["vision"], h100, 14)
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["guaranteed_gpus"]
    assert "guarantees under research would sum to 14, above its own guarantee of 12 h100-80gb" in (
        errors
    )
    quota.refresh_from_db()
    assert quota.guaranteed_gpus == 8


def test_admin_team_page_refuses_an_inline_quota_that_overcommits(
    platform, teams, gpu_models, client
):
    h100 = gpu_models["h100"]
    admin = platform["admin"]
    services.quota_set(
        user=admin, team=teams["research"], gpu_model=h100, guaranteed_gpus=12, borrow_limit_gpus=0
    )
    nlp = teams["nlp"]
    members = list(nlp.memberships.all())
    data = {
        "slug": "nlp",
        "name": "NLP",
        "parent": teams["research"].pk,
        "fair_share_weight": "1",
        "memberships-TOTAL_FORMS": str(len(members)),
        "memberships-INITIAL_FORMS": str(len(members)),
        "quotas-TOTAL_FORMS": "1",
        "quotas-INITIAL_FORMS": "0",
        "quotas-0-gpu_model": h100.pk,
        "quotas-0-guaranteed_gpus": "13",
        "quotas-0-borrow_limit_gpus": "0",
        "quotas-0-team": nlp.pk,
    }
    for i, m in enumerate(members):
        data.update(
            {
                f"memberships-{i}-id": m.pk,
                f"memberships-{i}-team": nlp.pk,
                f"memberships-{i}-user": m.user_id,
                f"memberships-{i}-role": m.role,
            }
        )
    client.force_login(admin)
    response = client.post(f"/admin/tenants/team/{nlp.pk}/change/", data)
    assert response.status_code == 200
    inline_errors = response.context["inline_admin_formsets"][1].formset.errors
    assert "under research would sum to 13" in " ".join(inline_errors[0]["guaranteed_gpus"])
    assert not Quota.objects.filter(team=nlp).exists()


def test_admin_edits_a_borrow_limit_of_a_quota_overcommitted_with_confirmation(
    platform, teams, gpu_models, client
):
    """An overcommit an admin confirmed through the service stays editable in its other fields."""
    h100 = gpu_models["h100"]
    admin = platform["admin"]
    quota = services.quota_set(
        user=admin,
        team=teams["vision"],
        gpu_model=h100,
        guaranteed_gpus=20,
        borrow_limit_gpus=0,
        confirm_overcommit=True,
    )
    client.force_login(admin)
    response = client.post(
        f"/admin/tenants/quota/{quota.pk}/change/", _quota_post(teams["vision"], h100, 20, 4)
    )
    assert response.status_code == 302
    quota.refresh_from_db()
    assert (quota.guaranteed_gpus, quota.borrow_limit_gpus) == (20, 4)
