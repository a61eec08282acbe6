"""Writes to tenancy state: API tokens, quotas, the team tree, priority classes, memberships and
quota requests.

Every function is keyword-only and atomic, checks permission through ``tenants.permissions``, and
records an audit entry (who, what, before -> after, secrets removed) in the same transaction as the
change, so the log holds exactly the committed changes. Refusals raise ``DomainError`` subclasses
naming the field at fault and write nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from datetime import datetime
from decimal import Decimal
from numbers import Integral, Real
from types import EllipsisType
from typing import Any

from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import ProtectedError, Sum
from django.utils import timezone

from catalogue.models import GpuModel
from core import streams
from core.bounds import MAX_GPUS, finite_number, number_error
from core.errors import Conflict, DomainError, FieldErrors, NotFound, duplicate_refused
from core.names import name_errors, text_errors
from scheduler.models import Node

from . import permissions
from .audit import audit_record
from .models import (
    ApiToken,
    Membership,
    PriorityClass,
    Quota,
    QuotaRequest,
    QuotaRequestStatus,
    Role,
    Team,
    TeamEntitlements,
    hash_token,
)

log = logging.getLogger(__name__)


class PermissionDenied(DomainError):
    """The caller may not do this (403). Used where the object is visible but not writable."""

    status_code = 403


# --- validation helpers -------------------------------------------------------------------------


def _digits(text: str) -> bool:
    """Whether ``text`` is ASCII digits: ``str.isdigit`` also takes "²" (which ``int`` then
    refuses with a ValueError) and "٣" (which it reads as 3)."""
    return text.isascii() and text.isdigit()


def _whole(errors: dict[str, list[str]], field: str, value: object) -> int | None:
    """A non-negative whole number, or an error naming ``field``. Strings of digits are accepted
    (forms send text); floats, negatives and booleans are not."""
    if isinstance(value, str) and _digits(value.strip().lstrip("+")):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, Integral):
        errors.setdefault(field, []).append("must be a whole number")
        return None
    number = int(value)
    if number < 0:
        errors.setdefault(field, []).append("must be >= 0")
        return None
    if number > MAX_GPUS:
        errors.setdefault(field, []).append(f"must be <= {MAX_GPUS}")
        return None
    return number


def _quota_state(quota: Quota | None) -> dict[str, Any] | None:
    if quota is None:
        return None
    return {
        "team": quota.team.slug,
        "gpu_model": quota.gpu_model.name,
        "guaranteed_gpus": quota.guaranteed_gpus,
        "borrow_limit_gpus": quota.borrow_limit_gpus,
    }


def _capacity(gpu_model: GpuModel) -> int:
    total = (
        Node.objects.in_capacity().filter(gpu_model=gpu_model).aggregate(n=Sum("gpu_count"))["n"]
    )
    return int(total or 0)


def _lock_quotas_of(gpu_model: GpuModel) -> None:
    """Serialize every change of the quotas of ``gpu_model`` (set, approve, expire) on its row,
    for the rest of the transaction.

    The overcommit rule and an approval's recorded difference read the other teams' quotas (or
    the team's own before any row exists), which no row lock on the quota being written covers:
    without this, two admins could each pass the check against the other's old value and
    together overcommit, and two approvals could both record a difference from the same old
    quota, so their expiry took back more than they gave."""
    # FOR NO KEY UPDATE: it serializes quota changes without blocking the foreign-key checks of
    # rows that reference the model (a job submitted with it), which would deadlock with them.
    type(gpu_model).objects.select_for_update(no_key=True).filter(pk=gpu_model.pk).first()


def overcommit_problems(*, team: Team, gpu_model: GpuModel, guaranteed_gpus: int) -> list[str]:
    """Why setting ``team``'s guarantee to ``guaranteed_gpus`` would overcommit, or [] if it fits.

    A child's use counts against its ancestors' quotas (policy contract), so the guarantees that
    must fit in the cluster are those of the top-most quota holders of each branch; and the
    children's guarantees of a team that holds a quota must fit in that team's guarantee.
    """
    quotas = {
        q.team_id: q.guaranteed_gpus
        for q in Quota.objects.filter(gpu_model=gpu_model).only("team_id", "guaranteed_gpus")
    }
    quotas[team.pk] = guaranteed_gpus
    parents = dict(Team.objects.values_list("id", "parent_id"))

    def holder_above(team_id: int) -> int | None:
        seen: set[int] = set()
        parent = parents.get(team_id)
        while parent is not None and parent not in seen:
            seen.add(parent)
            if quotas.get(parent, 0) > 0:
                return parent
            parent = parents.get(parent)
        return None

    problems: list[str] = []
    top_sum = sum(g for tid, g in quotas.items() if g > 0 and holder_above(tid) is None)
    capacity = _capacity(gpu_model)
    if top_sum > capacity:
        problems.append(
            f"guarantees of {gpu_model.name} would sum to {top_sum}, above the cluster's "
            f"capacity of {capacity}"
        )
    # The two groups the change can overfill: the one the team belongs to (children of its
    # nearest quota-holding ancestor) when it is raised, and the one under the team itself when
    # it is lowered. (At 0 the team's children join the group above in its place, with no more
    # than it held if they fitted in it.)
    holders = (holder_above(team.pk), team.pk) if guaranteed_gpus > 0 else ()
    for holder in holders:
        if holder is None:
            continue
        group = sum(
            g
            for tid, g in quotas.items()
            if g > 0 and tid != holder and holder_above(tid) == holder
        )
        if group > quotas[holder]:
            name = Team.objects.filter(pk=holder).values_list("slug", flat=True).first()
            problems.append(
                f"guarantees under {name} would sum to {group}, above its own guarantee of "
                f"{quotas[holder]} {gpu_model.name}"
            )
    return problems


# --- tokens -------------------------------------------------------------------------------------


def token_create(
    *, user: User, name: object, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns the row and the plain value (shown once, not stored).

    Only the SHA-256 and an 8-character prefix are stored; the plain value is never logged."""
    if not isinstance(name, str) or not name.strip():
        raise DomainError("must not be blank", field="name")
    if len(name.strip()) > 100:
        raise DomainError("must be at most 100 characters", field="name")
    if problems := name_errors(name):
        raise FieldErrors({"name": problems})
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("must be in the future", field="expires_at")
    raw = ApiToken.generate()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name.strip(),
            key_hash=hash_token(raw),
            key_prefix=raw[:8],
            expires_at=expires_at,
        )
        audit_record(
            actor=user,
            action="token.create",
            target_type="apitoken",
            target_id=token.pk,
            after={"name": token.name, "user": user.get_username(), "expires_at": expires_at},
        )
    return token, raw


