"""Team owners and admins manage memberships; only owners touch the owner role; a team keeps an
owner; other teams' memberships are out of reach."""

import pytest

from core.errors import DomainError
from tenants import teams as team_services
from tenants.models import AuditEntry, Membership

pytestmark = pytest.mark.django_db


def test_team_admin_adds_and_changes_members(platform, teams, vera):
    team_services.membership_set(user=vera, team=teams["vision"], username="bob", role="viewer")
    assert Membership.objects.get(user=platform["bob"], team=teams["vision"]).role == "viewer"
    team_services.membership_set(user=vera, team=teams["vision"], username="bob", role="member")
    entries = AuditEntry.objects.filter(action="membership.set").order_by("id")
    assert [e.after["role"] for e in entries] == ["viewer", "member"]
    assert entries[1].before == {"user": "bob", "role": "viewer"}
    team_services.membership_remove(user=vera, team=teams["vision"], username="bob")
    assert not Membership.objects.filter(user=platform["bob"], team=teams["vision"]).exists()
    assert AuditEntry.objects.filter(action="membership.remove").count() == 1


@pytest.mark.parametrize("who", ["alice", "charlie"])
def test_members_and_viewers_cannot_manage(platform, teams, who):
    with pytest.raises(DomainError) as err:
        team_services.membership_set(
            user=platform[who], team=teams["vision"], username="bob", role="member"
        )
    assert err.value.status_code == 403
    assert not Membership.objects.filter(user=platform["bob"], team=teams["vision"]).exists()


def test_other_team_is_not_found(platform, teams, nick):
    with pytest.raises(DomainError) as err:
        team_services.membership_set(user=nick, team=teams["vision"], username="bob", role="admin")
    assert err.value.status_code == 404
    with pytest.raises(DomainError) as err:
        team_services.membership_remove(user=nick, team=teams["vision"], username="alice")
    assert err.value.status_code == 404
    assert Membership.objects.filter(user=platform["alice"], team=teams["vision"]).exists()


def test_admin_cannot_grant_or_remove_owner(platform, teams, vera, olga):
    with pytest.raises(DomainError):
        team_services.membership_set(user=vera, team=teams["vision"], username="vera", role="owner")
    with pytest.raises(DomainError):
        team_services.membership_remove(user=vera, team=teams["vision"], username="olga")
    team_services.membership_set(user=olga, team=teams["vision"], username="vera", role="owner")
    assert Membership.objects.get(user=vera, team=teams["vision"]).role == "owner"


def test_last_owner_stays(platform, teams, olga):
    with pytest.raises(DomainError) as err:
        team_services.membership_set(
            user=olga, team=teams["vision"], username="olga", role="member"
        )
    assert err.value.status_code == 409
    assert Membership.objects.get(user=olga, team=teams["vision"]).role == "owner"


def test_rest_members(platform, teams, vera, nick, api_as):
    listed = api_as(platform["alice"]).get("/api/v1/teams/vision/members/")
    assert listed.status_code == 200
    assert {m["username"] for m in listed.json()} == {"alice", "charlie", "vera"}
    made = api_as(vera).post(
        "/api/v1/teams/vision/members/", {"username": "bob", "role": "viewer"}, format="json"
    )
    assert made.status_code == 201 and made.json()["role"] == "viewer"
    # A member cannot manage; another team's admin gets a 404; a bad role names the field.
    assert (
        api_as(platform["alice"])
        .post("/api/v1/teams/vision/members/", {"username": "bob", "role": "admin"}, format="json")
        .status_code
        == 403
    )
    assert api_as(nick).get("/api/v1/teams/vision/members/").status_code == 404
    assert api_as(nick).delete("/api/v1/teams/vision/members/bob/").status_code == 404
    bad = api_as(vera).post(
        "/api/v1/teams/vision/members/", {"username": "bob", "role": "god"}, format="json"
    )
    assert bad.status_code == 400 and "role" in bad.json()
    assert api_as(vera).delete("/api/v1/teams/vision/members/bob/").status_code == 204
    assert not Membership.objects.filter(user=platform["bob"], team=teams["vision"]).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", ["demote", "remove"])
def test_two_owners_leaving_at_once_leave_the_team_an_owner(platform, teams, olga, change):
    """Two owners each demoting (or removing) the other at the same moment: each check saw the
    other still an owner, so both changes passed and the team kept no owner at all. The second
    change now waits for the first and is refused: by then its author is no owner (403), or no
    member at all (404)."""
    from tests.integration.concurrency import race
    from tests.integration.roles import make_user

    vision = teams["vision"]
    oscar = make_user("oscar", vision, "owner")

    def leave(by, username):
        if change == "demote":
            return team_services.membership_set(
                user=by, team=vision, username=username, role="admin"
            )
        return team_services.membership_remove(user=by, team=vision, username=username)

    second = race(lambda: leave(olga, "oscar"), lambda: leave(oscar, "olga"))
    assert isinstance(second, DomainError) and second.status_code in (403, 404)
    assert list(
        Membership.objects.filter(team=vision, role="owner").values_list(
            "user__username", flat=True
        )
    ) == ["olga"]
    assert AuditEntry.objects.filter(action__startswith="membership.").count() == 1
