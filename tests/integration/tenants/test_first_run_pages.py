"""What the first platform admin of a new site sees before anything exists: no team, no cluster,
no GPU model. Each empty page says what is missing and where to add it, instead of a message meant
for a member ("You are not a member of any team", read by the one user who sees every team)."""

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def first_admin(client):
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    return client


def test_the_team_pages_of_an_empty_site_point_the_admin_at_adding_a_team(first_admin):
    for path in ("/teams/", "/teams/manage/"):
        page = first_admin.get(path).content.decode()
        assert "You are not a member of any team" not in page, path
        assert "No teams yet" in page, path
        assert 'href="/teams/manage/#team-form"' in page, path


def test_a_member_without_a_team_is_still_told_so(client):
    member = get_user_model().objects.create_user("newcomer", password="pw")
    client.force_login(member)
    page = client.get("/teams/").content.decode()
    assert "You are not a member of any team" in page
    assert "/teams/manage/" not in page


def test_the_cluster_page_of_an_empty_site_says_how_to_add_a_cluster(first_admin):
    page = first_admin.get("/cluster/").content.decode()
    assert "No nodes yet" in page
    assert 'href="/admin/scheduler/cluster/"' in page
    assert "manage.py import_nodes" in page


def test_a_member_is_not_sent_to_django_admin(client):
    member = get_user_model().objects.create_user("newcomer", password="pw")
    client.force_login(member)
    page = client.get("/cluster/").content.decode()
    assert "No nodes yet" in page and "/admin/" not in page


def test_the_submit_form_tells_a_user_with_no_team_to_submit_to_why_and_whom_to_ask(client):
    """The form showed a required Team list with nothing in it, and a submission could only fail."""
    member = get_user_model().objects.create_user("newcomer", password="pw")
    client.force_login(member)
    page = client.get("/jobs/new/").content.decode()
    assert "no team you may submit jobs to" in page
    assert "team owner" in page
    assert "<form" not in page.split("<h1>", 1)[1].split("</main>", 1)[0]


def test_the_submit_form_tells_the_first_admin_to_add_a_team(first_admin):
    page = first_admin.get("/jobs/new/").content.decode()
    assert "No teams yet" in page and 'href="/teams/manage/#team-form"' in page


def test_the_home_page_of_an_empty_site_points_the_admin_at_adding_a_team(first_admin):
    """It said "Your teams have no quotas yet" to the one user who sees every team, of teams
    that did not exist."""
    page = first_admin.get("/").content.decode()
    quota = page.split('id="quota-heading"', 1)[1].split("</section>", 1)[0]
    assert "no quotas yet" not in quota
    assert "No teams yet" in quota and 'href="/teams/manage/#team-form"' in quota


def test_the_home_page_tells_a_member_without_a_team_so(client):
    member = get_user_model().objects.create_user("newcomer", password="pw")
    client.force_login(member)
    page = client.get("/").content.decode()
    quota = page.split('id="quota-heading"', 1)[1].split("</section>", 1)[0]
    assert "You are not a member of any team" in quota and "no quotas yet" not in quota
    assert "/teams/manage/" not in page


def test_the_home_page_of_teams_without_quotas_still_says_so(first_admin):
    from tenants.models import Team

    Team.objects.create(slug="vision", name="Vision")
    page = first_admin.get("/").content.decode()
    assert "Your teams have no quotas yet" in page and "No teams yet" not in page
