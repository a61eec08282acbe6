"""Writes of the policy history: seed the first version, apply a change, roll back.

Every write creates a new version (never edits one), writes the teams' weights and the priority
classes it sets through tenants' services (which audit each row they change), and records one
``policy.apply`` / ``policy.rollback`` audit entry with the whole policy before and after. All of
it happens in one transaction, under a lock on the newest version, so two admins applying at once
get consecutive versions, never one lost change.

The engine configuration is opaque here: it is checked and read only through the policy package's
public codec (``scheduler.policy.config_from_dict``), so when the engine's configuration format
changes this code keeps working.
"""

from __future__ import annotations

import logging
from numbers import Integral
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from core.bounds import bounds, finite_number, range_text
from core.errors import Conflict, FieldErrors, NotFound
from core.names import text_errors
from scheduler.policy import SnapshotError, config_deprecations, config_from_dict
from tenants import entitlements as entitlement_services
from tenants import teams as team_services
from tenants.audit import audit_record
from tenants.models import PriorityClass, Team
from tenants.permissions import Caller, is_platform_admin

from .models import PolicySource, PolicyVersion

log = logging.getLogger(__name__)

MAX_REASON = 500
MAX_WEIGHT = 1_000_000.0
CLASS_FIELDS = ("value", "preemptible_by_default", "restricted")
# The three parts of a policy, as a version stores them and ``policy_apply`` takes them.
POLICY_PARTS = ("engine_config", "team_weights", "priority_classes")


def current_tables() -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """The team weights and priority classes the loop reads today (slug -> weight, name ->
    {value, preemptible_by_default, restricted})."""
    weights = dict(Team.objects.order_by("slug").values_list("slug", "fair_share_weight"))
    classes = {
        row["name"]: {k: row[k] for k in CLASS_FIELDS}
        for row in PriorityClass.objects.order_by("name").values("name", *CLASS_FIELDS)
    }
    return weights, classes


def version_content(version: PolicyVersion) -> dict[str, Any]:
    return {
        "engine_config": version.engine_config,
        "team_weights": version.team_weights,
        "priority_classes": version.priority_classes,
    }


def policy_base(version: PolicyVersion) -> dict[str, Any]:
    """What a change is made to: ``version``'s engine configuration and the weights and classes
    the loop reads now. Weights and classes changed under Teams since ``version`` ("changed
    outside the policy") are kept, and the next version records them: built on ``version``'s own
    tables, a change of anything else (an engine setting over the API or ``gpuctl policy
    apply``) wrote them back and silently undid the edit, while the portal's form, which starts
    from the tables in force, kept it."""
    weights, classes = current_tables()
    return {
        "engine_config": version.engine_config,
        "team_weights": weights,
        "priority_classes": classes,
    }


