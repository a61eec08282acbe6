"""Who may do what: the one place where roles become permissions.

The API, the portal and the websocket consumers all ask these functions; none of them checks a
role on its own. (Which stream groups a socket joins is ``frontend.consumers.socket_groups``, built
from ``team_ids_of`` and ``is_platform_admin``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypeGuard, cast

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from rest_framework.permissions import BasePermission

from .models import MANAGE_ROLES, SUBMIT_ROLES, Membership, Role, Team

if TYPE_CHECKING:  # rest_framework.views imports the authentication classes, which import this
    from django.http import HttpRequest
    from rest_framework.request import Request
    from rest_framework.views import APIView

# Who asks: `request.user`, signed in or anonymous (None where no request is at hand).
Caller: TypeAlias = User | AnonymousUser | None


def signed_in(request: HttpRequest | Request) -> User:
    """The caller of a view behind a login check (``login_required``, or DRF's IsAuthenticated,
    the default permission): a User. The stubs type ``request.user`` as any user, the anonymous
    one included."""
    return cast(User, request.user)


def is_platform_admin(user: Caller) -> TypeGuard[User]:
    return bool(user and user.is_authenticated and user.is_superuser)


class IsPlatformAdmin(BasePermission):
    """DRF permission: platform admins only (``is_platform_admin``), not every staff user
    (DRF's IsAdminUser lets ``is_staff`` through)."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return is_platform_admin(request.user)


def team_ids_of(user: Caller) -> set[int]:
    """Ids of the teams ``user`` belongs to, in any role."""
    if not user or not user.is_authenticated:
        return set()
    return set(Membership.objects.filter(user=user).values_list("team_id", flat=True))


def role_in(user: Caller, team: Team) -> str | None:
    if not user or not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def submission_target(user: Caller, slug: str) -> tuple[Team | None, str | None]:
    """The team ``slug`` names and the caller's role in it, in one query, or (None, None) when the
    caller may not see it (a platform admin sees every team, with no role of their own)."""
    if not user or not user.is_authenticated or not isinstance(slug, str):
        return None, None
    membership = (
        Membership.objects.filter(user=user, team__slug=slug).select_related("team").first()
    )
    if membership is not None:
        return membership.team, membership.role
    if is_platform_admin(user):
        return Team.objects.filter(slug=slug).first(), None
    return None, None


def can_view_team(user: Caller, team: Team) -> bool:
    return is_platform_admin(user) or role_in(user, team) is not None


def can_submit_to(user: Caller, team: Team) -> bool:
    """Members and above submit and cancel their team's jobs; platform admins anywhere."""
    return is_platform_admin(user) or role_in(user, team) in SUBMIT_ROLES


def can_manage_team(user: Caller, team: Team) -> bool:
    """Team owners and admins manage memberships and ask for quota changes."""
    return is_platform_admin(user) or role_in(user, team) in MANAGE_ROLES


def visible_teams(user: Caller) -> QuerySet[Team]:
    """The teams whose objects ``user`` may see."""
    if is_platform_admin(user):
        return Team.objects.all()
    if not user or not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).distinct()


def can_manage_quotas(user: Caller) -> bool:
    """Quotas, the team tree, fair-share weights and priority classes: platform admins only."""
    return is_platform_admin(user)


def can_request_quota(user: Caller, team: Team) -> bool:
    """Team owners and admins ask for quota changes; platform admins decide them."""
    return can_manage_team(user, team)


def can_decide_quota_request(user: Caller) -> bool:
    return is_platform_admin(user)


def can_set_role(user: Caller, team: Team, *, current: str | None, new: str | None) -> bool:
    """May ``user`` move a member of ``team`` from role ``current`` to ``new`` (None = absent)?

    Team owners and admins manage memberships, but only owners (and platform admins) grant or
    take away the owner role, so an admin cannot promote themselves above the owner.
    """
    if is_platform_admin(user):
        return True
    mine = role_in(user, team)
    if mine not in MANAGE_ROLES:
        return False
    touches_owner = Role.OWNER in (current, new)
    return mine == Role.OWNER or not touches_owner


def can_view_audit(user: Caller, team: Team | None = None) -> bool:
    """Platform admins read the whole log; team owners and admins read their team's entries."""
    if is_platform_admin(user):
        return True
    if team is None:
        return bool(auditable_team_ids(user))
    return can_manage_team(user, team)


def auditable_team_ids(user: Caller) -> set[int]:
    """Teams whose audit entries ``user`` may read (empty for members and viewers)."""
    if not user or not user.is_authenticated:
        return set()
    return set(
        Membership.objects.filter(user=user, role__in=MANAGE_ROLES).values_list(
            "team_id", flat=True
        )
    )
