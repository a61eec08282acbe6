"""Hierarchical fair share (in the spirit of Slurm's Fair Tree) for the policy engine.

Teams form a tree with weights. At every level a team's *share* is its weight over its
siblings' total weight, and its *usage* is its subtree's decayed GPU-seconds over the siblings'
total; the level fair-share ratio is share / usage (infinite for a team that used nothing).
Ratios are rounded to bands (a factor of ``Config.fair_share_band`` apart, ties within about
that factor) so near-equal teams tie and the queue's tie-break decides between their jobs,
instead of noise in usage dominating the order.

A team's standing is the path of its bands from the root down (Fair Tree's depth-first
ranking): a team under a well-behaved parent ranks ahead of any team under a parent that has
overused its share, whatever their own bands. :func:`standings` maps each team to an integer
rank (0 = best); teams absent from the tree get a neutral standing.

Guarantees: pure, deterministic, O(teams x depth).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from scheduler.policy.model import Team

__all__ = ["standings", "decay_usage", "MAX_BAND"]

MAX_BAND = 8


def decay_usage(usage_gpu_s: float, elapsed_s: float, half_life_s: float) -> float:
    """``usage_gpu_s`` decayed over ``elapsed_s`` with ``half_life_s`` (for the caller's books).

    The engine takes ``Team.usage_gpu_s`` as already decayed. The live loop and the simulator
    decay with the same half-life in their own way (the loop integrates each job's GPU-seconds,
    the simulator decays as its clock moves); this is the decay for any other caller's books.
    """
    if elapsed_s <= 0:
        return usage_gpu_s
    return float(usage_gpu_s * 0.5 ** (elapsed_s / half_life_s))  # float ** float is Any to mypy


def _ratio(share: float, u: float, total_u: float) -> float:
    """share / (u / total_u): infinite for a team that used nothing, or so little beside its
    siblings that its part of their usage rounds to 0. That happens with valid input: a short
    half-life (60 s) decays an idle team's usage to a subnormal number within a day, and beside a
    busy sibling's it divided by zero in every cycle."""
    if u <= 0 or total_u <= 0:
        return math.inf
    part = u / total_u
    return math.inf if part == 0 else share / part


def _band(ratio: float, log_base: float) -> int:
    if math.isinf(ratio):
        return MAX_BAND
    if ratio <= 0:
        return -MAX_BAND
    b = math.floor(math.log(ratio) / log_base + 0.5)
    return max(-MAX_BAND, min(MAX_BAND, b))


def standings(teams: Iterable[Team], band: float = 2.0) -> tuple[dict[str, int], int]:
    """Rank each team by hierarchical fair share; return ``(rank by team, neutral rank)``.

    Lower rank = better standing. The neutral rank is what a team missing from the tree gets
    (as if it sat at the root with exactly its share at every level).
    """
    teams = list(teams)
    names = {t.name for t in teams}
    if len(names) == len(teams) and all(t.parent not in names for t in teams):
        return _flat_standings(teams, band)
    return _tree_standings(teams, band)


def _tree_standings(teams: list[Team], band: float) -> tuple[dict[str, int], int]:
    """:func:`standings` for any team list: the depth-first walk of the tree."""
    by_name = {t.name: t for t in teams}
    children: dict[str | None, list[Team]] = {}
    for t in teams:
        parent = t.parent if t.parent in by_name else None
        children.setdefault(parent, []).append(t)
    for siblings in children.values():
        siblings.sort(key=lambda t: t.name)

    subtree: dict[str, float] = {}

    def usage(t: Team) -> float:
        total = t.usage_gpu_s + sum(usage(c) for c in children.get(t.name, ()))
        subtree[t.name] = total
        return total

    for root in children.get(None, ()):
        usage(root)

    log_base = math.log(band)
    paths: dict[str, tuple[int, ...]] = {}
    stack: list[tuple[str | None, tuple[int, ...]]] = [(None, ())]
    while stack:
        parent, path = stack.pop()
        sibs = children.get(parent, [])
        total_w = sum(t.weight for t in sibs) or 1.0
        total_u = sum(subtree[t.name] for t in sibs)
        for t in sibs:
            u = subtree[t.name]
            ratio = _ratio(t.weight / total_w, u, total_u)
            p = path + (-_band(ratio, log_base),)
            paths[t.name] = p
            stack.append((t.name, p))
    depth = max((len(p) for p in paths.values()), default=1)
    padded = {name: p + (0,) * (depth - len(p)) for name, p in paths.items()}
    neutral = (0,) * depth
    keys = sorted(set(padded.values()) | {neutral})
    rank_of = {k: i for i, k in enumerate(keys)}
    return {name: rank_of[p] for name, p in padded.items()}, rank_of[neutral]


def _flat_standings(teams: list[Team], band: float) -> tuple[dict[str, int], int]:
    """:func:`standings` of teams that all sit at the root (distinct names, no parent among
    them): the same sums in the same (name) order, one band per team. The common case (one
    flat team per tenant) and recomputed every cycle, because usage changes every cycle."""
    sibs = sorted(teams, key=lambda t: t.name)
    total_w = sum(t.weight for t in sibs) or 1.0
    # the general walk adds each team's (childless) subtree as usage + 0
    total_u = sum(t.usage_gpu_s + 0 for t in sibs)
    log_base = math.log(band)
    path_of: dict[str, int] = {}
    for t in sibs:
        u = t.usage_gpu_s + 0
        ratio = _ratio(t.weight / total_w, u, total_u)
        path_of[t.name] = -_band(ratio, log_base)
    rank_of = {k: i for i, k in enumerate(sorted(set(path_of.values()) | {0}))}
    return {name: rank_of[p] for name, p in path_of.items()}, rank_of[0]
