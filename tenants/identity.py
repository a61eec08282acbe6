"""Writes of single sign-on: the group rules platform admins edit, and what a login does.

``sso_login`` is called by the OpenID Connect backend (``tenants.sso``) once the provider's
tokens are verified. It finds the user by (issuer, subject), creating one on first login, and
re-evaluates the group rules: memberships the rules give are created or moved to the rule's role,
memberships an earlier login gave (``source=sso``) that no rule gives any more are removed.
Memberships added by hand in the portal (``source=manual``) are never touched. Every change is
an audit entry. All in one transaction.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from core.errors import DomainError, FieldErrors, Forbidden, NotFound, duplicate_refused
from core.names import name_errors

from . import permissions
from .audit import audit_record
from .models import Membership, MembershipSource, Role, SsoGroupRule, SsoIdentity, Team

# Strongest first: a user in two groups mapped to one team gets the stronger role.
ROLE_RANK: dict[str, int] = {Role.OWNER: 4, Role.ADMIN: 3, Role.MEMBER: 2, Role.VIEWER: 1}
_USERNAME_BAD = re.compile(r"[^\w.@+-]")


def _column_limit(model: type[models.Model], name: str) -> int:
    field = model._meta.get_field(name)
    assert isinstance(field, models.CharField) and field.max_length is not None
    return field.max_length


# The columns' own limits: what they cannot hold is refused or dropped before it reaches them.
GROUP_MAX = _column_limit(SsoGroupRule, "group")
SUBJECT_MAX = _column_limit(SsoIdentity, "subject")
ISSUER_MAX = _column_limit(SsoIdentity, "issuer")


class SsoRefused(Exception):
    """The provider's claims cannot sign anyone in (no subject, say)."""


