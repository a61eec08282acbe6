"""The job spec: a YAML document (``kind: TrainingJob``) turned into the API's submission body.

Guarantees:
- ``validate_spec`` never talks to the network; it checks every field it knows and raises one
  ``SpecError`` that lists *all* problems, each keyed by the field's path in the document
  (``spec.workers``, ``spec.elastic.maxWorkers``, ``metadata.name``), so a user fixes a file in one
  pass, the way ``kubectl apply`` with strict validation reports it.
- Unknown fields are errors (a misspelt ``gpusPerworker`` must not silently fall back to a
  default), and so are values of the wrong type; YAML's loose typing (``yes`` → true, ``08`` →
  a string) is not second-guessed beyond what is documented in docs/jobspec.md.
- The returned body uses the REST API's contract field names (``gpus_per_worker``, …) and only
  contains fields the user set, so server-side defaults (priority class, preemptible) apply.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from . import yamltext

API_VERSION = "gpuplatform/v1"
KIND = "TrainingJob"

# Spec path → API field. The reverse map lets the CLI name the user's own field when the server
# rejects a value.
SPEC_TO_API: dict[str, str] = {
    "metadata.name": "name",
    "metadata.team": "team",
    "spec.image": "image",
    "spec.command": "command",
    "spec.env": "env",
    "spec.workers": "workers",
    "spec.gpusPerWorker": "gpus_per_worker",
    "spec.gpuModel": "gpu_model",
    "spec.priorityClass": "priority_class",
    "spec.preemptible": "preemptible",
    "spec.checkpointIntervalSeconds": "checkpoint_interval_s",
    "spec.runtimeLimit": "runtime_limit_s",
    "spec.deadline": "deadline",
    "spec.dataset": "dataset",
    "spec.datasetVersion": "dataset_version",
    "spec.codeRef": "code_ref",
    "spec.checkpointOnAdvice": "checkpoint_on_advice",
    "spec.elastic": "elastic",
    "spec.elastic.minWorkers": "elastic.min_workers",
    "spec.elastic.maxWorkers": "elastic.max_workers",
    "spec.routing": "routing",
    "spec.routing.clusters": "routing.clusters",
    "spec.routing.regions": "routing.regions",
    "spec.routing.preferClusters": "routing.prefer_clusters",
    "spec.routing.preferRegions": "routing.prefer_regions",
    "spec.routing.maxPricePerGpuHour": "routing.max_price_per_gpu_h",
    "spec.routing.spot": "routing.spot",
    "spec.routing.commHeavy": "routing.comm_heavy",
}
API_TO_SPEC: dict[str, str] = {api: path for path, api in SPEC_TO_API.items()}

_TOP_FIELDS = {"apiVersion", "kind", "metadata", "spec"}
_ARRAY_FIELDS = {"count", "env", "items"}
# Mirrors the API's limit on indices per array (scheduler.arrays.MAX_ARRAY_SIZE).
MAX_ARRAY_SIZE = 10_000
_METADATA_FIELDS = {"name", "team", "labels", "annotations"}
_SPEC_FIELDS = {
    p.split(".", 1)[1] for p in SPEC_TO_API if p.startswith("spec.") and p.count(".") == 1
}
_ELASTIC_FIELDS = {"minWorkers", "maxWorkers"}
# spec.routing's fields (docs/routing.md) -> the API's routing object's keys.
ROUTING_FIELDS: dict[str, str] = {
    p.removeprefix("spec.routing."): api.removeprefix("routing.")
    for p, api in SPEC_TO_API.items()
    if p.startswith("spec.routing.")
}
_ROUTING_NAME_LISTS = ("clusters", "regions", "preferClusters", "preferRegions")
_REQUIRED = frozenset({"workers", "gpusPerWorker"})

# Bounds mirror the API serializer so most mistakes are caught before a round trip.
MAX_WORKERS = 4096
MAX_GPUS_PER_WORKER = 64
_NAME_MAX = 200
_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
# Records one error: the path of the field at fault and the reason.
Fail = Callable[[str, str], None]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # whole names only: fullmatch
_DURATION_PART = re.compile(r"(\d+)([dhms])")
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_SLURM_WITH_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")
_SLURM_CLOCK = re.compile(r"^(\d+):(\d{1,2})(?::(\d{1,2}))?$")


class SpecError(Exception):
    """The spec is invalid. ``errors`` maps a field path to its reasons, in document order."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        first = next(iter(errors.items()))
        super().__init__(f"{first[0]}: {first[1][0]}")

    def lines(self) -> list[str]:
        """One ``path: reason`` line per problem."""
        return [f"{path}: {reason}" for path, reasons in self.errors.items() for reason in reasons]


