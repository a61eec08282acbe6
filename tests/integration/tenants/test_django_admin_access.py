"""Who reaches Django admin: platform admins only. Admin is one global view of every team's rows
(jobs with their env values, tokens, audit entries, nodes) and of every user; a staff user who
is not a platform admin, given model permissions the way Django admin invites (a group with
"can view job", "can change user"), read other teams' secrets and made themselves a superuser.
Posted to the admin's real pages, with the permissions granted through a real group."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from scheduler.models import Node
from telemetry.tokens import node_token_issue
from tenants.models import ApiToken, AuditEntry, Membership, Team
from tenants.services import token_create
from tests.integration.roles import make_user

pytestmark = pytest.mark.django_db

_GRANTED = (
    "scheduler.view_job",
    "scheduler.change_node",
    "tenants.view_apitoken",
    "tenants.view_auditentry",
    "tenants.change_team",
    "tenants.add_membership",
    "tenants.change_membership",
    "auth.view_user",
    "auth.change_user",
)


@pytest.fixture
def helpdesk():
    """An operator group such as Django admin invites one to make: views and edits across apps."""
    group = Group.objects.create(name="helpdesk")
    for dotted in _GRANTED:
        app_label, codename = dotted.split(".")
        group.permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return group


@pytest.fixture
def staff_owner(teams, helpdesk):
    """Vision's owner, made staff and put in the operator group, not a platform admin."""
    user = make_user("olga", teams["vision"], "owner", is_staff=True)
    user.groups.add(helpdesk)
    return user


@pytest.fixture
def nlp_job(platform, submit):
    response = submit(platform["bob"], team="nlp", name="nlp-secret-run", env={"HF": "hf_nlpkey"})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _refused(response) -> bool:
    """The admin's answer to someone it does not let in: its login page."""
    return response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_staff_who_are_not_platform_admins_do_not_see_other_teams_rows(
    platform, staff_owner, nlp_job
):
    bob_token = token_create(user=platform["bob"], name="ci")[0]
    client = _login(staff_owner)
    for path in (
        "/admin/",
        "/admin/scheduler/job/",
        f"/admin/scheduler/job/{nlp_job}/change/",
        "/admin/tenants/apitoken/",
        f"/admin/tenants/apitoken/{bob_token.pk}/change/",
        "/admin/tenants/auditentry/",
        "/admin/scheduler/node/",
        "/admin/auth/user/",
    ):
        response = client.get(path)
        body = response.content.decode()
        assert _refused(response), (path, response.status_code)
        assert "nlp-secret-run" not in body and "hf_nlpkey" not in body, path
        assert bob_token.key_hash not in body, path


def test_staff_who_are_not_platform_admins_cannot_make_themselves_superuser(staff_owner):
    client = _login(staff_owner)
    response = client.post(
        f"/admin/auth/user/{staff_owner.pk}/change/",
        {
            "username": "olga",
            "is_active": "on",
            "is_staff": "on",
            "is_superuser": "on",
            "date_joined_0": "2026-12-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert _refused(response), response.status_code
    staff_owner.refresh_from_db()
    assert not staff_owner.is_superuser


def test_staff_who_are_not_platform_admins_cannot_join_another_team(teams, staff_owner):
    nlp = teams["nlp"]
    client = _login(staff_owner)
    response = client.post(
        f"/admin/tenants/team/{nlp.pk}/change/",
        {
            "name": nlp.name,
            "fair_share_weight": nlp.fair_share_weight,
            "memberships-TOTAL_FORMS": "1",
            "memberships-INITIAL_FORMS": "0",
            "memberships-0-user": staff_owner.pk,
            "memberships-0-role": "owner",
            "quotas-TOTAL_FORMS": "0",
            "quotas-INITIAL_FORMS": "0",
        },
    )
    assert _refused(response), response.status_code
    assert not Membership.objects.filter(user=staff_owner, team=nlp).exists()
    assert not AuditEntry.objects.filter(action__startswith="membership.").exists()


def test_staff_without_any_permission_see_nothing_either(teams):
    staff = make_user("sam", teams["vision"], "member", is_staff=True)
    assert _refused(_login(staff).get("/admin/"))


def test_platform_admins_keep_admin_but_not_token_hashes(platform, nlp_job):
    bob_token = token_create(user=platform["bob"], name="ci")[0]
    client = _login(platform["admin"])
    assert client.get("/admin/").status_code == 200
    job_page = client.get(f"/admin/scheduler/job/{nlp_job}/change/")
    # Platform admins see env values wherever a job is shown (docs/tenancy.md).
    assert job_page.status_code == 200 and "hf_nlpkey" in job_page.content.decode()
    token_page = client.get(f"/admin/tenants/apitoken/{bob_token.pk}/change/")
    assert token_page.status_code == 200
    # No use to anyone reading a page, and a hash of a token is still a stored secret.
    assert bob_token.key_hash not in token_page.content.decode()
    agent_token = node_token_issue(node=Node.objects.get(name="n1"))[0]
    agent_page = client.get(f"/admin/telemetry/nodeagenttoken/{agent_token.pk}/change/")
    assert agent_page.status_code == 200
    assert agent_token.key_hash not in agent_page.content.decode()
    assert ApiToken.objects.filter(pk=bob_token.pk, revoked_at=None).exists()
    assert Team.objects.filter(slug="nlp").exists()
