"""Reads of the policy history: the version in force (for the loop), the history and a diff
(platform admins only; anyone else gets NotFound, as if the pages did not exist).

The loop's hook, :func:`engine_config_in_force`, costs one query per cycle and never raises: a
stored configuration the engine's codec no longer accepts is logged and the environment's
``SCHEDULER_POLICY`` is used instead, so a format change cannot stop scheduling.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from core.errors import NotFound
from core.ids import parse_id
from scheduler.policy import SnapshotError, config_deprecations, config_from_dict, config_to_dict
from tenants.permissions import Caller, is_platform_admin

from .models import MAX_VERSION_NUMBER, PolicyVersion, WhatIfRun
from .services import current_tables, version_content
from .whatif import BASELINE

log = logging.getLogger(__name__)


def version_number(text: str) -> int | None:
    """A version number as a page or the API is given it (1 .. ``MAX_VERSION_NUMBER``), or None
    when it is not one. ``parse_id``, not ``str.isdigit()``: "²" is a digit to isdigit() and not
    to int()."""
    number = parse_id(text)
    return number if number is not None and number <= MAX_VERSION_NUMBER else None


def engine_config_in_force() -> dict[str, Any] | None:
    """The engine configuration of the newest version, or None (no version yet, or one the
    codec refuses: then the caller falls back to the environment's)."""
    data = PolicyVersion.objects.order_by("-number").values_list("number", "engine_config").first()
    if data is None:
        return None
    number: int = data[0]
    config: dict[str, Any] = data[1]
    try:
        config_from_dict(config, path=f"policy v{number}")
    except SnapshotError as exc:
        log.error("policy v%s not readable by the engine (%s); using SCHEDULER_POLICY", number, exc)
        return None
    if number not in _DEPRECATIONS_LOGGED:
        # A version stored before the las section still loads (the codec translates its flat
        # keys at every read); say so once per process, not every cycle.
        _DEPRECATIONS_LOGGED.add(number)
        for message in config_deprecations(config, f"policy v{number}"):
            log.warning("%s", message)
    return config


_DEPRECATIONS_LOGGED: set[int] = set()


def version_in_force_number() -> int | None:
    """The number of the newest version (None before the first): what a job's reproducibility
    record names as the policy that placed it (``settings.SCHEDULER_POLICY_VERSION_SOURCE``)."""
    return PolicyVersion.objects.order_by("-number").values_list("number", flat=True).first()


def _require_admin(user: Caller) -> None:
    if not is_platform_admin(user):
        raise NotFound("no such page", field="policy")


def policy_version_list(*, user: Caller) -> QuerySet[PolicyVersion]:
    _require_admin(user)
    return PolicyVersion.objects.order_by("-number")


def policy_version_get(*, user: Caller, number: int) -> PolicyVersion:
    _require_admin(user)
    version = PolicyVersion.objects.filter(number=number).first()
    if version is None:
        raise NotFound("no such policy version", field="number")
    return version


def policy_in_force(*, user: Caller) -> PolicyVersion | None:
    _require_admin(user)
    return PolicyVersion.objects.order_by("-number").first()


@dataclass(frozen=True)
class DiffRow:
    section: str  # "engine", "team weight", "priority class"
    key: str
    before: Any
    after: Any


def effective_engine_config(data: dict[str, Any]) -> dict[str, Any]:
    """Every engine field with its value under ``data`` (defaults filled in by the codec), by
    its JSON key (``las.long_run_s`` inside the ``las`` section, ``las`` itself only when it is
    off), for showing and comparing; {} if the codec refuses ``data``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # logged by the loop's read
            config = config_from_dict(data, path="engine_config")
    except SnapshotError:
        return {}
    out: dict[str, Any] = {}
    for key, value in config_to_dict(config).items():
        if key == "las" and value is not None:
            out.update({f"las.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def _class_text(spec: dict[str, Any] | None) -> str | None:
    if spec is None:
        return None
    flags = [
        "preemptible" if spec.get("preemptible_by_default") else "not preemptible",
        "restricted" if spec.get("restricted") else "open",
    ]
    return f"{spec.get('value')} ({', '.join(flags)})"


def diff_contents(before: dict[str, Any], after: dict[str, Any]) -> list[DiffRow]:
    """What differs between two policy contents (``engine_config``, ``team_weights``,
    ``priority_classes``), engine fields compared by their effective values."""
    rows = []
    old_engine = effective_engine_config(before.get("engine_config") or {})
    new_engine = effective_engine_config(after.get("engine_config") or {})
    for key in sorted(set(old_engine) | set(new_engine)):
        if old_engine.get(key) != new_engine.get(key):
            rows.append(DiffRow("engine", key, old_engine.get(key), new_engine.get(key)))
    old_w, new_w = before.get("team_weights") or {}, after.get("team_weights") or {}
    for slug in sorted(set(old_w) | set(new_w)):
        if old_w.get(slug) != new_w.get(slug):
            rows.append(DiffRow("team weight", slug, old_w.get(slug), new_w.get(slug)))
    old_c, new_c = before.get("priority_classes") or {}, after.get("priority_classes") or {}
    for name in sorted(set(old_c) | set(new_c)):
        if old_c.get(name) != new_c.get(name):
            rows.append(
                DiffRow(
                    "priority class",
                    name,
                    _class_text(old_c.get(name)),
                    _class_text(new_c.get(name)),
                )
            )
    return rows


def policy_diff(*, user: Caller, a: int, b: int) -> list[DiffRow]:
    """What changed from version ``a`` to version ``b``."""
    first = policy_version_get(user=user, number=a)
    second = policy_version_get(user=user, number=b)
    return diff_contents(version_content(first), version_content(second))


def policy_drift(*, user: Caller, version: PolicyVersion | None) -> list[DiffRow]:
    """Team weights and priority classes changed outside the policy (under Teams) since
    ``version`` was put in force: what the loop reads now against what the version says."""
    _require_admin(user)
    if version is None:
        return []
    weights, classes = current_tables()
    recorded = {
        "team_weights": {k: v for k, v in version.team_weights.items() if k in weights},
        "priority_classes": {k: v for k, v in version.priority_classes.items() if k in classes},
    }
    now = {
        "team_weights": {k: v for k, v in weights.items() if k in version.team_weights},
        "priority_classes": {k: v for k, v in classes.items() if k in version.priority_classes},
    }
    return diff_contents(recorded, now)


def whatif_run_list(*, user: Caller) -> QuerySet[WhatIfRun]:
    """Every what-if run, newest first (platform admins only)."""
    _require_admin(user)
    return WhatIfRun.objects.select_related("cluster").order_by("-created_at", "-id")


def whatif_run_get(*, user: Caller, run_id: int) -> WhatIfRun:
    _require_admin(user)
    run = WhatIfRun.objects.select_related("cluster").filter(pk=run_id).first()
    if run is None:
        raise NotFound("no such what-if run", field="run")
    return run


@dataclass(frozen=True)
class SideBySideRow:
    label: str
    key: str
    unit: str
    values: list[Any]  # one per policy, in the run's order (baseline first)
    better: str  # "lower" or "higher"


# The result table's headline rows: (metric key, label, unit, which direction is better).
SIDE_BY_SIDE = (
    ("avg_queue_s", "Average wait", "s", "lower"),
    ("p95_queue_s", "p95 wait", "s", "lower"),
    ("p99_jct_s", "p99 job completion time", "s", "lower"),
    ("avg_jct_s", "Average job completion time", "s", "lower"),
    ("preemptions", "Preemptions", "", "lower"),
    ("lost_gpu_hours", "Work lost", "GPU-h", "lower"),
    ("gpu_utilization", "GPU utilization", "fraction", "higher"),
    ("jain_fairness", "Fairness (Jain, 1 = even)", "", "higher"),
    ("jobs", "Jobs replayed", "", ""),
)


def whatif_policies(run: WhatIfRun) -> list[str]:
    """The run's policies in order: the one in force, then the candidates."""
    return [BASELINE, *[c for c in run.candidates if c != BASELINE]]


def whatif_side_by_side(run: WhatIfRun) -> list[SideBySideRow]:
    """The headline metrics of each policy of a finished run, a row per metric."""
    names = whatif_policies(run)
    return [
        SideBySideRow(label, key, unit, [run.results.get(n, {}).get(key) for n in names], better)
        for key, label, unit, better in SIDE_BY_SIDE
    ]


def whatif_team_rows(run: WhatIfRun) -> list[dict[str, Any]]:
    """Per team: for each policy its average and p95 wait, its GPU share and its fair share
    under that policy's weights (a candidate may change them), and the fair share in force."""
    names = whatif_policies(run)
    teams = sorted({t for n in names for t in run.details.get(n, {}).get("teams", {})})
    rows = []
    for team in teams:
        per = [run.details.get(n, {}).get("teams", {}).get(team, {}) for n in names]
        rows.append(
            {
                "team": team,
                "fair_share": next((p["fair_share"] for p in per if "fair_share" in p), None),
                "policies": [
                    {
                        "avg_wait_s": p.get("avg_wait_s"),
                        "p95_wait_s": p.get("p95_wait_s"),
                        "gpu_share": p.get("gpu_share"),
                        "fair_share": p.get("fair_share"),
                    }
                    for p in per
                ],
            }
        )
    return rows


def whatif_candidate_notes(run: WhatIfRun) -> list[tuple[str, list[str]]]:
    """Per candidate, its changes the replay could not show (``not_replayed`` of its details):
    (candidate, fields), only for candidates with any."""
    return [
        (name, run.details[name]["not_replayed"])
        for name in whatif_policies(run)[1:]
        if run.details.get(name, {}).get("not_replayed")
    ]
