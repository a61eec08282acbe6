"""The platform's own history as a trace: the `gpuplatform-trace` files `manage.py export_trace`
writes (format in docs/simulation.md), so a policy change can be replayed on the cluster's past.

The header carries what the replay needs beyond the jobs: the nodes (as a `ClusterSpec`), the team
tree with weights and quotas, the priority classes and the engine configuration the platform ran
with. They stay plain data here; the `gpuplatform` adapter turns them into engine objects, so this
module, like the rest of the core, does not need the engine.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, overload

from .cluster import ClusterSpec, NodeSpec
from .trace_job import MAX_NODE_GPUS, MAX_TRACE_TIME_S, TraceJob, finish_trace

FORMAT = "gpuplatform-trace"
VERSION = 1


@dataclass(frozen=True, slots=True)
class History:
    """A loaded history: the jobs (sorted, as every loader returns them) and the header's data."""

    jobs: tuple[TraceJob, ...]
    cluster: ClusterSpec
    priority_classes: Mapping[str, int]
    # team name -> {"parent": str | None, "weight": float, "quota": {model: (guaranteed, borrow)}}
    teams: Mapping[str, Mapping[str, Any]]
    config: Mapping[str, Any]  # engine Config fields, as a snapshot's "config" object
    origin: str = ""
    skipped: Mapping[str, int] = field(default_factory=dict)


class _Line:
    """Typed access to one JSON object of the file, with errors naming the line and the key."""

    def __init__(self, where: str, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object")
        self.where = where
        self.obj = obj

    def fail(self, key: str, reason: str) -> ValueError:
        return ValueError(f"{self.where}: {key}: {reason}")

    def get(self, key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if key not in self.obj:
            if optional:
                return None
            raise self.fail(key, "missing")
        value = self.obj[key]
        if value is None and optional:
            return None
        # bool is an int in Python; a count or a time written as true is still a mistake
        if isinstance(value, bool) and bool not in _kinds(kind):
            raise self.fail(key, f"expected {_name(kind)}")
        if not isinstance(value, kind):
            raise self.fail(key, f"expected {_name(kind)}")
        return value

    @overload
    def number(
        self,
        key: str,
        *,
        minimum: float,
        optional: Literal[False] = False,
        maximum: float = math.inf,
    ) -> float: ...

    @overload
    def number(
        self, key: str, *, minimum: float, optional: Literal[True], maximum: float = math.inf
    ) -> float | None: ...

    def number(
        self, key: str, *, minimum: float, optional: bool = False, maximum: float = math.inf
    ) -> float | None:
        value = self.get(key, (int, float), optional=optional)
        if value is None:
            return None
        if not math.isfinite(value) or value < minimum:
            raise self.fail(key, f"must be a finite number >= {minimum:g}")
        if value > maximum:
            raise self.fail(key, f"must be <= {maximum:g}")
        return float(value)

    def count(self, key: str, *, maximum: int | None = None) -> int:
        value: int = self.get(key, int)
        if value < 1:
            raise self.fail(key, "must be >= 1")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"must be <= {maximum}")
        return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    names.update({dict: "an object", list: "a list"})
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in _kinds(kind)))


def _lines(path: str) -> Iterator[tuple[int, Any]]:
    with open(path, encoding="utf-8") as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            except RecursionError:
                raise ValueError(f"{path}:{lineno}: not JSON (nested too deeply)") from None
            except ValueError:  # an integer longer than the interpreter converts
                raise ValueError(f"{path}:{lineno}: not JSON (an integer is too long)") from None


def _nodes(head: _Line) -> tuple[NodeSpec, ...]:
    nodes = []
    seen = set()
    for k, raw in enumerate(head.get("nodes", list)):
        n = _Line(f"{head.where}: nodes[{k}]", raw)
        name = n.get("name", str)
        if name in seen:
            raise n.fail("name", f"node {name!r} listed twice")
        seen.add(name)
        nodes.append(
            NodeSpec(
                name=name,
                gpu_model=n.get("gpu_model", str),
                gpus=n.count("gpus", maximum=MAX_NODE_GPUS),
                zone=n.get("zone", str, optional=True) or "",
                rack=n.get("rack", str, optional=True) or "",
                nvlink_domain=n.get("nvlink_domain", str, optional=True) or "",
                fabric=n.get("fabric", str, optional=True) or "",
                spot=bool(n.get("spot", bool, optional=True)),
            )
        )
    if not nodes:
        raise head.fail("nodes", "the history has no nodes to replay it on")
    return tuple(nodes)


def _teams(head: _Line) -> dict[str, dict[str, Any]]:
    teams: dict[str, dict[str, Any]] = {}
    for k, raw in enumerate(head.get("teams", list)):
        t = _Line(f"{head.where}: teams[{k}]", raw)
        quota = {}
        for model, pair in sorted((t.get("quota", dict, optional=True) or {}).items()):
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in pair)
            ):
                raise t.fail(f"quota.{model}", "expected [guaranteed, borrow_limit] GPUs")
            quota[model] = (pair[0], pair[1])
        weight = t.number("weight", minimum=0.0, optional=True)
        teams[t.get("name", str)] = {
            "parent": t.get("parent", str, optional=True),
            "weight": 1.0 if weight is None else weight,
            "quota": quota,
        }
    for name, team in teams.items():
        if team["parent"] is not None and team["parent"] not in teams:
            raise head.fail("teams", f"team {name!r} has an unknown parent {team['parent']!r}")
    return teams


