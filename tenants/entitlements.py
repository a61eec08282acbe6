"""Writes of what teams may ask of the scheduler: the priority classes, and each team's
entitlements (the restricted classes granted to it, the preemption opt-out, caps on pending jobs).

The conventions of every tenancy write hold (``tenants.services``): keyword-only, atomic,
permission checked, audited in the same transaction, refusals naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from numbers import Integral
from typing import Any

from django.db import transaction
from django.db.models import ProtectedError

from core.bounds import number_error
from core.errors import Conflict, FieldErrors, NotFound
from core.names import text_errors

from . import permissions
from .audit import audit_record
from .models import PriorityClass, Team, TeamEntitlements
from .services import PermissionDenied, _digits

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