def token_exchange(*, username: str, password: str, name: str = "api") -> tuple[ApiToken, str]:
    """Trade a username and password for a new token. Wrong credentials: one vague error."""
    user = authenticate(username=username, password=password)
    if user is None or not user.is_active:
        raise DomainError("invalid username or password", field="non_field_errors")
    return token_create(user=user, name=name)


@transaction.atomic
def token_revoke(*, user: User, token_id: int) -> ApiToken:
    """Revoke one of ``user``'s own live tokens. Another user's token, or a revoked one, is
    NotFound (never tell which). Idempotence is the caller's: a second revoke is NotFound."""
    now = timezone.now()
    updated = ApiToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
        revoked_at=now
    )
    if not updated:
        raise NotFound("no such token", field="id")
    token = ApiToken.objects.get(pk=token_id)
    audit_record(
        actor=user,
        action="token.revoke",
        target_type="apitoken",
        target_id=token.pk,
        before={"name": token.name, "revoked_at": None},
        after={"name": token.name, "revoked_at": now},
    )
    return token


# --- quotas -------------------------------------------------------------------------------------


def _apply_quota(
    *,
    actor: permissions.Caller,
    team: Team,
    gpu_model: GpuModel,
    guaranteed: int,
    borrow: int,
    action: str,
    comment: str = "",
) -> Quota:
    existing = (
        Quota.objects.select_for_update(of=("self",))
        .select_related("team", "gpu_model")
        .filter(team=team, gpu_model=gpu_model)
        .first()
    )
    before = _quota_state(existing)
    quota, _ = Quota.objects.update_or_create(
        team=team,
        gpu_model=gpu_model,
        defaults={"guaranteed_gpus": guaranteed, "borrow_limit_gpus": borrow},
    )
    after = _quota_state(quota)
    if before != after:
        audit_record(
            actor=actor,
            action=action,
            target=quota,
            team=team,
            before=before,
            after=after,
            comment=comment,
        )
    return quota