class PolicyChangeError(ValueError):
    """A candidate's team weights or priority classes that the history cannot take: ``errors``
    maps each field (``team_weights.<team>``, ``priority_classes.<class>``) to its reason."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())))


def _known(names: Iterable[str]) -> str:
    listed = sorted(names)
    return ", ".join(listed[:12]) + (", ..." if len(listed) > 12 else "")


def with_policy(
    history: History,
    *,
    team_weights: Mapping[str, Any] | None = None,
    priority_classes: Mapping[str, Any] | None = None,
) -> History:
    """The same history (jobs, nodes, quotas, engine configuration) with the named teams'
    fair-share weights and the named priority classes' values changed: what a candidate policy
    replays. Teams and classes not named keep the header's. A name the header does not have,
    or a value that is not a finite weight >= 0 or an integer class value, raises
    ``PolicyChangeError`` naming every such field, so a misspelt team never replays the policy
    in force under the candidate's label."""
    errors: dict[str, str] = {}
    teams = {name: dict(spec) for name, spec in history.teams.items()}
    # Both come from a request's JSON: any value until checked here.
    given_weights: object = team_weights
    weights: Mapping[str, Any] = {}
    if isinstance(given_weights, Mapping):
        weights = given_weights
    elif given_weights is not None:
        errors["team_weights"] = "expected an object of team name to weight"
    for name, weight in weights.items():
        where = f"team_weights.{name}"
        if name not in teams:
            errors[where] = f"no such team in the history (teams: {_known(teams)})"
        elif (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            errors[where] = "must be a finite number >= 0"
        else:
            teams[name]["weight"] = float(weight)
    classes = dict(history.priority_classes)
    given_values: object = priority_classes
    values: Mapping[str, Any] = {}
    if isinstance(given_values, Mapping):
        values = given_values
    elif given_values is not None:
        errors["priority_classes"] = "expected an object of class name to integer value"
    for name, value in values.items():
        where = f"priority_classes.{name}"
        if name not in classes:
            errors[where] = f"no such priority class in the history (classes: {_known(classes)})"
        elif isinstance(value, bool) or not isinstance(value, int):
            errors[where] = "must be an integer"
        else:
            classes[name] = value
    if errors:
        raise PolicyChangeError(errors)
    return replace(history, teams=teams, priority_classes=classes)


def load_history(
    path: str | os.PathLike[str],
    *,
    max_jobs: int | None = None,
    max_submit: float | None = None,
) -> History:
    """Load a `gpuplatform-trace` file. `max_submit` keeps jobs with `submit_s <= max_submit`,
    `max_jobs` the first N. Raises ValueError (`path:line: key: reason`) on anything malformed:
    a replay of a half-understood history would answer the wrong question."""
    path = os.fspath(path)
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise ValueError(f"{path}: empty file")
    head = _Line(f"{path}:{first[0]}", first[1])
    if head.obj.get("format") != FORMAT:
        raise head.fail("format", f"expected {FORMAT!r}")
    if head.get("version", int) != VERSION:
        raise head.fail("version", f"this simulator reads version {VERSION}")
    classes = head.get("priority_classes", dict)
    for name, value in classes.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise head.fail(f"priority_classes.{name}", "expected an integer")
    teams = _teams(head)
    nodes = _nodes(head)
    jobs: list[TraceJob] = []
    ids: set[str] = set()
    for lineno, obj in lines:
        j = _Line(f"{path}:{lineno}", obj)
        submit = j.number("submit_s", minimum=0.0, maximum=MAX_TRACE_TIME_S)
        if max_submit is not None and submit > max_submit:
            continue
        job_id = j.get("id", str)
        if job_id in ids:
            raise j.fail("id", f"job {job_id!r} listed twice")
        ids.add(job_id)
        duration = j.number("duration_s", minimum=0.0, maximum=MAX_TRACE_TIME_S)
        if duration <= 0:
            raise j.fail("duration_s", "must be > 0")
        workers, gpw = j.count("workers"), j.count("gpus_per_worker")
        pc = j.get("priority_class", str)
        if pc not in classes:
            raise j.fail("priority_class", f"{pc!r} is not in the header's priority_classes")
        model = j.get("gpu_model", str, optional=True)
        interval = j.number(
            "checkpoint_interval_s", minimum=0.0, optional=True, maximum=MAX_TRACE_TIME_S
        )
        jobs.append(
            TraceJob(
                id=job_id,
                submit=submit,
                duration=duration,
                gpus=workers * gpw,
                tenant=j.get("team", str),
                models=(model,) if model else None,
                priority_class=pc,
                gpus_per_worker=gpw,
                preemptible=j.get("preemptible", bool),
                # a zero interval checkpoints never, as in the live platform's job spec
                checkpoint_interval_s=interval or None,
                runtime_limit_s=j.number(
                    "runtime_limit_s", minimum=0.0, optional=True, maximum=MAX_TRACE_TIME_S
                )
                or None,
                # optional: files written before they were exported have none
                user=j.get("user", str, optional=True) or "",
                name=j.get("name", str, optional=True) or "",
                image=j.get("image", str, optional=True) or "",
            )
        )
    skipped = head.get("skipped", dict, optional=True) or {}
    return History(
        jobs=finish_trace(jobs, max_jobs),
        cluster=ClusterSpec(nodes, name=os.path.basename(path)),
        priority_classes=dict(classes),
        teams=teams,
        config=dict(head.get("config", dict, optional=True) or {}),
        origin=head.get("origin", str, optional=True) or "",
        skipped={k: v for k, v in skipped.items() if isinstance(v, int)},
    )