def policy_content_with(
    base: dict[str, Any],
    *,
    engine_config: dict[str, Any] | None = None,
    team_weights: dict[str, float] | None = None,
    priority_classes: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The policy ``base`` (a ``version_content`` or a ``policy_base``) with a change: ``engine_config`` replaces
    (None keeps base's), the named teams' weights and classes change and the others keep
    base's. What ``policy_apply`` puts in force, and what the what-if apply page shows first."""
    return {
        "engine_config": base["engine_config"] if engine_config is None else engine_config,
        "team_weights": {**base["team_weights"], **(team_weights or {})},
        "priority_classes": {**base["priority_classes"], **(priority_classes or {})},
    }


def _environment_config() -> dict[str, Any]:
    return dict(getattr(settings, "SCHEDULER_POLICY", None) or {})


def policy_version_seed() -> PolicyVersion:
    """Version 1 from the environment's ``SCHEDULER_POLICY`` and today's weights and classes, if
    there is no version yet; otherwise the newest version. Idempotent (a racing seed loses on the
    unique number and reads the winner's)."""
    newest = PolicyVersion.objects.order_by("-number").first()
    if newest is not None:
        return newest
    weights, classes = current_tables()
    with transaction.atomic():
        version, _ = PolicyVersion.objects.get_or_create(
            number=1,
            defaults={
                "created_at": timezone.now(),
                "created_by_name": "system",
                "reason": "first version, from the environment's SCHEDULER_POLICY",
                "source": PolicySource.ENVIRONMENT,
                "engine_config": _environment_config(),
                "team_weights": weights,
                "priority_classes": classes,
            },
        )
    return version


def validate_engine_config(data: Any) -> dict[str, Any]:
    """``data`` if the engine's codec accepts it; else FieldErrors naming the field."""
    if not isinstance(data, dict):
        raise FieldErrors({"engine_config": ["must be a JSON object"]})
    try:
        config_from_dict(data, path="engine_config")
    except SnapshotError as exc:
        raise FieldErrors({exc.field: [exc.reason]}) from None
    for message in config_deprecations(data, "engine_config"):
        log.warning("%s", message)  # accepted for one release (docs/policy.md)
    return data


def validate_weights(data: Any, errors: dict[str, list[str]]) -> dict[str, float]:
    """``data`` (team slug -> weight) with each weight as a float; each problem added to
    ``errors`` (``team_weights``, ``team_weights.<slug>``)."""
    if not isinstance(data, dict):
        errors["team_weights"] = ["must be an object of team slug to weight"]
        return {}
    known = set(Team.objects.filter(slug__in=[str(k) for k in data]).values_list("slug", flat=True))
    out: dict[str, float] = {}
    for slug, weight in data.items():
        field = f"team_weights.{slug}"
        if slug not in known:
            errors[field] = ["no such team"]
        elif not finite_number(weight) or not 0 <= weight <= MAX_WEIGHT:
            errors[field] = [f"must be a number from 0 to {MAX_WEIGHT:,.0f}"]
        else:
            out[slug] = float(weight)
    return out


def validate_classes(data: Any, errors: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """``data`` (class name -> {value, preemptible_by_default, restricted}); each problem added
    to ``errors`` (``priority_classes``, ``priority_classes.<name>.<field>``)."""
    if not isinstance(data, dict):
        errors["priority_classes"] = ["must be an object of class name to settings"]
        return {}
    known = set(
        PriorityClass.objects.filter(name__in=[str(k) for k in data]).values_list("name", flat=True)
    )
    out: dict[str, dict[str, Any]] = {}
    for name, spec in data.items():
        field = f"priority_classes.{name}"
        if name not in known:
            errors[field] = ["no such priority class (create classes under Teams)"]
            continue
        if not isinstance(spec, dict):
            errors[field] = ["must be an object with value, preemptible_by_default, restricted"]
            continue
        for key in sorted(set(spec) - set(CLASS_FIELDS)):
            errors[f"{field}.{key}"] = ["unknown field"]
        for key in CLASS_FIELDS:
            if key not in spec:
                errors[f"{field}.{key}"] = ["required"]
        value = spec.get("value")
        lowest, highest = bounds(PriorityClass, "value")
        if "value" in spec and (
            isinstance(value, bool)
            or not isinstance(value, Integral)
            or not lowest <= value <= highest
        ):
            errors[f"{field}.value"] = [
                f"must be a whole number {range_text(PriorityClass, 'value')}"
            ]
        for key in ("preemptible_by_default", "restricted"):
            if key in spec and not isinstance(spec[key], bool):
                errors[f"{field}.{key}"] = ["must be true or false"]
        out[name] = {k: spec.get(k) for k in CLASS_FIELDS}
    return out


def _reason(reason: Any, errors: dict[str, list[str]]) -> str:
    if not isinstance(reason, str) or not reason.strip():
        errors["reason"] = ["say why (it is kept in the history)"]
        return ""
    if len(reason) > MAX_REASON:
        errors["reason"] = [f"at most {MAX_REASON} characters"]
    elif problems := text_errors(reason):
        errors["reason"] = problems
    return reason.strip()


def require_admin(user: Caller) -> User:
    """``user``, a platform admin; anyone else NotFound."""
    # Not Forbidden: the policy routes do not exist for anyone else.
    if not is_platform_admin(user):
        raise NotFound("no such page", field="policy")
    return user


def _write_tables(
    *, user: User, weights: dict[str, float], classes: dict[str, dict[str, Any]]
) -> None:
    current_weights, current_classes = current_tables()
    for slug, weight in sorted(weights.items()):
        if slug in current_weights and current_weights[slug] != weight:
            team = Team.objects.get(slug=slug)
            team_services.team_update(user=user, team=team, fair_share_weight=weight)
    for name, spec in sorted(classes.items()):
        if name in current_classes and current_classes[name] != spec:
            pc = PriorityClass.objects.get(name=name)
            entitlement_services.priority_class_set(
                user=user,
                name=name,
                value=spec["value"],
                preemptible_by_default=spec["preemptible_by_default"],
                restricted=spec["restricted"],
                description=pc.description,
            )


def _lock_in_force(base: PolicyVersion) -> PolicyVersion:
    """Lock ``base`` (the version the caller read) and then the tables a policy writes; return
    ``base`` as locked, or a Conflict if a newer version exists.

    Two admins applying at once both read the same version: locking the newest row did not
    serialize them (the second waited, then got that same row back, and failed on the unique
    number: a 500), and a retry would silently undo the first one's change. Locking ``base``
    makes the second wait; the fresh read after the lock then sees the first's version.

    The teams and classes are locked after the version (the order every policy write takes, so
    two of them cannot deadlock) and before the caller reads them: a weight changed under Teams
    after an unlocked read was written back over by the new version, silently undone."""
    previous = PolicyVersion.objects.select_for_update().filter(pk=base.pk).first()
    newer = PolicyVersion.objects.filter(number__gt=base.number).order_by("-number").first()
    if previous is None or newer is not None:
        now_in_force = f"version {newer.number}" if newer is not None else "another version"
        raise Conflict(
            f"the policy changed while you edited it ({now_in_force} is in force now); "
            "review it and apply again",
            field="number",
        )
    # FOR NO KEY UPDATE: a team_update or priority_class_set waits for the policy (and the
    # policy for it), while rows that merely refer to a team or class (jobs, memberships) do not.
    list(Team.objects.select_for_update(no_key=True).order_by("pk").values_list("pk", flat=True))
    list(
        PriorityClass.objects.select_for_update(no_key=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return previous


def _new_version(
    *,
    user: User,
    previous: PolicyVersion,
    content: dict[str, Any],
    reason: str,
    source: str,
    restores: int | None = None,
) -> PolicyVersion:
    """Write version ``previous.number + 1`` and the tables ``content`` sets; ``previous`` is
    the version :func:`_lock_in_force` returned, in the same transaction."""
    version = PolicyVersion.objects.create(
        number=previous.number + 1,
        created_at=timezone.now(),
        created_by=user,
        created_by_name=user.get_username(),
        reason=reason,
        source=source,
        restores=restores,
        **content,
    )
    _write_tables(user=user, weights=content["team_weights"], classes=content["priority_classes"])
    audit_record(
        actor=user,
        action=f"policy.{'rollback' if source == PolicySource.ROLLBACK else 'apply'}",
        target=version,
        before=version_content(previous),
        after=version_content(version),
        comment=reason,
    )
    return version


def policy_apply(
    *,
    user: Caller,
    reason: Any,
    engine_config: Any = None,
    team_weights: Any = None,
    priority_classes: Any = None,
) -> PolicyVersion:
    """Make a new version in force (platform admins only; anyone else NotFound). An engine
    configuration left None keeps the version in force's; named teams and classes change, the
    others keep what the loop reads now (:func:`policy_base`).
    Bad input is FieldErrors naming each field (``engine_config.<field>``,
    ``team_weights.<slug>``, ``priority_classes.<name>.<field>``, ``reason``) and nothing is
    written."""
    admin = require_admin(user)
    base = policy_version_seed()
    errors: dict[str, list[str]] = {}
    why = _reason(reason, errors)
    config = base.engine_config
    if engine_config is not None:
        try:
            config = validate_engine_config(engine_config)
        except FieldErrors as exc:
            errors.update(exc.errors)
    weights = None if team_weights is None else validate_weights(team_weights, errors)
    classes = None if priority_classes is None else validate_classes(priority_classes, errors)
    if errors:
        raise FieldErrors(errors)
    with transaction.atomic():
        previous = _lock_in_force(base)
        content = policy_content_with(
            policy_base(previous),
            engine_config=config,
            team_weights=weights,
            priority_classes=classes,
        )
        if content == version_content(previous):
            raise FieldErrors({"engine_config": ["nothing changed from the version in force"]})
        return _new_version(
            user=admin, previous=previous, content=content, reason=why, source=PolicySource.EDIT
        )


def policy_rollback(*, user: Caller, number: int, reason: Any) -> PolicyVersion:
    """A new version with the content of version ``number`` (platform admins only). Teams or
    classes created since keep their current settings. Audited as ``policy.rollback``."""
    admin = require_admin(user)
    base = policy_version_seed()
    target = PolicyVersion.objects.filter(number=number).first()
    if target is None:
        raise NotFound("no such policy version", field="number")
    errors: dict[str, list[str]] = {}
    why = _reason(reason, errors)
    if errors:
        raise FieldErrors(errors)
    # The engine's configuration format may have changed since: an old version it no longer
    # reads is refused, naming the field, rather than put in force.
    validate_engine_config(target.engine_config)
    with transaction.atomic():
        return _new_version(
            user=admin,
            previous=_lock_in_force(base),
            content=version_content(target),
            reason=why,
            source=PolicySource.ROLLBACK,
            restores=target.number,
        )
