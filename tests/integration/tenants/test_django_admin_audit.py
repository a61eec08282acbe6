"""Changes made through Django admin are audited too (including inline quota rows)."""

import pytest

from tenants.models import AuditEntry, Quota

pytestmark = pytest.mark.django_db


def test_admin_quota_and_weight_changes_are_audited(platform, teams, gpu_models, client):
    client.force_login(platform["admin"])
    response = client.post(
        "/admin/tenants/quota/add/",
        {
            "team": teams["vision"].pk,
            "gpu_model": gpu_models["h100"].pk,
            "guaranteed_gpus": 3,
            "borrow_limit_gpus": 1,
        },
    )
    assert response.status_code == 302, response.content[:500]
    quota = Quota.objects.get()
    entry = AuditEntry.objects.get(action="quota.create")
    assert entry.after["guaranteed_gpus"] == 3 and entry.team == teams["vision"]
    assert entry.actor == platform["admin"] and entry.comment == "via Django admin"
    client.post(
        f"/admin/tenants/quota/{quota.pk}/change/",
        {
            "team": teams["vision"].pk,
            "gpu_model": gpu_models["h100"].pk,
            "guaranteed_gpus": 5,
            "borrow_limit_gpus": 1,
        },
    )
    change = AuditEntry.objects.get(action="quota.set")
    assert change.before["guaranteed_gpus"] == 3 and change.after["guaranteed_gpus"] == 5
    client.post(f"/admin/tenants/quota/{quota.pk}/delete/", {"post": "yes"})
    assert not Quota.objects.exists()
    assert AuditEntry.objects.get(action="quota.delete").before["guaranteed_gpus"] == 5


def test_admin_inline_quota_rows_are_audited(platform, teams, gpu_models, client):
    client.force_login(platform["admin"])
    vision = teams["vision"]
    members = list(vision.memberships.all())
    data = {
        "slug": "vision",
        "name": "Vision",
        "parent": teams["research"].pk,
        "fair_share_weight": "3",
        "memberships-TOTAL_FORMS": str(len(members)),
        "memberships-INITIAL_FORMS": str(len(members)),
        "quotas-TOTAL_FORMS": "1",
        "quotas-INITIAL_FORMS": "0",
        "quotas-0-gpu_model": gpu_models["a100"].pk,
        "quotas-0-guaranteed_gpus": "2",
        "quotas-0-borrow_limit_gpus": "0",
        "quotas-0-team": vision.pk,
    }
    for i, m in enumerate(members):
        data.update(
            {
                f"memberships-{i}-id": m.pk,
                f"memberships-{i}-team": vision.pk,
                f"memberships-{i}-user": m.user_id,
                f"memberships-{i}-role": m.role,
            }
        )
    response = client.post(f"/admin/tenants/team/{vision.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert AuditEntry.objects.get(action="team.set").after["fair_share_weight"] == 3.0
    inline = AuditEntry.objects.get(action="quota.create")
    assert inline.after["guaranteed_gpus"] == 2 and inline.team == vision


def test_admin_refuses_a_parent_that_makes_the_tree_a_cycle(platform, teams, client):
    client.force_login(platform["admin"])
    research = teams["research"]
    members = list(research.memberships.all())
    data = {
        "slug": "research",
        "name": "Research",
        "parent": teams["vision"].pk,  # vision is research's child
        "fair_share_weight": "1",
        "memberships-TOTAL_FORMS": str(len(members)),
        "memberships-INITIAL_FORMS": str(len(members)),
        "quotas-TOTAL_FORMS": "0",
        "quotas-INITIAL_FORMS": "0",
    }
    for i, m in enumerate(members):
        data.update(
            {
                f"memberships-{i}-id": m.pk,
                f"memberships-{i}-team": research.pk,
                f"memberships-{i}-user": m.user_id,
                f"memberships-{i}-role": m.role,
            }
        )
    response = client.post(f"/admin/tenants/team/{research.pk}/change/", data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["parent"] == ["would make the tree a cycle"]
    research.refresh_from_db()
    assert research.parent_id is None
    assert not AuditEntry.objects.filter(action="team.set").exists()
    # The tree is intact: every team still shows on the teams page.
    rows = client.get("/teams/").context["rows"]
    assert [row.team.slug for row in rows] == ["research", "nlp", "vision"]


def test_admin_cannot_rename_a_teams_slug(platform, teams, client):
    """The slug names the team in settings outside the database (the Slurm backend's
    team_accounts). Renamed, vision's jobs lost their account, and a new team given the freed
    slug would have run as vision's account, with its files."""
    client.force_login(platform["admin"])
    vision = teams["vision"]
    members = list(vision.memberships.all())
    data = {
        "slug": "cv",
        "name": "Vision",
        "parent": teams["research"].pk,
        "fair_share_weight": "1",
        "memberships-TOTAL_FORMS": str(len(members)),
        "memberships-INITIAL_FORMS": str(len(members)),
        "quotas-TOTAL_FORMS": "0",
        "quotas-INITIAL_FORMS": "0",
    }
    for i, m in enumerate(members):
        data.update(
            {
                f"memberships-{i}-id": m.pk,
                f"memberships-{i}-team": vision.pk,
                f"memberships-{i}-user": m.user_id,
                f"memberships-{i}-role": m.role,
            }
        )
    response = client.post(f"/admin/tenants/team/{vision.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    vision.refresh_from_db()
    assert vision.slug == "vision"
    # A new team still chooses its slug.
    assert client.get("/admin/tenants/team/add/").context["adminform"].form.fields["slug"]


def test_admin_bulk_deletes_are_audited(platform, teams, gpu_models, client):
    """The list's "Delete selected" action deleted quotas (and priority classes, clusters)
    without a trace: it bypasses the page's delete, which alone was audited."""
    from scheduler.models import Cluster

    h100 = gpu_models["h100"]
    quotas = [
        Quota.objects.create(team=teams[slug], gpu_model=h100, guaranteed_gpus=2)
        for slug in ("vision", "nlp")
    ]
    client.force_login(platform["admin"])
    response = client.post(
        "/admin/tenants/quota/",
        {"action": "delete_selected", "_selected_action": [q.pk for q in quotas], "post": "yes"},
    )
    assert response.status_code == 302
    assert not Quota.objects.exists()
    deleted = AuditEntry.objects.filter(action="quota.delete")
    assert sorted(e.team.slug for e in deleted) == ["nlp", "vision"]
    assert all(e.before["guaranteed_gpus"] == 2 for e in deleted)

    cloud = Cluster.objects.create(name="cloud")
    response = client.post(
        "/admin/scheduler/cluster/",
        {"action": "delete_selected", "_selected_action": [cloud.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert AuditEntry.objects.get(action="cluster.delete").before["name"] == "cloud"