def groups_from(claims: dict[str, Any], claim: str) -> list[str]:
    """The provider's groups: a list of strings, one string, or nothing. Only names a rule
    could hold are kept: the others can give nothing, and a NUL among them would fail the
    login where the groups are stored, control characters end up in the audit comments."""
    value = claims.get(claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({v for v in value if isinstance(v, str) and _rule_group(v)})


def _rule_group(group: str) -> bool:
    return 0 < len(group) <= GROUP_MAX and not name_errors(group)


def _email_from(claims: dict[str, Any]) -> str:
    """The email claim if it is an address the provider does not call unverified, else "" (as
    if absent). It becomes the To: of notifications: one with a line break would fail every one
    of them, one longer than the column or holding a NUL would fail the login.

    An ``email_verified`` of false (a JSON false, or "false" as some providers send it) means
    the provider let its user type any address, someone else's included: taken, it made the
    platform mail that user's job notifications to a stranger. Without the claim the address
    is taken, as providers that verify every address (or say nothing) send none."""
    email = claims.get("email")
    if not isinstance(email, str) or len(email) > 254:
        return ""
    verified = claims.get("email_verified")
    if verified is False or (isinstance(verified, str) and verified.strip().lower() == "false"):
        return ""
    try:
        validate_email(email)
    except ValidationError:
        return ""
    return email


def desired_roles(groups: list[str]) -> tuple[dict[int, str], dict[int, list[str]]]:
    """team id -> the strongest role the rules give for ``groups``, and team id -> the groups
    (of ``groups``) that have a rule for that team, sorted."""
    roles: dict[int, str] = {}
    matched: dict[int, list[str]] = {}
    for team_id, role, group in SsoGroupRule.objects.filter(group__in=groups).values_list(
        "team_id", "role", "group"
    ):
        if ROLE_RANK[role] > ROLE_RANK.get(roles.get(team_id, ""), 0):
            roles[team_id] = role
        matched.setdefault(team_id, []).append(group)
    return roles, {team_id: sorted(set(names)) for team_id, names in matched.items()}


def _printable(value: object) -> str:
    """``value`` as one line of printable text (core.names' rule: the characters it refuses
    dropped, a NUL among them); "" if it is not text."""
    if not isinstance(value, str):
        return ""
    return "".join(char for char in value if not name_errors(char))


def _free_username(wanted: str) -> str:
    user_model = get_user_model()
    base = (_USERNAME_BAD.sub("-", wanted) or "user")[:140]
    name, n = base, 1
    while user_model.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-sso" if n == 2 else f"{base}-sso{n - 1}"
    return name


def _first_login(
    *,
    claims: dict[str, Any],
    issuer: str,
    subject: str,
    email: str,
    groups: list[str],
    username_claim: str,
    now: datetime,
) -> SsoIdentity:
    """Create the user and identity of a first login (audited). Raises IntegrityError when a
    concurrent login took the name or made this identity first."""
    wanted = claims.get(username_claim) or (email.split("@")[0] if email else subject)
    user = get_user_model().objects.create_user(
        username=_free_username(str(wanted)), email=email or ""
    )
    user.set_unusable_password()
    user.first_name = _printable(claims.get("given_name"))[:150]
    user.last_name = _printable(claims.get("family_name"))[:150]
    user.save()
    identity = SsoIdentity.objects.create(
        user=user, issuer=issuer, subject=subject, groups=groups, last_login_at=now
    )
    audit_record(
        actor=user,
        action="user.sso_create",
        target=user,
        after={"username": user.username, "email": email, "issuer": issuer},
        comment="created at first single sign-on login",
    )
    return identity


@transaction.atomic
def sso_login(
    *,
    claims: dict[str, Any],
    issuer: str,
    groups_claim: str,
    username_claim: str,
    now: datetime | None = None,
) -> User | None:
    """The user the verified ``claims`` sign in (created on first login), with memberships
    matching the group rules. Raises :class:`SsoRefused` without a subject; returns None for a
    deactivated user."""
    now = now or timezone.now()
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise SsoRefused("the provider sent no subject")
    # OpenID Connect caps a subject at 255 ASCII characters; what the identity's columns cannot
    # hold (longer, a NUL) would fail the lookup itself, a 500 instead of a refusal.
    if len(subject) > SUBJECT_MAX or "\x00" in subject:
        raise SsoRefused(
            f"the provider's subject is longer than {SUBJECT_MAX} characters or holds a NUL"
        )
    if len(issuer) > ISSUER_MAX or "\x00" in issuer:
        raise SsoRefused(
            f"the provider's issuer is longer than {ISSUER_MAX} characters or holds a NUL"
        )
    groups = groups_from(claims, groups_claim)
    email = _email_from(claims)
    identity = None
    created = False
    # Two first logins at once (one person in two tabs; two people the provider names alike)
    # both find no identity and create a user: the second INSERT meets a unique constraint.
    # The creation is a savepoint, and a lost race looks again: the same person finds the
    # account the other login made, another person gets a free name.
    for _attempt in range(3):
        identity = (
            # Only the identity: a lock on the user row would hold up the foreign-key check of
            # a membership an admin adds to the user meanwhile, while this login waits for
            # that admin's lock on the team (memberships_sync): a deadlock.
            SsoIdentity.objects.select_for_update(of=("self",))
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is not None:
            break
        try:
            with transaction.atomic():
                identity = _first_login(
                    claims=claims,
                    issuer=issuer,
                    subject=subject,
                    email=email,
                    groups=groups,
                    username_claim=username_claim,
                    now=now,
                )
        except IntegrityError:
            continue
        created = True
        break
    if identity is None:
        raise SsoRefused("the account could not be created (concurrent logins); sign in again")
    user = identity.user
    if not created:
        if not user.is_active:
            return None
        if email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        identity.groups = groups
        identity.last_login_at = now
        identity.save(update_fields=["groups", "last_login_at"])
    memberships_sync(user=user, groups=groups)
    return user


def memberships_sync(*, user: User, groups: list[str]) -> list[str]:
    """Make ``user``'s SSO memberships match the rules for ``groups``; returns what changed (also
    in the audit log). Manual memberships are left as they are.

    The teams the rules give are locked first (in a fixed order), as ``membership_set`` locks
    its team: an admin adding the user to one of them at the same moment is then either seen
    here (a manual membership, kept) or sees what this login made (and changes its role),
    instead of both inserting the same membership."""
    wanted, matched = desired_roles(groups)
    list(Team.objects.select_for_update(no_key=True).filter(pk__in=wanted).order_by("pk"))
    current = {m.team_id: m for m in Membership.objects.filter(user=user).select_related("team")}
    teams = Team.objects.in_bulk(set(wanted) | set(current))
    changes: list[str] = []

    def comment(team_id: int) -> str:
        # Only the groups with a rule for this team: the team's admins read its audit entries,
        # and the user's other directory groups (thousands, some private) are none of theirs.
        names = ", ".join(matched.get(team_id, ())) or "none"
        return f"identity provider groups with a rule for this team at login: {names}"

    for team_id, role in sorted(wanted.items()):
        membership = current.get(team_id)
        team = teams[team_id]
        if membership is None:
            created = Membership.objects.create(
                user=user, team=team, role=role, source=MembershipSource.SSO
            )
            changes.append(f"+{team.slug}:{role}")
            _audit_change(
                user, team, created.pk, "membership.sso_add", None, role, comment(team_id)
            )
        elif membership.source == MembershipSource.SSO and membership.role != role:
            Membership.objects.filter(pk=membership.pk).update(role=role)
            changes.append(f"~{team.slug}:{membership.role}->{role}")
            _audit_change(
                user,
                team,
                membership.pk,
                "membership.sso_role",
                membership.role,
                role,
                comment(team_id),
            )
    for team_id, membership in sorted(current.items()):
        if membership.source != MembershipSource.SSO or team_id in wanted:
            continue
        team = teams[team_id]
        membership_id = membership.pk
        membership.delete()
        changes.append(f"-{team.slug}")
        _audit_change(
            user,
            team,
            membership_id,
            "membership.sso_remove",
            membership.role,
            None,
            comment(team_id),
        )
    return changes


def _audit_change(
    user: User,
    team: Team,
    membership_id: int,
    action: str,
    before: str | None,
    after: str | None,
    comment: str,
) -> None:
    """One audited membership change made by a login (the user is the actor)."""
    audit_record(
        actor=user,
        action=action,
        target_type="membership",
        # The membership's id, as the portal's membership entries have: "<team>/<username>"
        # outgrew the log's 64-character target id with a long provider username (a 500).
        target_id=membership_id,
        team=team,
        before=None if before is None else {"user": user.username, "role": before},
        after=None if after is None else {"user": user.username, "role": after},
        comment=comment,
    )


def _rule_state(rule: SsoGroupRule) -> dict[str, str]:
    return {"group": rule.group, "team": rule.team.slug, "role": rule.role}


@transaction.atomic
def sso_rule_create(
    *, user: permissions.Caller, group: object, team: object, role: str
) -> SsoGroupRule:
    """Map provider group ``group`` to ``role`` in ``team`` (platform admins). Takes effect at
    each member's next login. Audited."""
    if not permissions.is_platform_admin(user):
        raise Forbidden("only platform admins edit single sign-on rules", field="group")
    errors: dict[str, list[str]] = {}
    if not isinstance(group, str) or not group.strip():
        errors["group"] = ["must not be blank"]
    elif len(group.strip()) > GROUP_MAX:
        errors["group"] = [f"must be at most {GROUP_MAX} characters"]
    elif name_errors(group.strip()):
        # groups_from drops such names from a login's groups: a rule for one would never apply
        errors["group"] = name_errors(group.strip())
    team_row = Team.objects.filter(slug=team).first() if isinstance(team, str) else None
    if team_row is None:
        errors["team"] = [f"no team '{team}'"]
    if role not in Role.values:
        errors["role"] = [f"must be one of {', '.join(Role.values)}"]
    if errors:
        raise FieldErrors(errors)
    assert isinstance(group, str) and team_row is not None  # refused above otherwise
    if SsoGroupRule.objects.filter(group=group.strip(), team=team_row).exists():
        raise DomainError(f"group '{group.strip()}' already maps to team {team}", field="group")
    with duplicate_refused("group", f"group '{group.strip()}' already maps to team {team}"):
        rule = SsoGroupRule.objects.create(
            group=group.strip(), team=team_row, role=role, created_by=user
        )
    audit_record(
        actor=user, action="sso_rule.create", target=rule, team=team_row, after=_rule_state(rule)
    )
    return rule


@transaction.atomic
def sso_rule_delete(*, user: permissions.Caller, rule_id: int) -> None:
    """Remove a rule (platform admins); members lose what it gave at their next login."""
    if not permissions.is_platform_admin(user):
        raise NotFound("no such rule", field="id")
    rule = SsoGroupRule.objects.select_related("team").filter(pk=rule_id).first()
    if rule is None:
        raise NotFound("no such rule", field="id")
    audit_record(
        actor=user,
        action="sso_rule.delete",
        target=rule,
        team=rule.team,
        before=_rule_state(rule),
    )
    rule.delete()
