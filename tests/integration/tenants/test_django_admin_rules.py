"""Django admin refuses the rows the services refuse where such a row would hurt other teams or
the loop, through the services' own checks: posted to the admin's real change pages."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tenants import quotas as quota_services
from tenants import services
from tenants.models import AuditEntry, Quota
from tests.integration.roles import make_user

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
    quota_services.quota_set(
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
    quota_services.quota_set(
        user=admin, team=teams["research"], gpu_model=h100, guaranteed_gpus=12, borrow_limit_gpus=0
    )
    quota = quota_services.quota_set(
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
    quota_services.quota_set(
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
    quota = quota_services.quota_set(
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


def _token_change(client, token, **fields):
    # user and name as the page showed them before they were read-only
    data = {"user": token.user_id, "name": token.name, "expires_at_0": "", "expires_at_1": ""}
    data.update({"revoked_at_0": "", "revoked_at_1": ""})
    data.update(fields)
    return client.post(f"/admin/tenants/apitoken/{token.pk}/change/", data)


def test_admin_cannot_move_a_token_to_another_user_or_add_one(platform, client, api_as):
    """Moved to bob in admin, alice's token made whoever held it bob (bob's team, bob's jobs);
    a token added in admin had no key, and a second one was a unique-key 500."""
    from tenants.models import ApiToken

    alice, bob = platform["alice"], platform["bob"]
    token, raw = services.token_create(user=alice, name="laptop")
    client.force_login(platform["admin"])
    response = _token_change(client, token, user=bob.pk, name="renamed")
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.user == alice and token.name == "laptop"
    assert client.get("/admin/tenants/apitoken/add/").status_code == 403
    response = client.post("/admin/tenants/apitoken/add/", {"user": bob.pk, "name": "x"})
    assert response.status_code == 403
    assert ApiToken.objects.count() == 1


def test_admin_revokes_a_token_and_cannot_bring_it_back(platform, client):
    from rest_framework.test import APIClient

    token, raw = services.token_create(user=platform["alice"], name="laptop")
    holder = APIClient()
    holder.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert holder.get("/api/v1/jobs/").status_code == 200
    client.force_login(platform["admin"])
    response = _token_change(client, token, revoked_at_0="2026-01-02", revoked_at_1="03:04:05")
    assert response.status_code == 302
    assert holder.get("/api/v1/jobs/").status_code == 401
    response = _token_change(client, token)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["revoked_at"] == [
        "a revoked token stays revoked; its owner makes a new one"
    ]
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert holder.get("/api/v1/jobs/").status_code == 401


def _team_post(team, rows):
    """The team's admin page as posted, with ``rows`` its membership rows: (membership or None
    for a new row, user, role, delete)."""
    data = {
        "slug": team.slug,
        "name": team.name,
        "parent": team.parent_id or "",
        "fair_share_weight": str(team.fair_share_weight),
        "memberships-TOTAL_FORMS": str(len(rows)),
        "memberships-INITIAL_FORMS": str(sum(1 for m, *_ in rows if m is not None)),
        "quotas-TOTAL_FORMS": "0",
        "quotas-INITIAL_FORMS": "0",
    }
    for i, (membership, user, role, delete) in enumerate(rows):
        data.update(
            {
                f"memberships-{i}-id": membership.pk if membership else "",
                f"memberships-{i}-team": team.pk,
                f"memberships-{i}-user": user.pk,
                f"memberships-{i}-role": role,
            }
        )
        if delete:
            data[f"memberships-{i}-DELETE"] = "on"
    return data


@pytest.mark.parametrize("how", ["demoted", "removed"])
def test_admin_team_page_keeps_the_last_owner(platform, teams, client, how):
    """Demoted or removed on the team's admin page, vision's only owner left a team nobody could
    manage but platform admins; the portal and the API refuse it (membership_set/remove)."""
    from tenants.models import Membership

    vision, alice, charlie = teams["vision"], platform["alice"], platform["charlie"]
    owner = Membership.objects.get(team=vision, user=alice)
    owner.role = "owner"
    owner.save()
    viewer = Membership.objects.get(team=vision, user=charlie)
    rows = [
        (owner, alice, "member" if how == "demoted" else "owner", how == "removed"),
        (viewer, charlie, "viewer", False),
    ]
    client.force_login(platform["admin"])
    response = client.post(f"/admin/tenants/team/{vision.pk}/change/", _team_post(vision, rows))
    assert response.status_code == 200
    formset = response.context["inline_admin_formsets"][0].formset
    assert formset.non_form_errors() == ["a team keeps at least one owner"]
    assert set(vision.memberships.values_list("user__username", "role")) == {
        ("alice", "owner"),
        ("charlie", "viewer"),
    }
    assert not AuditEntry.objects.filter(action__startswith="membership.").exists()


def test_admin_team_page_hands_the_owner_role_over(platform, teams, client):
    """Demoting the owner while another member becomes one leaves the team an owner: saved."""
    from tenants.models import Membership

    vision, alice, charlie = teams["vision"], platform["alice"], platform["charlie"]
    owner = Membership.objects.get(team=vision, user=alice)
    owner.role = "owner"
    owner.save()
    viewer = Membership.objects.get(team=vision, user=charlie)
    rows = [(owner, alice, "member", False), (viewer, charlie, "owner", False)]
    client.force_login(platform["admin"])
    response = client.post(f"/admin/tenants/team/{vision.pk}/change/", _team_post(vision, rows))
    assert response.status_code == 302
    assert set(vision.memberships.values_list("user__username", "role")) == {
        ("alice", "member"),
        ("charlie", "owner"),
    }
    # A team with no owner (made under Teams) keeps taking members.
    nlp, bob = teams["nlp"], platform["bob"]
    (member,) = nlp.memberships.all()
    rows = [(member, bob, "admin", False), (None, alice, "viewer", False)]
    response = client.post(f"/admin/tenants/team/{nlp.pk}/change/", _team_post(nlp, rows))
    assert response.status_code == 302
    assert set(nlp.memberships.values_list("user__username", "role")) == {
        ("bob", "admin"),
        ("alice", "viewer"),
    }


def test_admin_team_page_cannot_move_a_membership_to_another_user(platform, teams, client):
    """With the user of an existing row editable, picking bob on alice's owner row made bob
    vision's owner and took alice out of the team in one save: a move no service makes (a
    membership is added for a user and removed; only its role changes), which the last-owner
    rule did not see, as no owner left. A new row still picks its user."""
    from tenants.models import Membership

    vision, alice, charlie = teams["vision"], platform["alice"], platform["charlie"]
    owner = Membership.objects.get(team=vision, user=alice)
    owner.role = "owner"
    owner.save()
    viewer = Membership.objects.get(team=vision, user=charlie)
    rows = [
        (owner, platform["bob"], "owner", False),
        (viewer, charlie, "viewer", False),
        (None, make_user("dora"), "member", False),
    ]
    client.force_login(platform["admin"])
    response = client.post(f"/admin/tenants/team/{vision.pk}/change/", _team_post(vision, rows))
    assert response.status_code == 302
    assert set(vision.memberships.values_list("user__username", "role")) == {
        ("alice", "owner"),
        ("charlie", "viewer"),
        ("dora", "member"),
    }
    owner.refresh_from_db()
    assert owner.user == alice
    assert not AuditEntry.objects.filter(action="membership.set").exists()


def test_admin_cannot_delete_an_approved_temporary_quota_request(
    platform, teams, gpu_models, client, olga
):
    """Vision was granted 4 H100s until tomorrow. Deleted in admin, the request took with it the
    difference its expiry reverts: the 4 GPUs stayed vision's for good."""
    from tenants.models import QuotaRequest

    until = timezone.now() + timedelta(days=1)
    request = quota_services.quota_request_create(
        user=olga,
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=4,
        reason="paper deadline",
        until=until,
    )
    quota_services.quota_request_approve(user=platform["admin"], request_id=request.pk)
    client.force_login(platform["admin"])
    response = client.post(f"/admin/tenants/quotarequest/{request.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert QuotaRequest.objects.filter(pk=request.pk).exists()
    assert quota_services.quota_requests_expire(until + timedelta(seconds=1)) == 1
    assert Quota.objects.get(team=teams["vision"]).guaranteed_gpus == 0
