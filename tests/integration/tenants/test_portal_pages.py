"""The portal pages of tenancy: the tree with use against quota, quota management for platform
admins with field errors and the overcommit confirmation, members, requests, the audit log and
its CSV export."""

import csv
import io

import pytest

from scheduler.models import Allocation, Job, Node
from tenants import quotas as quota_services
from tenants.models import AuditEntry, Membership, Quota, QuotaRequest

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


def test_index_shows_my_teams_with_use_against_quota(platform, teams, gpu_models, as_user, submit):
    quota_services.quota_set(
        user=platform["admin"],
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=4,
        borrow_limit_gpus=2,
    )
    job = Job.objects.get(pk=submit(platform["alice"], gpus_per_worker=2).json()["id"])
    node = Node.objects.filter(gpu_model=gpu_models["h100"]).first()
    for index in (0, 1):
        Allocation.objects.create(job=job, node=node, gpu_index=index, started_at=job.submitted_at)
    page = as_user(platform["alice"]).get("/teams/").content.decode()
    assert 'data-team="vision"' in page and 'data-team="nlp"' not in page
    assert "h100-80gb" in page and "2 / 2" in page
    admin_page = as_user(platform["admin"]).get("/teams/").content.decode()
    assert 'data-team="nlp"' in admin_page and 'data-team="research"' in admin_page
    assert "2 / 2" in admin_page  # research's subtree holds vision's 2 GPUs


def test_manage_is_for_platform_admins(platform, as_user):
    assert as_user(platform["alice"]).get("/teams/manage/").status_code == 403
    response = as_user(platform["alice"]).post(
        "/teams/manage/quota/",
        {"team": "vision", "gpu_model": "h100-80gb", "guaranteed_gpus": 1, "borrow_limit_gpus": 0},
    )
    assert response.status_code == 403 and Quota.objects.count() == 0
    assert as_user(platform["admin"]).get("/teams/manage/").status_code == 200


@pytest.mark.parametrize(
    "guaranteed,borrow,field",
    [
        ("-1", "0", "guaranteed_gpus"),
        ("1.5", "0", "guaranteed_gpus"),
        ("2", "-4", "borrow_limit_gpus"),
        ("2", "x", "borrow_limit_gpus"),
    ],
)
def test_quota_form_names_the_bad_field(platform, as_user, guaranteed, borrow, field):
    response = as_user(platform["admin"]).post(
        "/teams/manage/quota/",
        {
            "team": "vision",
            "gpu_model": "h100-80gb",
            "guaranteed_gpus": guaranteed,
            "borrow_limit_gpus": borrow,
        },
    )
    assert response.status_code == 400
    assert f'data-errors-for="{field}"' in response.content.decode()
    assert Quota.objects.count() == 0


def test_quota_form_overcommit_needs_the_checkbox(platform, as_user):
    client = as_user(platform["admin"])
    body = {
        "team": "vision",
        "gpu_model": "h100-80gb",
        "guaranteed_gpus": 40,
        "borrow_limit_gpus": 0,
    }
    refused = client.post("/teams/manage/quota/", body)
    assert refused.status_code == 400
    html = refused.content.decode()
    assert 'data-errors-for="guaranteed_gpus"' in html and "capacity of 16" in html
    assert Quota.objects.count() == 0
    saved = client.post("/teams/manage/quota/", {**body, "confirm_overcommit": "on"})
    assert saved.status_code == 302 and Quota.objects.get().guaranteed_gpus == 40


def test_manage_weights_teams_priorities(platform, teams, as_user):
    client = as_user(platform["admin"])
    assert (
        client.post("/teams/manage/teams/vision/weight/", {"fair_share_weight": "4"}).status_code
        == 302
    )
    teams["vision"].refresh_from_db()
    assert teams["vision"].fair_share_weight == 4
    bad = client.post("/teams/manage/teams/vision/weight/", {"fair_share_weight": "-1"})
    assert bad.status_code == 400
    assert (
        client.post(
            "/teams/manage/teams/new/",
            {"slug": "audio", "name": "Audio", "parent": "research", "fair_share_weight": "1"},
        ).status_code
        == 302
    )
    assert (
        client.post(
            "/teams/manage/priorities/", {"name": "urgent", "value": "5000", "description": "now"}
        ).status_code
        == 302
    )
    assert client.post("/teams/manage/priorities/urgent/delete/").status_code == 302
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"team.update", "team.create", "priority.set", "priority.delete"} <= actions