@transaction.atomic
def quota_set(
    *,
    user: permissions.Caller,
    team: Team | None,
    gpu_model: GpuModel | None,
    guaranteed_gpus: object,
    borrow_limit_gpus: object,
    confirm_overcommit: bool = False,
    comment: str = "",
) -> Quota:
    """Set a team's quota for one GPU model (platform admins only).

    Negative or non-integer values are refused naming the field. If the guarantees of the model
    would sum above the cluster's capacity (or children's above their parent's guarantee) the
    change is refused on ``guaranteed_gpus`` unless ``confirm_overcommit`` is true. Audited.
    """
    if not permissions.can_manage_quotas(user):
        raise PermissionDenied("only platform admins change quotas", field="team")
    errors: dict[str, list[str]] = {}
    if team is None:
        errors["team"] = ["this field is required"]
    if gpu_model is None:
        errors["gpu_model"] = ["this field is required"]
    guaranteed = _whole(errors, "guaranteed_gpus", guaranteed_gpus)
    borrow = _whole(errors, "borrow_limit_gpus", borrow_limit_gpus)
    if problems := text_errors(comment):
        errors["comment"] = problems
    if errors:
        raise FieldErrors(errors)
    # Each None above was refused with its field.
    assert team is not None and gpu_model is not None
    assert guaranteed is not None and borrow is not None
    _lock_quotas_of(gpu_model)
    problems = overcommit_problems(team=team, gpu_model=gpu_model, guaranteed_gpus=guaranteed)
    if problems and not confirm_overcommit:
        raise FieldErrors(
            {"guaranteed_gpus": [*problems, "confirm the overcommit to save it anyway"]}
        )
    if problems:
        comment = (
            (comment + " " if comment else "") + "overcommit confirmed: " + "; ".join(problems)
        )
    return _apply_quota(
        actor=user,
        team=team,
        gpu_model=gpu_model,
        guaranteed=guaranteed,
        borrow=borrow,
        action="quota.set",
        comment=comment,
    )


# --- the team tree ------------------------------------------------------------------------------


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


# --- priority classes ---------------------------------------------------------------------------


def _priority_state(pc: PriorityClass | None) -> dict[str, Any] | None:
    if pc is None:
        return None
    return {
        "name": pc.name,
        "value": pc.value,
        "preemptible_by_default": pc.preemptible_by_default,
        "restricted": pc.restricted,
        "description": pc.description,
    }


@transaction.atomic
def priority_class_set(
    *,
    user: permissions.Caller,
    name: object,
    value: object,
    preemptible_by_default: bool = True,
    restricted: bool = False,
    description: str = "",
) -> PriorityClass:
    """Create or change a priority class by name (platform admins only). A restricted class is
    usable only by teams granted it (:func:`entitlements_set`). Audited."""
    if not permissions.can_manage_quotas(user):
        raise PermissionDenied("only platform admins change priority classes", field="name")
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not name.strip():
        errors["name"] = ["must not be blank"]
    if isinstance(value, str) and _digits(value.strip().lstrip("+-")):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, Integral) or abs(int(value)) > 10**9:
        errors["value"] = ["must be a whole number"]
    if errors:
        raise FieldErrors(errors)
    assert isinstance(name, str) and isinstance(value, Integral)  # refused above otherwise
    existing = PriorityClass.objects.select_for_update().filter(name=name).first()
    # Only a new description is checked: a policy change rewrites the class with the one it
    # has, which may predate the check, and must not fail on a field it did not touch.
    changed = existing is None or (description or "") != existing.description
    if changed and (problems := text_errors(description)):
        raise FieldErrors({"description": problems})
    before = _priority_state(existing)
    pc, _ = PriorityClass.objects.update_or_create(
        name=name,
        defaults={
            "value": int(value),
            "preemptible_by_default": bool(preemptible_by_default),
            "restricted": bool(restricted),
            "description": description or "",
        },
    )
    after = _priority_state(pc)
    if before != after:
        audit_record(actor=user, action="priority.set", target=pc, before=before, after=after)
    return pc


@transaction.atomic
def priority_class_delete(*, user: permissions.Caller, name: str) -> None:
    """Delete an unused priority class (platform admins only); one in use is a Conflict."""
    if not permissions.can_manage_quotas(user):
        raise PermissionDenied("only platform admins change priority classes", field="name")
    # Locked before the deletion looks for what refers to the class: a grant being written
    # (entitlements_set locks the classes it grants) is then committed and deleted with it.
    pc = PriorityClass.objects.select_for_update().filter(name=name).first()
    if pc is None:
        raise NotFound("no such priority class", field="name")
    before = _priority_state(pc)
    try:
        pc.delete()
    except ProtectedError as exc:
        raise Conflict("jobs use this priority class", field="name") from exc
    audit_record(
        actor=user,
        action="priority.delete",
        target_type="priorityclass",
        target_id=name,
        before=before,
    )


