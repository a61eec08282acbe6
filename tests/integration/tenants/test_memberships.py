"""Team owners and admins manage memberships; only owners touch the owner role; a team keeps an
owner; other teams' memberships are out of reach."""

import pytest

from scheduler.errors import DomainError
from tenants import services
from tenants.models import AuditEntry, Membership

pytestmark = pytest.mark.django_db


def test_team_admin_adds_and_changes_members(platform, teams, vera):
    services.membership_set(user=vera, team=teams["vision"], username="bob", role="viewer")
    assert Membership.objects.get(user=platform["bob"], team=teams["vision"]).role == "viewer"
    services.membership_set(user=vera, team=teams["vision"], username="bob", role="member")
    entries = AuditEntry.objects.filter(action="membership.set").order_by("id")
    assert [e.after["role"] for e in entries] == ["viewer", "member"]
    assert entries[1].before == {"user": "bob", "role": "viewer"}
    services.membership_remove(user=vera, team=teams["vision"], username="bob")
    assert not Membership.objects.filter(user=platform["bob"], team=teams["vision"]).exists()
    assert AuditEntry.objects.filter(action="membership.remove").count() == 1


@pytest.mark.parametrize("who", ["alice", "charlie"])
def test_members_and_viewers_cannot_manage(platform, teams, who):
    with pytest.raises(DomainError) as err:
        services.membership_set(
            user=platform[who], team=teams["vision"], username="bob", role="member"
        )
    assert err.value.status_code == 403
    assert not Membership.objects.filter(user=platform["bob"], team=teams["vision"]).exists()


def test_other_team_is_not_found(platform, teams, nick):
    with pytest.raises(DomainError) as err:
        services.membership_set(user=nick, team=teams["vision"], username="bob", role="admin")
    assert err.value.status_code == 404
    with pytest.raises(DomainError) as err:
        services.membership_remove(user=nick, team=teams["vision"], username="alice")
    assert err.value.status_code == 404
    assert Membership.objects.filter(user=platform["alice"], team=teams["vision"]).exists()


def test_admin_cannot_grant_or_remove_owner(platform, teams, vera, olga):
    with pytest.raises(DomainError):
        services.membership_set(user=vera, team=teams["vision"], username="vera", role="owner")
    with pytest.raises(DomainError):
        services.membership_remove(user=vera, team=teams["vision"], username="olga")
    services.membership_set(user=olga, team=teams["vision"], username="vera", role="owner")
    assert Membership.objects.get(user=vera, team=teams["vision"]).role == "owner"


def test_last_owner_stays(platform, teams, olga):
    with pytest.raises(DomainError) as err:
        services.membership_set(user=olga, team=teams["vision"], username="olga", role="member")
    assert err.value.status_code == 409
    assert Membership.objects.get(user=olga, team=teams["vision"]).role == "owner"
