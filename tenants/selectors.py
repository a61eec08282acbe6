"""Reads of tenancy state a user can reach. Each starts from what the caller may see
(``tenants.permissions``) and runs a fixed number of queries whatever the number of rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, QuerySet, Sum

from catalogue.models import GpuModel
from core.errors import NotFound
from scheduler.models import Allocation, Node

from . import permissions
from .models import (
    ApiToken,
    AuditEntry,
    Membership,
    PriorityClass,
    Quota,
    QuotaRequest,
    Team,
    TeamEntitlements,
)


def team_get(*, user: permissions.Caller, slug: str, field: str = "team") -> Team:
    """A team the caller may see; any other (or none) is NotFound on ``field``, with one message
    for both. Every list filter naming a team goes through here (docs/tenancy.md): an empty list
    for another team's slug would differ from a typo only by luck, and a filter that silently
    matches nothing reads as "this team has no rows"."""
    team = permissions.visible_teams(user).select_related("parent").filter(slug=slug).first()
    if team is None:
        raise NotFound("no such team", field=field)
    return team


def team_tree(*, user: permissions.Caller) -> list[tuple[Team, int]]:
    """Visible teams in tree order (depth-first by slug) with their depth. A team whose parent is
    hidden from the caller is shown as a root."""
    teams = list(permissions.visible_teams(user).select_related("parent").order_by("slug"))
    ids = {t.pk for t in teams}
    children: dict[int | None, list[Team]] = defaultdict(list)
    for team in teams:
        children[team.parent_id if team.parent_id in ids else None].append(team)
    out: list[tuple[Team, int]] = []
    stack = [(t, 0) for t in reversed(children[None])]
    while stack:
        team, depth = stack.pop()
        out.append((team, depth))
        stack.extend((c, depth + 1) for c in reversed(children[team.pk]))
    return out


@dataclass(frozen=True)
class Entitlements:
    """What a team may ask of the scheduler (see ``models.TeamEntitlements``), with what it
    inherits from its parent teams already folded in."""

    team: str
    # Restricted classes granted to the team or one of its parent teams.
    granted_classes: frozenset[str]
    may_opt_out_of_preemption: bool
    max_pending_jobs: int
    max_pending_jobs_per_user: int
    # The teams (the team itself or a parent) each grant came from, for messages and pages.
    granted_by: tuple[tuple[str, str], ...] = ()

    def may_use(self, priority: PriorityClass) -> bool:
        return not priority.restricted or priority.name in self.granted_classes


def _ancestors_and_self(team_id: int) -> list[int]:
    parents = dict(Team.objects.values_list("id", "parent_id"))
    chain: list[int] = []
    node: int | None = team_id
    while node is not None and node not in chain:
        chain.append(node)
        node = parents.get(node)
    return chain


def _caps(team_cap: int | None, user_cap: int | None) -> tuple[int, int]:
    from django.conf import settings

    return (
        settings.JOB_PENDING_MAX_TEAM if team_cap is None else team_cap,
        settings.JOB_PENDING_MAX_USER if user_cap is None else user_cap,
    )


def team_entitlements(team: Team) -> Entitlements:
    """The team's entitlements, grants of its parent teams included. Three queries."""
    chain = _ancestors_and_self(team.pk)
    rows = {
        row.team_id: row
        for row in TeamEntitlements.objects.filter(team_id__in=chain)
        .select_related("team")
        .prefetch_related("priority_classes")
    }
    granted_by: dict[str, str] = {}
    opt_out = False
    for team_id in chain:  # the team first, then its parents: the nearest grant is shown
        row = rows.get(team_id)
        if row is None:
            continue
        for priority in row.priority_classes.all():
            granted_by.setdefault(priority.name, row.team.slug)
        opt_out = opt_out or row.may_opt_out_of_preemption
    own = rows.get(team.pk)
    team_cap, user_cap = _caps(
        own.max_pending_jobs if own else None, own.max_pending_jobs_per_user if own else None
    )
    return Entitlements(
        team=team.slug,
        granted_classes=frozenset(granted_by),
        may_opt_out_of_preemption=opt_out,
        max_pending_jobs=team_cap,
        max_pending_jobs_per_user=user_cap,
        granted_by=tuple(sorted(granted_by.items())),
    )


@dataclass
class QuotaUse:
    gpu_model: str
    guaranteed: int | None
    borrow_limit: int | None
    used: int  # GPUs held now by the team's own jobs
    used_subtree: int  # ... and by its descendants' (counts against this quota too)

    @property
    def over_guarantee(self) -> bool:
        return self.guaranteed is not None and self.used_subtree > self.guaranteed


@dataclass
class TeamQuotaRow:
    team: Team
    depth: int
    uses: list[QuotaUse] = field(default_factory=list)


def live_gpus_by_team_model() -> dict[tuple[int, str], int]:
    """(team id, GPU model name) -> GPUs held by live allocations now. One query."""
    rows = (
        Allocation.objects.filter(ended_at__isnull=True)
        .values("job__team_id", "node__gpu_model__name")
        .annotate(n=Count("id"))
    )
    return {(r["job__team_id"], r["node__gpu_model__name"]): r["n"] for r in rows}