# --- entitlements (part of a team's quota settings) ----------------------------------------------


def _entitlements_state(row: TeamEntitlements | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "priority_classes": sorted(row.priority_classes.values_list("name", flat=True)),
        "may_opt_out_of_preemption": row.may_opt_out_of_preemption,
        "max_pending_jobs": row.max_pending_jobs,
        "max_pending_jobs_per_user": row.max_pending_jobs_per_user,
    }


@transaction.atomic
def entitlements_set(
    *,
    user: permissions.Caller,
    team: Team,
    priority_classes: Iterable[object] | None,
    may_opt_out_of_preemption: bool,
    max_pending_jobs: object = None,
    max_pending_jobs_per_user: object = None,
) -> TeamEntitlements:
    """Set what ``team`` may ask of the scheduler (platform admins only): the restricted
    priority classes granted to it (names), whether it may opt out of preemption, and its caps on
    pending jobs (None: the platform's defaults). Grants and the opt-out reach its sub-teams.
    Unknown class names and caps out of bounds are refused naming the field. Audited."""
    if not permissions.can_manage_quotas(user):
        raise PermissionDenied("only platform admins change quota settings", field="team")
    errors: dict[str, list[str]] = {}
    names = sorted({str(n) for n in (priority_classes or [])})
    # Locked (in a fixed order) until the grant is committed: a class deleted meanwhile is then
    # unknown here, the field's 400, instead of failing the grant's foreign key at commit (a
    # 500). FOR NO KEY UPDATE, so submissions naming the class are not held up by it.
    classes = list(
        PriorityClass.objects.select_for_update(no_key=True).filter(name__in=names).order_by("pk")
    )
    unknown = sorted(set(names) - {c.name for c in classes})
    if unknown:
        errors["priority_classes"] = [f"unknown priority class(es): {', '.join(unknown)}"]
    caps: dict[str, int | None] = {}
    for field, value in (
        ("max_pending_jobs", max_pending_jobs),
        ("max_pending_jobs_per_user", max_pending_jobs_per_user),
    ):
        if value is None or value == "":
            caps[field] = None
            continue
        if isinstance(value, str) and _digits(value.strip()):
            value = int(value.strip())
        problem = number_error(TeamEntitlements, field, value)
        # number_error passes only a number (JSON's int or float, a Decimal); the isinstance
        # says so to the type checker.
        if problem or not isinstance(value, int | float | Decimal):
            errors[field] = [problem or "must be a number"]
        else:
            caps[field] = int(value)
    if errors:
        raise FieldErrors(errors)
    row = TeamEntitlements.objects.select_for_update().filter(team=team).first()
    before = _entitlements_state(row)
    row, _ = TeamEntitlements.objects.update_or_create(
        team=team,
        defaults={"may_opt_out_of_preemption": bool(may_opt_out_of_preemption), **caps},
    )
    row.priority_classes.set(classes)
    after = _entitlements_state(row)
    if before != after:
        audit_record(
            actor=user,
            action="entitlements.set",
            target=row,
            team=team,
            before=before,
            after=after,
        )
    return row


# --- memberships --------------------------------------------------------------------------------


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


# --- quota requests -----------------------------------------------------------------------------


def _request_state(req: QuotaRequest) -> dict[str, Any]:
    return {
        "team": req.team.slug,
        "gpu_model": req.gpu_model.name,
        "guaranteed_gpus": req.guaranteed_gpus,
        "borrow_limit_gpus": req.borrow_limit_gpus,
        "until": req.until,
        "status": req.status,
    }


