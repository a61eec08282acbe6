"""The team tree as plain dicts, loaded in one query, for roll-ups (statements, budgets) and walks
up the tree (quota rows, team cluster lists).

Teams are few (hundreds at most), so loading them all is cheaper than recursive SQL and works the
same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from tenants.models import Team


class TeamTree:
    """Parent/children maps of all teams. Cycles cannot occur (a team is never its own parent
    and parents are set on creation), but walks stop on a repeat anyway."""

    def __init__(self, parents: dict[int, int | None], slugs: dict[int, str] | None = None):
        self.parents = parents
        self.slugs = slugs or {}
        self.children: dict[int, list[int]] = defaultdict(list)
        for team_id, parent_id in parents.items():
            if parent_id is not None:
                self.children[parent_id].append(team_id)

    @classmethod
    def load(cls) -> TeamTree:
        rows = Team.objects.values_list("id", "parent_id", "slug")
        return cls({i: p for i, p, _ in rows}, {i: s for i, _, s in rows})

    def subtree(self, team_id: int) -> list[int]:
        """``team_id`` and all its descendants."""
        out, stack, seen = [], [team_id], set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            out.append(current)
            stack.extend(self.children.get(current, ()))
        return out

    def ancestors_and_self(self, team_id: int) -> list[int]:
        """``team_id`` then its parent, grandparent... up to the root."""
        out: list[int] = []
        current: int | None = team_id
        while current is not None and current not in out:
            out.append(current)
            current = self.parents.get(current)
        return out

    def roll_up(self, own: dict[int, Decimal]) -> dict[int, Decimal]:
        """Each team's amount including all its descendants' amounts."""
        total: dict[int, Decimal] = defaultdict(Decimal)
        for team_id, amount in own.items():
            for ancestor in self.ancestors_and_self(team_id):
                total[ancestor] += amount or Decimal(0)
        return dict(total)