def quota_overview(*, user: permissions.Caller) -> list[TeamQuotaRow]:
    """Per visible team (tree order) and GPU model: guarantee, borrow limit, current use of the
    team and of its subtree. Models appear where the team has a quota or uses GPUs."""
    tree = team_tree(user=user)
    all_parents = dict(Team.objects.values_list("id", "parent_id"))
    quotas = {
        (q.team_id, q.gpu_model.name): q
        for q in Quota.objects.filter(team__in=[t for t, _ in tree]).select_related("gpu_model")
    }
    used = live_gpus_by_team_model()
    subtree: dict[tuple[int, str], int] = defaultdict(int)
    for (team_id, model), n in used.items():
        node: int | None = team_id
        seen: set[int] = set()
        while node is not None and node not in seen:
            seen.add(node)
            subtree[(node, model)] += n
            node = all_parents.get(node)
    rows = []
    for team, depth in tree:
        models = sorted(
            {m for (tid, m) in quotas if tid == team.pk}
            | {m for (tid, m) in subtree if tid == team.pk}
        )
        row = TeamQuotaRow(team=team, depth=depth)
        for model in models:
            q = quotas.get((team.pk, model))
            row.uses.append(
                QuotaUse(
                    gpu_model=model,
                    guaranteed=q.guaranteed_gpus if q else None,
                    borrow_limit=q.borrow_limit_gpus if q else None,
                    used=used.get((team.pk, model), 0),
                    used_subtree=subtree.get((team.pk, model), 0),
                )
            )
        rows.append(row)
    return rows


def capacity_overview() -> list[dict[str, str | int]]:
    """Per GPU model: GPUs in capacity (enabled clusters, not retired), and the sum of all guarantees (a hint; the
    precise overcommit rule is ``services.overcommit_problems``)."""
    capacity = dict(
        Node.objects.in_capacity().values_list("gpu_model__name").annotate(n=Sum("gpu_count"))
    )
    guaranteed = dict(
        Quota.objects.values_list("gpu_model__name").annotate(n=Sum("guaranteed_gpus"))
    )
    return [
        {
            "gpu_model": name,
            "capacity": capacity.get(name, 0),
            "guaranteed": guaranteed.get(name, 0),
        }
        for name in GpuModel.objects.order_by("name").values_list("name", flat=True)
    ]


def membership_list(*, user: permissions.Caller, team: Team) -> QuerySet[Membership]:
    if not permissions.can_view_team(user, team):
        raise NotFound("no such team", field="team")
    return Membership.objects.filter(team=team).select_related("user").order_by("user__username")


def quota_request_list(
    *, user: permissions.Caller, status: str | None = None
) -> QuerySet[QuotaRequest]:
    """Requests of the caller's teams (all of them for platform admins), newest first."""
    qs = QuotaRequest.objects.filter(team__in=permissions.visible_teams(user)).select_related(
        "team", "gpu_model", "requested_by", "decided_by"
    )
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-created_at", "-id")


def quota_request_get(*, user: permissions.Caller, request_id: int) -> QuotaRequest:
    req = quota_request_list(user=user).filter(pk=request_id).first()
    if req is None:
        raise NotFound("no such quota request", field="id")
    return req


def token_list(*, user: permissions.Caller) -> QuerySet[ApiToken]:
    """The caller's own tokens (never anyone else's, platform admins included)."""
    if not user or not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def audit_list(
    *,
    user: permissions.Caller,
    team: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEntry]:
    """Audit entries the caller may read: all for platform admins; their teams' entries for team
    owners and admins; nothing for others. Newest first. ``team`` naming a team whose log the
    caller may not read (or none) is NotFound."""
    if permissions.is_platform_admin(user):
        qs = AuditEntry.objects.all()
        teams = Team.objects.all()
    else:
        auditable = permissions.auditable_team_ids(user)
        qs = AuditEntry.objects.filter(team_id__in=auditable)
        teams = Team.objects.filter(pk__in=auditable)
    if team:
        # A team whose log the caller may not read is as missing as a team that is not there
        # (the team filter rule of team_get, scoped to the audit's own readers).
        chosen = teams.filter(slug=team).first()
        if chosen is None:
            raise NotFound("no such team", field="team")
        qs = qs.filter(team=chosen)
    if action:
        qs = qs.filter(action__startswith=action)
    if actor:
        qs = qs.filter(actor_name=actor)
    if since:
        qs = qs.filter(time__gte=since)
    if until:
        qs = qs.filter(time__lt=until)
    return qs.select_related("team").order_by("-time", "-id")


AUDIT_CSV_COLUMNS = [
    "time",
    "actor",
    "action",
    "target_type",
    "target_id",
    "target",
    "team",
    "before",
    "after",
    "comment",
]


def audit_csv_rows(entries: Iterable[AuditEntry]) -> list[list[str]]:
    """Rows for the CSV export, one per entry, JSON for before/after."""
    import json

    out = []
    for e in entries:
        out.append(
            [
                e.time.isoformat(),
                e.actor_name,
                e.action,
                e.target_type,
                e.target_id,
                e.target_repr,
                e.team.slug if e.team is not None else "",
                "" if e.before is None else json.dumps(e.before, sort_keys=True),
                "" if e.after is None else json.dumps(e.after, sort_keys=True),
                e.comment,
            ]
        )
    return out