@transaction.atomic
def quota_request_create(
    *,
    user: User,
    team: Team | None,
    gpu_model: GpuModel | None,
    guaranteed_gpus: object,
    borrow_limit_gpus: object = None,
    reason: object,
    until: datetime | None = None,
) -> QuotaRequest:
    """A team owner or admin asks for a new guarantee (and borrow limit) of one GPU model, why,
    and optionally until when. Another team is NotFound; members and viewers are refused."""
    if team is None or not permissions.can_view_team(user, team):
        raise NotFound("no such team", field="team")
    if not permissions.can_request_quota(user, team):
        raise PermissionDenied("only team owners and admins request quota", field="team")
    errors: dict[str, list[str]] = {}
    if gpu_model is None:
        errors["gpu_model"] = ["this field is required"]
    guaranteed = _whole(errors, "guaranteed_gpus", guaranteed_gpus)
    current = Quota.objects.filter(team=team, gpu_model=gpu_model).first() if gpu_model else None
    borrow: int | None
    if borrow_limit_gpus is None or borrow_limit_gpus == "":
        borrow = current.borrow_limit_gpus if current else 0
    else:
        borrow = _whole(errors, "borrow_limit_gpus", borrow_limit_gpus)
    if not isinstance(reason, str) or not reason.strip():
        errors["reason"] = ["say why"]
    elif problems := text_errors(reason):
        errors["reason"] = problems
    if until is not None and until <= timezone.now():
        errors["until"] = ["must be in the future"]
    if errors:
        raise FieldErrors(errors)
    # Each None, and a reason that is not text, was refused above with its field.
    assert gpu_model is not None and guaranteed is not None and borrow is not None
    assert isinstance(reason, str)
    req = QuotaRequest.objects.create(
        team=team,
        gpu_model=gpu_model,
        requested_by=user,
        guaranteed_gpus=guaranteed,
        borrow_limit_gpus=borrow,
        reason=reason.strip(),
        until=until,
    )
    audit_record(
        actor=user,
        action="quota_request.create",
        target=req,
        team=team,
        before=_quota_state(current),
        after=_request_state(req),
        comment=req.reason,
    )
    return req


def _claim(req_id: int, *, source: str, target: str, **fields: Any) -> QuotaRequest | None:
    """Move a request from ``source`` to ``target`` with one conditional UPDATE (compare and
    set), so two admins or two expiry runs cannot both act on it. None when someone else won."""
    updated = QuotaRequest.objects.filter(pk=req_id, status=source).update(status=target, **fields)
    if not updated:
        return None
    return QuotaRequest.objects.select_related("team", "gpu_model").get(pk=req_id)


@transaction.atomic
def quota_request_approve(
    *,
    user: permissions.Caller,
    request_id: int,
    comment: str = "",
    confirm_overcommit: bool = False,
) -> QuotaRequest:
    """Approve a pending request and apply it to the team's quota (platform admins only).

    The applied difference is stored on the request so expiry can revert exactly it. The same
    overcommit rule as :func:`quota_set` applies. A request already decided is a Conflict.
    """
    if not permissions.can_decide_quota_request(user):
        raise PermissionDenied("only platform admins decide quota requests", field="id")
    if problems := text_errors(comment):
        raise FieldErrors({"comment": problems})
    req = QuotaRequest.objects.select_related("team", "gpu_model").filter(pk=request_id).first()
    if req is None:
        raise NotFound("no such quota request", field="id")
    _lock_quotas_of(req.gpu_model)
    req.refresh_from_db(fields=["status"])
    if req.status != QuotaRequestStatus.PENDING:
        raise Conflict(f"the request is already {req.status}", field="status")
    if req.until is not None and req.until <= timezone.now():
        raise Conflict("the request's end date has passed", field="until")
    problems = overcommit_problems(
        team=req.team, gpu_model=req.gpu_model, guaranteed_gpus=req.guaranteed_gpus
    )
    if problems and not confirm_overcommit:
        raise FieldErrors(
            {"guaranteed_gpus": [*problems, "confirm the overcommit to approve it anyway"]}
        )
    current = Quota.objects.filter(team=req.team, gpu_model=req.gpu_model).first()
    old_g = current.guaranteed_gpus if current else 0
    old_b = current.borrow_limit_gpus if current else 0
    now = timezone.now()
    claimed = _claim(
        req.pk,
        source=QuotaRequestStatus.PENDING,
        target=QuotaRequestStatus.APPROVED,
        decided_by=user,
        decided_at=now,
        decision_comment=comment or "",
        applied_guaranteed_delta=req.guaranteed_gpus - old_g,
        applied_borrow_delta=req.borrow_limit_gpus - old_b,
    )
    if claimed is None:
        raise Conflict("the request was decided meanwhile", field="status")
    _apply_quota(
        actor=user,
        team=req.team,
        gpu_model=req.gpu_model,
        guaranteed=req.guaranteed_gpus,
        borrow=req.borrow_limit_gpus,
        action="quota.set",
        comment=f"quota request #{req.pk} approved" + (f": {comment}" if comment else ""),
    )
    audit_record(
        actor=user,
        action="quota_request.approve",
        target=claimed,
        team=req.team,
        before={"status": QuotaRequestStatus.PENDING},
        after=_request_state(claimed),
        comment=comment,
    )
    _publish_decision(claimed)
    return claimed


