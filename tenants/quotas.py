"""Writes of quotas: a team's guarantee and borrow limit per GPU model, the overcommit check
against the cluster's capacity, and quota requests (asked by a team, decided by a platform admin,
reverted when they expire).

The conventions of every tenancy write hold (``tenants.services``): keyword-only, atomic,
permission checked, audited in the same transaction, refusals naming the field.
"""

from __future__ import annotations

import logging
from datetime import datetime
from numbers import Integral
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from catalogue.models import GpuModel
from core import streams
from core.bounds import MAX_GPUS
from core.errors import Conflict, DomainError, FieldErrors, NotFound
from core.names import text_errors
from scheduler.models import Node

from . import permissions
from .audit import audit_record
from .models import Quota, QuotaRequest, QuotaRequestStatus, Team
from .services import PermissionDenied, _digits

log = logging.getLogger(__name__)


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
