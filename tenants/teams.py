"""Writes of the team tree and its memberships: teams created, renamed, re-weighted and moved
(never into a cycle), members added, given another role or removed (a team keeps an owner).

The conventions of every tenancy write hold (``tenants.services``): keyword-only, atomic,
permission checked, audited in the same transaction, refusals naming the field.
"""

from __future__ import annotations

from collections.abc import Collection
from numbers import Real
from types import EllipsisType
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from core.bounds import finite_number, number_error
from core.errors import Conflict, DomainError, FieldErrors, NotFound, duplicate_refused
from core.names import name_errors

from . import permissions
from .audit import audit_record
from .models import Membership, Role, Team
from .services import PermissionDenied


def _team_state(team: Team) -> dict[str, Any]:
    return {
        "slug": team.slug,
        "name": team.name,
        "parent": team.parent.slug if team.parent is not None else None,
        "fair_share_weight": team.fair_share_weight,
    }


def _weight(errors: dict[str, list[str]], value: object) -> float | None:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            errors.setdefault("fair_share_weight", []).append("must be a number")
            return None
    # finite_number admits only a Real; the isinstance says so to the type checker.
    if not finite_number(value) or not isinstance(value, Real):
        errors.setdefault("fair_share_weight", []).append("must be a finite number")
        return None
    problem = number_error(Team, "fair_share_weight", value)
    if problem:
        errors.setdefault("fair_share_weight", []).append(problem)
        return None
    return float(value)


def _check_parent(team: Team | None, parent: Team | None, errors: dict[str, list[str]]) -> None:
    if team is not None and team.closes_cycle(parent):
        errors.setdefault("parent", []).append("would make the tree a cycle")


@transaction.atomic
def team_create(
    *,
    user: permissions.Caller,
    slug: str,
    name: str,
    parent: Team | None = None,
    fair_share_weight: object = 1.0,
) -> Team:
    """Add a team to the tree (platform admins only). Audited."""
    if not permissions.can_manage_quotas(user):
        raise PermissionDenied("only platform admins change the team tree", field="slug")
    errors: dict[str, list[str]] = {}
    weight = _weight(errors, fair_share_weight)
    if not slug or Team.objects.filter(slug=slug).exists():
        errors.setdefault("slug", []).append("must be a new, non-empty slug")
    if not name or not name.strip():
        errors.setdefault("name", []).append("must not be blank")
    for message in name_errors(name):
        errors.setdefault("name", []).append(message)
    if errors:
        raise FieldErrors(errors)
    assert weight is not None  # refused above otherwise
    with duplicate_refused("slug", "must be a new, non-empty slug"):
        team = Team.objects.create(
            slug=slug, name=name.strip(), parent=parent, fair_share_weight=weight
        )
    audit_record(actor=user, action="team.create", target=team, team=team, after=_team_state(team))
    return team


@transaction.atomic
def team_update(
    *,
    user: permissions.Caller,
    team: Team,
    fair_share_weight: object = None,
    name: str | None = None,
    parent: Team | None | EllipsisType = ...,
) -> Team:
    """Change a team's weight, name or parent (platform admins only). Cycles are refused.

    A change of parent locks every team first (in id order) and checks the tree as it is then:
    a check against the tree read before another admin's concurrent move let two moves make a
    cycle together (a -> b while b -> c, c under a), or deadlock on each other's foreign-key
    check (vision under nlp while nlp under vision)."""
    if not permissions.can_manage_quotas(user):
        raise PermissionDenied("only platform admins change the team tree", field="team")
    if parent is not ...:
        teams = Team.objects.select_for_update(no_key=True).order_by("pk")
        list(teams.values_list("pk", flat=True))
        if parent is not None:
            fresh = Team.objects.filter(pk=parent.pk).first()
            if fresh is None:
                raise FieldErrors({"parent": ["no such team"]})
            parent = fresh
    # The parent is read after the lock, not joined to it: after a wait for a concurrent move,
    # a joined parent would be the one from before that move (and the audit entry would say so).
    team = Team.objects.select_for_update(no_key=True).get(pk=team.pk)
    before = _team_state(team)
    errors: dict[str, list[str]] = {}
    if fair_share_weight is not None:
        weight = _weight(errors, fair_share_weight)
        if weight is not None:
            team.fair_share_weight = weight
    if name is not None:
        if not name.strip():
            errors.setdefault("name", []).append("must not be blank")
        for message in name_errors(name):
            errors.setdefault("name", []).append(message)
        team.name = name.strip()
    if parent is not ...:
        _check_parent(team, parent, errors)
        team.parent = parent
    if errors:
        raise FieldErrors(errors)
    team.save()
    after = _team_state(team)
    if after != before:
        audit_record(
            actor=user, action="team.update", target=team, team=team, before=before, after=after
        )
    return team