@transaction.atomic
def quota_request_reject(
    *, user: permissions.Caller, request_id: int, comment: object
) -> QuotaRequest:
    """Reject a pending request with a comment (platform admins only). Nothing else changes."""
    if not permissions.can_decide_quota_request(user):
        raise PermissionDenied("only platform admins decide quota requests", field="id")
    if not isinstance(comment, str) or not comment.strip():
        raise DomainError("say why the request is rejected", field="comment")
    if problems := text_errors(comment):
        raise FieldErrors({"comment": problems})
    req = QuotaRequest.objects.filter(pk=request_id).first()
    if req is None:
        raise NotFound("no such quota request", field="id")
    claimed = _claim(
        req.pk,
        source=QuotaRequestStatus.PENDING,
        target=QuotaRequestStatus.REJECTED,
        decided_by=user,
        decided_at=timezone.now(),
        decision_comment=comment.strip(),
    )
    if claimed is None:
        # Read again: the status read above may be from before a decision this one waited for.
        req.refresh_from_db(fields=["status"])
        raise Conflict(f"the request is already {req.status}", field="status")
    audit_record(
        actor=user,
        action="quota_request.reject",
        target=claimed,
        team=claimed.team,
        before={"status": QuotaRequestStatus.PENDING},
        after={"status": claimed.status},
        comment=claimed.decision_comment,
    )
    _publish_decision(claimed)
    return claimed


def _publish_decision(req: QuotaRequest) -> None:
    """Tell the team's stream (and so its notifications) that a request was decided, after
    commit."""
    streams.publish(
        streams.team_group(req.team_id),
        {
            "type": "quota_request.decided",
            "request": req.pk,
            "team": req.team.slug,
            "status": req.status,
            "gpu_model": req.gpu_model.name,
            "guaranteed_gpus": req.guaranteed_gpus,
            "comment": req.decision_comment,
            "time": timezone.now().isoformat(),
        },
    )


def quota_requests_expire(now: datetime) -> int:
    """Revert every approved request whose ``until`` has passed; returns how many were reverted.

    Idempotent and safe to run concurrently: each request is claimed with a compare-and-set
    UPDATE (approved -> expired) before its change is reverted, in one transaction per request,
    so running it twice (or in two workers) reverts each request exactly once. The revert
    subtracts the difference the approval applied (never below zero), so overlapping temporary
    grants and later admin changes compose. Pending requests past their date are expired
    without any quota change. A periodic task calls it.
    """
    reverted = 0
    due = list(
        QuotaRequest.objects.filter(
            status__in=[QuotaRequestStatus.APPROVED, QuotaRequestStatus.PENDING],
            until__isnull=False,
            until__lte=now,
        ).values_list("pk", "status")
    )
    for req_id, status in due:
        try:
            reverted += _expire_one(req_id, status, now)
        except Exception:  # one request's fault must not keep the others from expiring
            log.exception("quota request %s could not be expired; retried next run", req_id)
    return reverted


def _expire_one(req_id: int, status: str, now: datetime) -> int:
    """Expire one due request in its own transaction; 1 when an approval was reverted."""
    with transaction.atomic():
        claimed = _claim(req_id, source=status, target=QuotaRequestStatus.EXPIRED, reverted_at=now)
        if claimed is None:
            return 0
        reverted = 0
        if status == QuotaRequestStatus.APPROVED:
            _lock_quotas_of(claimed.gpu_model)
            quota = (
                Quota.objects.select_for_update()
                .filter(team=claimed.team, gpu_model=claimed.gpu_model)
                .first()
            )
            if quota is not None:
                _apply_quota(
                    actor=None,
                    team=claimed.team,
                    gpu_model=claimed.gpu_model,
                    guaranteed=max(0, quota.guaranteed_gpus - claimed.applied_guaranteed_delta),
                    borrow=max(0, quota.borrow_limit_gpus - claimed.applied_borrow_delta),
                    action="quota.revert",
                    comment=f"quota request #{claimed.pk} expired",
                )
            reverted = 1
        audit_record(
            actor=None,
            action="quota_request.expire",
            target=claimed,
            team=claimed.team,
            before={"status": status},
            after={"status": claimed.status},
        )
    return reverted