def test_team_page_members_and_requests(platform, teams, as_user, vera):
    client = as_user(vera)
    page = client.get("/teams/team/vision/").content.decode()
    assert 'data-member="alice"' in page and "Add a member" in page
    assert (
        client.post(
            "/teams/team/vision/members/", {"username": "bob", "role": "viewer"}
        ).status_code
        == 302
    )
    assert Membership.objects.get(user=platform["bob"], team=teams["vision"]).role == "viewer"
    new = client.post(
        "/teams/team/vision/quota-requests/new/",
        {"gpu_model": "h100-80gb", "guaranteed_gpus": "-2", "reason": "x"},
    )
    assert new.status_code == 400 and 'data-errors-for="guaranteed_gpus"' in new.content.decode()
    ok = client.post(
        "/teams/team/vision/quota-requests/new/",
        {"gpu_model": "h100-80gb", "guaranteed_gpus": "2", "reason": "ablation"},
    )
    assert ok.status_code == 302
    req = QuotaRequest.objects.get()
    # A member sees the team but cannot manage it or ask for quota.
    member = as_user(platform["alice"])
    page = member.get("/teams/team/vision/").content.decode()
    assert "Add a member" not in page and "ablation" in page
    assert member.get("/teams/team/vision/quota-requests/new/").status_code == 403
    assert (
        member.post(
            "/teams/team/vision/members/", {"username": "alice", "role": "admin"}
        ).status_code
        == 403
    )
    assert member.post(f"/teams/requests/{req.pk}/approve/").status_code == 403
    # The platform admin approves from the requests page.
    admin = as_user(platform["admin"])
    assert "ablation" in admin.get("/teams/requests/?status=pending").content.decode()
    assert admin.post(f"/teams/requests/{req.pk}/approve/", {"comment": "ok"}).status_code == 302
    req.refresh_from_db()
    assert req.status == "approved"
    assert Quota.objects.get(team=teams["vision"]).guaranteed_gpus == 2


def test_audit_log_browse_and_csv(platform, teams, gpu_models, as_user, vera):
    quota_services.quota_set(
        user=platform["admin"],
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=4,
        borrow_limit_gpus=0,
        comment='=HYPERLINK("x")',
    )
    quota_services.quota_set(
        user=platform["admin"],
        team=teams["nlp"],
        gpu_model=gpu_models["h100"],
        guaranteed_gpus=2,
        borrow_limit_gpus=0,
    )
    admin = as_user(platform["admin"])
    page = admin.get("/teams/audit/?team=vision").content.decode()
    assert page.count("data-entry=") == 1
    export = admin.get("/teams/audit.csv")
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0][:3] == ["time", "actor", "action"]
    assert len(rows) == 3
    vision_row = next(r for r in rows[1:] if r[6] == "vision")
    assert vision_row[1] == "root" and vision_row[2] == "quota.set"
    assert '"guaranteed_gpus": 4' in vision_row[8] and vision_row[7] == ""
    assert vision_row[9].startswith("'=")  # no formula injection into spreadsheets
    # A team admin reads only their team's entries; a member reads none.
    team_admin = as_user(vera)
    rows = list(
        csv.reader(
            io.StringIO(b"".join(team_admin.get("/teams/audit.csv").streaming_content).decode())
        )
    )
    assert {r[6] for r in rows[1:]} == {"vision"}
    assert as_user(platform["alice"]).get("/teams/audit/").status_code == 403
    assert as_user(platform["alice"]).get("/teams/audit.csv").status_code == 403


def test_manage_prefills_the_quota_form(platform, teams, gpu_models, as_user):
    quota_services.quota_set(
        user=platform["admin"],
        team=teams["nlp"],
        gpu_model=gpu_models["a100"],
        guaranteed_gpus=7,
        borrow_limit_gpus=3,
    )
    page = as_user(platform["admin"]).get("/teams/manage/?team=nlp&gpu_model=a100-40gb")
    html = page.content.decode()
    assert (
        'name="guaranteed_gpus" value="7"' in html and 'name="borrow_limit_gpus" value="3"' in html
    )
    assert "?team=nlp&amp;gpu_model=a100-40gb#quota-form" in html