@transaction.atomic
def membership_set(*, user: permissions.Caller, team: Team, username: str, role: str) -> Membership:
    """Add ``username`` to ``team`` with ``role`` or change their role.

    Team owners and admins (and platform admins) manage memberships; only owners grant or remove
    the owner role; the last owner cannot be demoted. A team the caller cannot see is NotFound.
    Changes to one team's memberships are serialized (:func:`_lock_memberships`).
    """
    _lock_memberships(team)
    if not permissions.can_view_team(user, team):
        raise NotFound("no such team", field="team")
    if role not in Role.values:
        raise DomainError(f"must be one of {', '.join(Role.values)}", field="role")
    target = get_user_model().objects.filter(username=username, is_active=True).first()
    if target is None:
        raise DomainError(f"no active user '{username}'", field="username")
    existing = Membership.objects.select_for_update().filter(team=team, user=target).first()
    current = existing.role if existing else None
    if not permissions.can_set_role(user, team, current=current, new=role):
        raise PermissionDenied("you may not give or change this role", field="role")
    if existing is not None and current == Role.OWNER and role != Role.OWNER:
        _keep_an_owner(team, leaving=existing)
    if existing is None:
        membership = Membership.objects.create(team=team, user=target, role=role)
    else:
        existing.role = role
        existing.save(update_fields=["role"])
        membership = existing
    if current != role:
        audit_record(
            actor=user,
            action="membership.set",
            target=membership,
            team=team,
            before={"user": username, "role": current} if current else None,
            after={"user": username, "role": role},
        )
    return membership


def _lock_memberships(team: Team) -> None:
    """Lock the team's row for the rest of the transaction, before any membership is read.

    The caller's role and "a team keeps one owner" are read from other rows than the one being
    changed: without one lock per team, two owners demoting or removing each other at once both
    saw the other still an owner, and the team was left with none. FOR NO KEY UPDATE, so rows
    that merely reference the team (a job, an audit entry) are not held up by it."""
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()


def _keep_an_owner(team: Team, *, leaving: Membership) -> None:
    problem = owner_loss_problem(team=team, leaving=[leaving.pk])
    if problem:
        raise Conflict(problem, field="role")


def owner_loss_problem(*, team: Team, leaving: Collection[int], new_owners: int = 0) -> str | None:
    """Why the owner memberships ``leaving`` (ids: removed, or given another role) may not leave
    ``team`` while ``new_owners`` others become owners, or None: a team keeps at least one
    owner. Call inside the transaction that makes the change: the team is locked
    (:func:`_lock_memberships`) so that two changes at once cannot each leave the other's
    owner as the last."""
    if not leaving or new_owners > 0:
        return None
    _lock_memberships(team)
    others = Membership.objects.filter(team=team, role=Role.OWNER).exclude(pk__in=list(leaving))
    if others.exists():
        return None
    return "a team keeps at least one owner"


@transaction.atomic
def membership_remove(*, user: permissions.Caller, team: Team, username: str) -> None:
    """Remove ``username`` from ``team`` (same rules as :func:`membership_set`)."""
    _lock_memberships(team)
    if not permissions.can_view_team(user, team):
        raise NotFound("no such team", field="team")
    membership = (
        Membership.objects.select_for_update(of=("self",))
        .filter(team=team, user__username=username)
        .first()
    )
    if membership is None:
        raise NotFound("no such member", field="username")
    if not permissions.can_set_role(user, team, current=membership.role, new=None):
        raise PermissionDenied("you may not remove this member", field="username")
    if membership.role == Role.OWNER:
        _keep_an_owner(team, leaving=membership)
    before = {"user": username, "role": membership.role}
    membership_id = membership.pk
    membership.delete()
    audit_record(
        actor=user,
        action="membership.remove",
        target_type="membership",
        target_id=membership_id,
        team=team,
        before=before,
    )
