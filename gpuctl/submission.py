"""A job submission from a spec file and flags, as ``submit``, ``estimate`` and ``array submit``
take it: the shared flags, and the API body built from the file with the flags overriding it
(as with sbatch), each value's flag remembered so a server's 400 names what the user typed."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import UsageError
from .spec import (
    SpecError,
    is_array,
    load_spec_text,
    validate_array_spec,
    validate_spec,
)


def submit_arguments(cmd: argparse.ArgumentParser) -> None:
    """The spec flags shared by ``submit`` and ``array submit`` (they override the file)."""
    cmd.add_argument("-f", "--file", help="job spec YAML file ('-' reads standard input)")
    cmd.add_argument("--name", "-J", help="job name (metadata.name)")
    cmd.add_argument("--team", help="team slug (metadata.team; default: your only team)")
    cmd.add_argument("--image", help="container image (spec.image)")
    cmd.add_argument("--workers", "-N", help="number of workers (spec.workers)")
    cmd.add_argument("--gpus-per-worker", help="GPUs per worker (spec.gpusPerWorker)")
    cmd.add_argument("--gpu-model", help="GPU model, e.g. h100-80gb (spec.gpuModel)")
    cmd.add_argument("--priority-class", help="priority class (spec.priorityClass)")
    cmd.add_argument(
        "--preemptible",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="may be preempted (spec.preemptible; default from the priority class)",
    )
    cmd.add_argument(
        "--checkpoint-interval", help="e.g. 30m or 1800 (spec.checkpointIntervalSeconds)"
    )
    cmd.add_argument(
        "--runtime-limit", "--time", "-t", help="e.g. 2h, 90m, 02:00:00 (spec.runtimeLimit)"
    )
    cmd.add_argument(
        "--deadline",
        help="when it must be done, ISO 8601 with a time zone, e.g. 2030-01-31T18:00:00Z "
        "(spec.deadline)",
    )
    cmd.add_argument("--dataset", help="dataset the job reads (spec.dataset)")
    cmd.add_argument("--dataset-version", help="the dataset's version (spec.datasetVersion)")
    cmd.add_argument("--code-ref", help="the code that runs, e.g. a git commit (spec.codeRef)")
    cmd.add_argument("--min-workers", help="elastic minimum (spec.elastic.minWorkers)")
    cmd.add_argument("--max-workers", help="elastic maximum (spec.elastic.maxWorkers)")
    cmd.add_argument(
        "--env", "-e", action="append", default=[], metavar="NAME=VALUE", help="repeatable"
    )
    routing = cmd.add_argument_group(
        "routing", "where the job may and would rather run (spec.routing; docs/routing.md)"
    )
    routing.add_argument(
        "--cluster",
        action="append",
        metavar="NAME",
        help="a cluster the job may run on; repeatable (spec.routing.clusters; default: any)",
    )
    routing.add_argument(
        "--region",
        action="append",
        metavar="REGION",
        help="a region the job may run in; repeatable (spec.routing.regions; default: any)",
    )
    routing.add_argument(
        "--prefer-cluster",
        action="append",
        metavar="NAME",
        help="try this cluster first; repeatable (spec.routing.preferClusters)",
    )
    routing.add_argument(
        "--prefer-region",
        action="append",
        metavar="REGION",
        help="try clusters in this region first; repeatable (spec.routing.preferRegions)",
    )
    routing.add_argument(
        "--max-price",
        metavar="USD_PER_GPU_H",
        help="the most the job pays per GPU-hour (spec.routing.maxPricePerGpuHour)",
    )
    routing.add_argument(
        "--spot",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="may run on spot capacity (spec.routing.spot; default: if preemptible)",
    )
    routing.add_argument(
        "--comm-heavy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="needs a fast interconnect across nodes (spec.routing.commHeavy; default: if it has "
        "more than one worker)",
    )
    cmd.add_argument(
        "--dry-run", action="store_true", help="validate and print the request; send nothing"
    )
    cmd.add_argument("command_args", nargs="*", metavar="-- COMMAND", help="spec.command")


def wait_arguments(cmd: argparse.ArgumentParser) -> None:
    """``submit --wait`` and ``array submit --wait`` (not ``estimate``: nothing runs)."""
    cmd.add_argument(
        "--wait",
        action="store_true",
        help="then wait until it ends (an array: all its jobs), as sbatch --wait: exit 0 if it "
        "succeeded, 3 if it failed or was cancelled",
    )
    cmd.add_argument(
        "--wait-interval", default="5", help="seconds between reads with --wait (default 5)"
    )


_SUBMIT_FLAGS: dict[str, str] = {
    "name": "metadata.name",
    "team": "metadata.team",
    "image": "spec.image",
    "workers": "spec.workers",
    "gpus_per_worker": "spec.gpusPerWorker",
    "gpu_model": "spec.gpuModel",
    "priority_class": "spec.priorityClass",
    "preemptible": "spec.preemptible",
    "checkpoint_interval": "spec.checkpointIntervalSeconds",
    "runtime_limit": "spec.runtimeLimit",
    "deadline": "spec.deadline",
    "dataset": "spec.dataset",
    "dataset_version": "spec.datasetVersion",
    "code_ref": "spec.codeRef",
    "min_workers": "spec.elastic.minWorkers",
    "max_workers": "spec.elastic.maxWorkers",
    "cluster": "spec.routing.clusters",
    "region": "spec.routing.regions",
    "prefer_cluster": "spec.routing.preferClusters",
    "prefer_region": "spec.routing.preferRegions",
    "max_price": "spec.routing.maxPricePerGpuHour",
    "spot": "spec.routing.spot",
    "comm_heavy": "spec.routing.commHeavy",
}
_FLAG_OF_PATH = {path: "--" + dest.replace("_", "-") for dest, path in _SUBMIT_FLAGS.items()}
# Flags whose text becomes a number before it goes into the spec: flag -> (type, its name).
_NUMERIC_FLAGS: dict[str, tuple[Callable[[str], float], str]] = {
    **dict.fromkeys(
        ("workers", "gpus_per_worker", "min_workers", "max_workers"), (int, "an integer")
    ),
    "max_price": (float, "a number"),
}
_INDEXED_PATH = re.compile(r"^(.+?)\[\d+\]$")


def flag_for(path: str, from_flags: dict[str, str]) -> str:
    """The flag that set ``path`` (or the list it indexes: ``spec.routing.clusters[1]`` was
    given by ``--cluster``), else ``path`` itself."""
    if path in from_flags:
        return from_flags[path]
    match = _INDEXED_PATH.match(path)
    if match and match.group(1) in from_flags:
        return from_flags[match.group(1)]
    return path


def _flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def build_submission(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str], bool]:
    """The API body from ``--file`` and/or flags (flags override the file, as with sbatch), a
    map spec path → flag for the values that came from flags, and whether the body is a job
    array's (the spec has an ``array`` section, or ``--count`` was given). Raises ``SpecError``.
    Flags set the template of an array, never one index."""
    if args.file:
        source = "<stdin>" if args.file == "-" else args.file
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
        except OSError as exc:
            raise UsageError(
                f"cannot read {args.file}: {exc.strerror}", {"--file": [exc.strerror or ""]}
            ) from None
        except UnicodeDecodeError as exc:
            why = f"not UTF-8 text (byte {exc.start} cannot be decoded)"
            raise UsageError(f"cannot read {source}: {why}", {"--file": [why]}) from None
        document = load_spec_text(text, source=source)
        if not isinstance(document, dict):
            raise SpecError({source: ["must be a mapping with apiVersion, kind, metadata, spec"]})
    else:
        document = {"apiVersion": "gpuplatform/v1", "kind": "TrainingJob"}
    from_flags: dict[str, str] = {}
    flag_errors: dict[str, list[str]] = {}
    failed_paths: set[str] = set()  # flags already reported; no second "is required" for them
    for dest, path in _SUBMIT_FLAGS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if dest in _NUMERIC_FLAGS:
            kind, noun = _NUMERIC_FLAGS[dest]
            try:
                value = kind(value)
            except ValueError:
                flag_errors[_flag_name(dest)] = [f"must be {noun}, not {value!r}"]
                failed_paths.add(path)
                continue
        spec = document.get("spec")
        if (
            path.startswith("spec.routing.")
            and isinstance(spec, dict)
            and spec.get("routing") is not None
            and not isinstance(spec["routing"], dict)
        ):
            flag_errors[_flag_name(dest)] = ["cannot be combined with a non-mapping spec.routing"]
            continue
        _set_path(document, path, value)
        from_flags[path] = _flag_name(dest)
    if args.env:
        env = document.setdefault("spec", {}).setdefault("env", {})
        if not isinstance(env, dict):
            flag_errors["--env"] = ["cannot be combined with a list-form spec.env"]
        else:
            for item in args.env:
                name, sep, value = item.partition("=")
                if not sep or not name:
                    flag_errors["--env"] = [f"must be NAME=VALUE, not {item!r}"]
                    continue
                env[name] = value
                from_flags[f"spec.env.{name}"] = "--env"
    if args.command_args:
        _set_path(document, "spec.command", list(args.command_args))
        from_flags["spec.command"] = "COMMAND"
    count = getattr(args, "count", None)
    if count is not None:
        try:
            value = int(count)
        except ValueError:
            flag_errors["--count"] = [f"must be an integer, not {count!r}"]
        else:
            if document.get("array") is not None and not isinstance(document["array"], dict):
                flag_errors["--count"] = ["cannot be combined with a non-mapping array section"]
            else:
                _set_path(document, "array.count", value)
                from_flags["array.count"] = "--count"
    array = is_array(document)
    try:
        body = validate_array_spec(document) if array else validate_spec(document)
    except SpecError as exc:
        named = from_flags
        if not args.file:
            # No file was written, so a field it lacks is a flag to add: name the flag, and
            # leave out "metadata: must be a mapping", which only repeats the missing --name.
            named = {**_FLAG_OF_PATH, **from_flags}
            exc.errors.pop("metadata", None)
        renamed: dict[str, list[str]] = {}
        for path, reasons in exc.errors.items():
            if path not in failed_paths:
                renamed.setdefault(flag_for(path, named), []).extend(reasons)
        raise SpecError({**flag_errors, **renamed}) from None
    if flag_errors:
        raise SpecError(flag_errors)
    return body, from_flags, array


def _set_path(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = document
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[leaf] = value