def parse_deadline(value: Any) -> str:
    """An ISO 8601 time with a time zone (YAML may have read it as a datetime already), as the
    API takes it. Whether it is in the future and near enough is the platform's to say."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"{value!r} is not a time; use ISO 8601, e.g. 2030-01-31T18:00:00Z"
            ) from None
    if not isinstance(value, datetime):
        raise ValueError("must be a time, e.g. 2030-01-31T18:00:00Z")
    if value.tzinfo is None:
        raise ValueError("must include a time zone, e.g. 2030-01-31T18:00:00Z or +02:00")
    return value.isoformat()


def _whole(value: Any) -> Any:
    """A float with no fraction as the integer it is, anything else as it came. YAML reads
    ``1e3`` as a float (1000.0); an integer field or a number of seconds takes it as 1000, and
    ``1e300`` meets the field's upper bound rather than "must be an integer"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _not_finite(value: Any) -> str | None:
    """The reason to refuse ``value`` if it is a float that is no number (``.nan``) or infinite
    (``.inf``, or ``1e400``, which reads as infinity), else None: said as such, not as "must be
    an integer >= 1" (which read as if ``1e400`` were too small)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, not {yamltext.as_written(value)}"
    return None


def parse_duration(value: Any) -> int:
    """Seconds from ``7200``, ``"7200"``, ``"2h"``, ``"90m"``, ``"1h30m"``, ``"1d"``, ``"45s"``,
    or Slurm's ``--time`` forms ``"H:M:S"``, ``"M:S"``, ``"D-H"``, ``"D-H:M"``, ``"D-H:M:S"``. Raises ``ValueError`` (with a
    message fit to show the user) for anything else or for a duration below one second. A bare
    number means seconds (unlike Slurm's ``--time``, where it means minutes)."""
    if isinstance(value, bool):
        raise ValueError("must be a duration like 2h, 90m, 1h30m or a number of seconds")
    if reason := _not_finite(value):
        raise ValueError(reason)
    value = _whole(value)
    if isinstance(value, float):
        raise ValueError("must be a whole number of seconds")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.isdigit():
            seconds = int(text)
        elif (slurm := _slurm_seconds(text)) is not None:
            seconds = slurm
        elif text and _DURATION_PART.sub("", text) == "" and _ordered_units(text):
            seconds = sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
        else:
            raise ValueError(
                f"{value!r} is not a duration: use e.g. 2h, 90m, 1h30m, 02:00:00 or seconds"
            )
    else:
        raise ValueError("must be a duration like 2h, 90m, 1h30m or a number of seconds")
    if seconds < 1:
        raise ValueError("must be at least 1 second")
    return seconds


def _slurm_seconds(text: str) -> int | None:
    """Slurm's ``--time`` forms: ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``."""
    if match := _SLURM_WITH_DAYS.match(text):
        days, hours, minutes, secs = (int(g or 0) for g in match.groups())
        return days * 86400 + hours * 3600 + minutes * 60 + secs
    if match := _SLURM_CLOCK.match(text):
        first, second, third = match.groups()
        if third is None:  # M:S, as in Slurm
            return int(first) * 60 + int(second)
        return int(first) * 3600 + int(second) * 60 + int(third)
    return None


def _ordered_units(text: str) -> bool:
    """Units appear at most once each, largest first (``1h30m``, not ``30m1h``)."""
    units = [u for _n, u in _DURATION_PART.findall(text)]
    order = "dhms"
    positions = [order.index(u) for u in units]
    return positions == sorted(set(positions))


def load_spec_text(text: str, *, source: str = "<spec>") -> Any:
    """Parse YAML (or JSON, a subset) text; a syntax error becomes a ``SpecError`` on ``source``."""
    try:
        documents = [d for d in yamltext.load_all(text) if d is not None]
    except yamltext.YamlTextError as exc:
        raise SpecError({source: [str(exc)]}) from None
    if not documents:
        raise SpecError({source: ["is empty"]})
    if len(documents) > 1:
        raise SpecError({source: ["holds several YAML documents; submit one job per file"]})
    return documents[0]


def validate_spec(document: Any, *, required: frozenset[str] = _REQUIRED) -> dict[str, Any]:
    """Check a parsed job spec and return the API submission body (contract field names).

    ``metadata.team`` may be absent: the body then has no ``team`` and the caller decides (the
    CLI picks the user's only team). Raises ``SpecError`` listing every problem found."""
    errors: dict[str, list[str]] = {}

    def fail(path: str, reason: str) -> None:
        errors.setdefault(path, []).append(reason)

    if not isinstance(document, Mapping):
        raise SpecError({"(document)": ["must be a mapping with apiVersion, kind, metadata, spec"]})

    for key in document:
        if key not in _TOP_FIELDS:
            fail(str(key), _unknown(key, _TOP_FIELDS))
    if document.get("apiVersion") != API_VERSION:
        fail("apiVersion", f"must be {API_VERSION!r}")
    if document.get("kind") != KIND:
        fail("kind", f"must be {KIND!r}")

    body: dict[str, Any] = {}
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        fail("metadata", "must be a mapping with at least a name")
        metadata = {}
    for key in metadata:
        if key not in _METADATA_FIELDS:
            fail(f"metadata.{key}", _unknown(key, _METADATA_FIELDS))
    name = metadata.get("name")
    if not isinstance(name, str) or not name.strip():
        fail("metadata.name", "is required (a non-empty string)")
    elif len(name) > _NAME_MAX:
        fail("metadata.name", f"must be at most {_NAME_MAX} characters")
    else:
        body["name"] = name.strip()
    if "team" in metadata:
        team = metadata["team"]
        if not isinstance(team, str) or not _SLUG.match(team):
            fail("metadata.team", "must be a team slug (letters, digits, '-' or '_')")
        else:
            body["team"] = team

    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        fail("spec", "must be a mapping with at least workers and gpusPerWorker")
        spec = {}
    for key in spec:
        if key not in _SPEC_FIELDS:
            fail(f"spec.{key}", _unknown(key, _SPEC_FIELDS))

    body.update(_validate_spec_fields(spec, fail, required=required))
    if errors:
        raise SpecError(errors)
    return body


def _unknown(key: Any, known: set[str]) -> str:
    """ "unknown field", with the closest known name when the key looks like a typo."""
    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
    return f"unknown field (did you mean {close[0]}?)" if close else "unknown field"


def _validate_spec_fields(
    spec: Mapping[str, Any],
    fail: Fail,
    *,
    prefix: str = "spec",
    required: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """API fields from the spec fields present; ``required`` names the ones that must be there.
    Paths in errors start with ``prefix`` (``spec``, or ``array.items[2]`` for an index)."""
    body: dict[str, Any] = {}

    def integer(path: str, value: Any, low: int, high: int | None = None) -> int | None:
        if reason := _not_finite(value):
            fail(path, reason)
            return None
        value = _whole(value)
        if isinstance(value, bool) or not isinstance(value, int):
            fail(path, f"must be an integer >= {low}")
            return None
        if value < low:
            fail(path, f"must be an integer >= {low}")
            return None
        if high is not None and value > high:
            fail(path, f"must be at most {high}")
            return None
        return value

    def string(path: str, value: Any) -> str | None:
        if not isinstance(value, str):
            fail(path, "must be a string")
            return None
        return value

    for field, api, most in (
        ("workers", "workers", MAX_WORKERS),
        ("gpusPerWorker", "gpus_per_worker", MAX_GPUS_PER_WORKER),
    ):
        if field in spec:
            body[api] = integer(f"{prefix}.{field}", spec[field], 1, most)
        elif field in required:
            fail(f"{prefix}.{field}", "is required (an integer >= 1)")

    for field, api in (
        ("image", "image"),
        ("gpuModel", "gpu_model"),
        ("priorityClass", "priority_class"),
        ("dataset", "dataset"),
        ("datasetVersion", "dataset_version"),
        ("codeRef", "code_ref"),
    ):
        if field in spec and spec[field] is not None:
            body[api] = string(f"{prefix}.{field}", spec[field])

    if "command" in spec and spec["command"] is not None:
        command = spec["command"]
        if isinstance(command, str):
            body["command"] = command
        elif isinstance(command, list) and all(
            isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in command
        ):
            # The API stores one shell-quoted string; quoting keeps each list item one argument.
            # A number is its text as written: 3e-4, 010 and 1e400 stay so (str() wrote 0.0003,
            # 10 and inf, and the job ran other arguments).
            body["command"] = shlex.join(yamltext.as_written(a) for a in command)
        else:
            fail(f"{prefix}.command", "must be a string or a list of strings")

    if "checkpointOnAdvice" in spec and spec["checkpointOnAdvice"] is not None:
        if isinstance(spec["checkpointOnAdvice"], bool):
            body["checkpoint_on_advice"] = spec["checkpointOnAdvice"]
        else:
            fail(f"{prefix}.checkpointOnAdvice", "must be true or false")

    if "preemptible" in spec and spec["preemptible"] is not None:
        if isinstance(spec["preemptible"], bool):
            body["preemptible"] = spec["preemptible"]
        else:
            fail(f"{prefix}.preemptible", "must be true or false")

    if "checkpointIntervalSeconds" in spec and spec["checkpointIntervalSeconds"] is not None:
        try:
            body["checkpoint_interval_s"] = parse_duration(spec["checkpointIntervalSeconds"])
        except ValueError as exc:
            fail(f"{prefix}.checkpointIntervalSeconds", str(exc))
    if "runtimeLimit" in spec and spec["runtimeLimit"] is not None:
        try:
            body["runtime_limit_s"] = parse_duration(spec["runtimeLimit"])
        except ValueError as exc:
            fail(f"{prefix}.runtimeLimit", str(exc))
    if "deadline" in spec and spec["deadline"] is not None:
        try:
            body["deadline"] = parse_deadline(spec["deadline"])
        except ValueError as exc:
            fail(f"{prefix}.deadline", str(exc))

    if "env" in spec and spec["env"] is not None:
        body["env"] = _validate_env(spec["env"], fail, prefix)

    if "elastic" in spec and spec["elastic"] is not None:
        elastic = spec["elastic"]
        if not isinstance(elastic, Mapping):
            fail(f"{prefix}.elastic", "must be a mapping with minWorkers and maxWorkers")
        else:
            for key in elastic:
                if key not in _ELASTIC_FIELDS:
                    fail(f"{prefix}.elastic.{key}", _unknown(key, _ELASTIC_FIELDS))
            low: int | None = None
            high: int | None = None
            for key in ("minWorkers", "maxWorkers"):
                if key not in elastic:
                    fail(f"{prefix}.elastic.{key}", "is required (an integer >= 1)")
            if "minWorkers" in elastic:
                low = integer(f"{prefix}.elastic.minWorkers", elastic["minWorkers"], 1, MAX_WORKERS)
            if "maxWorkers" in elastic:
                high = integer(
                    f"{prefix}.elastic.maxWorkers", elastic["maxWorkers"], 1, MAX_WORKERS
                )
            if low is not None and high is not None:
                if high < low:
                    fail(f"{prefix}.elastic.maxWorkers", f"must be >= {prefix}.elastic.minWorkers")
                else:
                    body["elastic"] = {"min_workers": low, "max_workers": high}
                    workers = body.get("workers")
                    if workers is not None and not low <= workers <= high:
                        fail(f"{prefix}.workers", f"must lie in the elastic range {low}..{high}")

    if "routing" in spec and spec["routing"] is not None:
        body["routing"] = _validate_routing(spec["routing"], fail, f"{prefix}.routing")
    return {k: v for k, v in body.items() if v is not None}


def _validate_routing(routing: Any, fail: Fail, path: str) -> dict[str, Any] | None:
    """``spec.routing`` as the API's routing object (docs/routing.md). Names of clusters and
    regions are the server's to check (it knows them); shapes are checked here."""
    if not isinstance(routing, Mapping):
        fail(
            path,
            "must be a mapping (clusters, regions, preferClusters, preferRegions, "
            "maxPricePerGpuHour, spot, commHeavy)",
        )
        return None
    body: dict[str, Any] = {}
    api_names = {api: field for field, api in ROUTING_FIELDS.items()}
    for key, value in routing.items():
        if key not in ROUTING_FIELDS:
            if key in api_names:  # the API's spelling, in a file that uses camelCase
                fail(f"{path}.{key}", f"unknown field (did you mean {api_names[key]}?)")
            else:
                fail(f"{path}.{key}", _unknown(key, set(ROUTING_FIELDS)))
            continue
        if value is None:
            continue
        field_path = f"{path}.{key}"
        if key in _ROUTING_NAME_LISTS:
            names = _routing_names(value, fail, field_path)
            if names is not None:
                body[ROUTING_FIELDS[key]] = names
        elif key == "maxPricePerGpuHour":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                fail(field_path, "must be a number (USD per GPU-hour)")
            elif not value >= 0 or value == float("inf"):
                fail(field_path, "must be >= 0")
            else:
                body["max_price_per_gpu_h"] = value
        elif not isinstance(value, bool):
            fail(field_path, "must be true or false")
        else:
            body[ROUTING_FIELDS[key]] = value
    return body


def _routing_names(value: Any, fail: Fail, path: str) -> list[str] | None:
    """A list of distinct non-empty names."""
    if not isinstance(value, list):
        fail(path, "must be a list of names")
        return None
    names: list[str] = []
    ok = True
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name.strip():
            fail(f"{path}[{i}]", "must be a non-empty string")
            ok = False
        elif name.strip() in names:
            fail(f"{path}[{i}]", f"{name.strip()!r} listed twice")
            ok = False
        else:
            names.append(name.strip())
    return names if ok else None


def _validate_env(env: Any, fail: Fail, prefix: str = "spec") -> dict[str, str] | None:
    """A mapping NAME: value, or Kubernetes' list of {name, value}; values become strings (a
    number as the file wrote it)."""
    # Names come from YAML keys and items: not necessarily strings, checked below.
    pairs: list[tuple[Any, Any, str]] = []
    if isinstance(env, Mapping):
        pairs = [(k, v, f"{prefix}.env.{k}") for k, v in env.items()]
    elif isinstance(env, list):
        for i, item in enumerate(env):
            if not isinstance(item, Mapping) or set(item) - {"name", "value"} or "name" not in item:
                fail(f"{prefix}.env[{i}]", "must be a mapping with name and value")
                continue
            pairs.append((item["name"], item.get("value", ""), f"{prefix}.env[{i}]"))
    else:
        fail(f"{prefix}.env", "must be a mapping of NAME: value (or a list of {name, value})")
        return None
    result: dict[str, str] = {}
    for name, value, path in pairs:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            fail(
                path, "the variable name must be letters, digits and '_', not starting with a digit"
            )
            continue
        if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
            # YAML reads `yes`, `true`, `~` as booleans/null; refuse rather than guess the text.
            fail(path, "must be a string or a number (quote values like 'true' or 'yes')")
            continue
        result[name] = yamltext.as_written(value)
    return result


def is_array(document: Any) -> bool:
    """Does the document describe a job array (a top-level ``array`` section)?"""
    return isinstance(document, Mapping) and "array" in document


def validate_array_spec(document: Any) -> dict[str, Any]:
    """Check a job spec with an ``array`` section and return the body of
    ``POST /api/v1/job-arrays/``: ``{"name", "team"?, "template", "items"}``.

    ``spec`` is the template every index starts from; ``array.count`` is the number of indices;
    ``array.env`` maps a variable name to a list with one value per index; ``array.items`` is a
    list of per-index spec overrides (same field names as ``spec``). The sizes given must agree.
    ``spec.workers`` / ``spec.gpusPerWorker`` may be left out only when every item sets them.
    Raises one ``SpecError`` listing every problem (``array.env.LR``, ``array.items[2].workers``).
    """
    errors: dict[str, list[str]] = {}

    def fail(path: str, reason: str) -> None:
        errors.setdefault(path, []).append(reason)

    if not isinstance(document, Mapping):
        raise SpecError({"(document)": ["must be a mapping with apiVersion, kind, metadata, spec"]})
    section = document.get("array")
    if not isinstance(section, Mapping):
        fail("array", "must be a mapping with count, env and/or items")
        section = {}
    for key in section:
        if key not in _ARRAY_FIELDS:
            fail(f"array.{key}", _unknown(key, _ARRAY_FIELDS))

    sizes: list[tuple[str, int]] = []
    count = section.get("count")
    if count is not None and (reason := _not_finite(count)):
        fail("array.count", reason)
    elif count is not None:
        count = _whole(count)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            fail("array.count", "must be an integer >= 1")
        elif count > MAX_ARRAY_SIZE:
            fail("array.count", f"must be at most {MAX_ARRAY_SIZE}")
        else:
            sizes.append(("array.count", count))

    items: list[dict[str, Any]] = []
    raw_items = section.get("items")
    covered = set(_REQUIRED)
    if raw_items is not None:
        if not isinstance(raw_items, list) or not raw_items:
            fail("array.items", "must be a non-empty list of spec overrides (one per index)")
        else:
            sizes.append(("array.items", len(raw_items)))
            for i, item in enumerate(raw_items[:MAX_ARRAY_SIZE]):
                path = f"array.items[{i}]"
                if item is None:
                    item = {}
                if not isinstance(item, Mapping):
                    fail(path, "must be a mapping of spec fields (may be empty: {})")
                    items.append({})
                    continue
                for key in item:
                    if key not in _SPEC_FIELDS:
                        fail(f"{path}.{key}", _unknown(key, _SPEC_FIELDS))
                covered &= set(item)
                items.append(_validate_spec_fields(item, fail, prefix=path))

    env_lists: dict[str, list[str]] = {}
    raw_env = section.get("env")
    if raw_env is not None:
        if not isinstance(raw_env, Mapping):
            fail("array.env", "must be a mapping NAME: [value for index 0, value for index 1, …]")
        else:
            for name, values in raw_env.items():
                path = f"array.env.{name}"
                if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                    fail(
                        path,
                        "the variable name must be letters, digits and '_', not "
                        "starting with a digit",
                    )
                elif not isinstance(values, list) or not values:
                    fail(path, "must be a list with one value per index")
                elif any(isinstance(v, (bool, list, dict)) or v is None for v in values):
                    fail(path, "values must be strings or numbers (quote 'true', 'yes', '~')")
                else:
                    env_lists[name] = [yamltext.as_written(v) for v in values]
                    sizes.append((path, len(values)))

    size = None
    if sizes:
        first_path, size = sizes[0]
        for path, n in sizes[1:]:
            if n != size:
                fail(path, f"has {n} entries but {first_path} gives {size} indices")
        if size > MAX_ARRAY_SIZE:
            fail(sizes[0][0], f"at most {MAX_ARRAY_SIZE} indices per array (got {size})")
    elif not errors:
        fail("array", "give count, env lists or items (the number of indices)")

    template_document = {k: v for k, v in document.items() if k != "array"}
    try:
        template = validate_spec(template_document, required=_REQUIRED - covered)
    except SpecError as exc:
        for path, reasons in exc.errors.items():
            errors.setdefault(path, []).extend(reasons)
        template = {}
    if errors:
        raise SpecError(errors)

    assert size is not None
    per_index = [dict(items[i]) if i < len(items) else {} for i in range(size)]
    for name, values in env_lists.items():
        for i, value in enumerate(values):
            per_index[i].setdefault("env", {})[name] = value
    body: dict[str, Any] = {"name": template.pop("name")}
    if "team" in template:
        body["team"] = template.pop("team")
    body["template"] = template
    body["items"] = per_index
    return body


def array_path_for(api_field: str) -> str:
    """The spec path that feeds a field of the array API's answer: ``template.gpu_model`` →
    ``spec.gpuModel``, ``items[3].gpus_per_worker`` → ``array.items[3].gpusPerWorker``."""
    if api_field.startswith("template."):
        return spec_path_for(api_field.removeprefix("template."))
    match = re.match(r"^items\[(\d+)\]\.(.+)$", api_field)
    if match:
        inner = spec_path_for(match.group(2))
        return f"array.items[{match.group(1)}].{inner.removeprefix('spec.')}"
    if api_field in ("items", "count"):
        return "array"
    return spec_path_for(api_field)


_INDEXED = re.compile(r"^(.+?)(\[\d+\])$")


def spec_path_for(api_field: str) -> str:
    """The spec path that feeds an API field (``gpus_per_worker`` → ``spec.gpusPerWorker``,
    ``routing.prefer_clusters[1]`` → ``spec.routing.preferClusters[1]``)."""
    if api_field in API_TO_SPEC:
        return API_TO_SPEC[api_field]
    if (match := _INDEXED.match(api_field)) and match.group(1) in API_TO_SPEC:
        return API_TO_SPEC[match.group(1)] + match.group(2)
    return api_field
