"""Who may do what: the one place where roles become permissions.

The API, the portal and the websocket consumers all ask these functions; none of them checks a
role on its own.
"""

from __future__ import annotations

from .models import MANAGE_ROLES, SUBMIT_ROLES, Membership, Team


def is_platform_admin(user) -> bool:
    return bool(user and user.is_authenticated and user.is_superuser)


def team_ids_of(user) -> set[int]:
    """Ids of the teams ``user`` belongs to, in any role."""
    if not user or not user.is_authenticated:
        return set()
    return set(Membership.objects.filter(user=user).values_list("team_id", flat=True))


def role_in(user, team: Team) -> str | None:
    if not user or not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def can_view_team(user, team: Team) -> bool:
    return is_platform_admin(user) or role_in(user, team) is not None


def can_submit_to(user, team: Team) -> bool:
    """Members and above submit and cancel their team's jobs; platform admins anywhere."""
    return is_platform_admin(user) or role_in(user, team) in SUBMIT_ROLES


def can_manage_team(user, team: Team) -> bool:
    """Team owners and admins manage memberships and ask for quota changes."""
    return is_platform_admin(user) or role_in(user, team) in MANAGE_ROLES


def visible_teams(user):
    """The teams whose objects ``user`` may see."""
    if is_platform_admin(user):
        return Team.objects.all()
    if not user or not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).distinct()
