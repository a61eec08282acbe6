"""Command line: `python -m scheduler.simulation replay|compare ...`.

This module (and `traces`/`cluster`, which read files) is where I/O and the wall clock live; the
simulator core gets the clock injected. Exit status: 0 on success, 2 on bad arguments or input
(a message on stderr, no traceback).

    replay  --trace PATH --policy NAME --out result.json [--html report.html] ...
    compare --trace PATH --policies fifo,sjf,... [--out results.json] [--html report.html] ...

`--engine-config NAME=JSON` (repeatable) names a variant of `gpuplatform`: the engine with those
`Config` fields changed, usable as a policy name; a trace of the platform's own history
(`manage.py export_trace`) brings its cluster, teams, priority classes and engine configuration.
`--team-weights NAME=JSON` and `--priority-classes NAME=JSON` give a variant (the same NAME, or a
new one) other fair-share weights for the history's teams and other values for its priority
classes: a whole candidate policy, replayed on the same jobs and nodes.

`--trace synthetic:N` generates a seeded synthetic trace of N jobs instead of reading a file.
`--fidelity` reproduces the published reference simulator's model (fifo and sjf only): exclusive
run times, no checkpoints, overheads, failures or spot interruptions, best-fit placement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from .cluster import (
    MAX_NODES,
    ClusterSpec,
    parse_cluster,
    sample_nodes,
    uniform_cluster,
)
from .history import History, PolicyChangeError, load_history, with_policy
from .metrics import compute_metrics
from .runner import POLICIES, VARIANT_FIELDS, VARIANTS, make_policy
from .simulator import Policy, SimConfig, SimulationError, Simulator
from .trace_job import MAX_NODE_GPUS, MAX_TRACE_JOBS
from .traces import (
    FORMATS,
    TraceJob,
    detect_format,
    generate_synthetic,
    load_trace,
    scale_arrivals,
)

FIDELITY_POLICIES = ("fifo", "sjf")
TABLE_KEYS = (
    ("avg_jct_s", "avg JCT s", "{:.0f}"),
    ("p99_jct_s", "p99 JCT s", "{:.0f}"),
    ("avg_queue_s", "avg queue s", "{:.0f}"),
    ("p95_queue_s", "p95 queue s", "{:.0f}"),
    ("max_queue_s", "max queue s", "{:.0f}"),
    ("gpu_utilization", "util", "{:.3f}"),
    ("gpu_utilization_window", "util(win)", "{:.3f}"),
    ("idle_while_pending_frac", "idle-pend", "{:.4f}"),
    ("preemptions", "preempt", "{}"),
    ("lost_gpu_hours", "lost GPU-h", "{:.0f}"),
    ("jain_fairness", "jain", "{:.4f}"),
    ("wall_s", "wall s", "{:.1f}"),
    ("decide_calls", "calls", "{}"),
    ("decide_p50_ms", "p50 ms", "{:.3f}"),
)


class Watch(Protocol):
    """Called as replays progress: which policy, its simulator, jobs done of total, sim time."""

    def __call__(self, policy: str, sim: Simulator, done: int, total: int, now: float) -> None: ...


class Progress:
    """A plain progress bar on stderr (redrawn in place on a terminal, every 10 % otherwise)."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._last_decile = -1

    def __call__(self, done: int, total: int, now: float) -> None:
        if not self.enabled or total == 0:
            return
        frac = done / total
        if not self.tty:
            decile = int(frac * 10)
            if decile == self._last_decile:
                return
            self._last_decile = decile
        bar = "#" * int(frac * 30)
        line = f"{self.label} [{bar:<30}] {frac:4.0%} {done}/{total} jobs  t={now / 3600:.0f} h"
        sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
        if self.tty and done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _finite(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{value!r}: must be a finite number")
    return number


def interval_seconds(value: str) -> float | None:
    """An interval in seconds > 0, or none/off/0 for never (checkpoints, failures, spot)."""
    if value.lower() in ("none", "off", "0"):
        return None
    seconds = _finite(value)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r}: must be > 0 seconds, or none")
    return seconds


def fraction(value: str) -> float:
    """A share from 0 to 1 (spot nodes; in the suite, production jobs and guarantees)."""
    share = _finite(value)
    if not 0 <= share <= 1:
        raise argparse.ArgumentTypeError(f"{value!r}: must be a fraction from 0 to 1")
    return share


def _seconds(value: str) -> float:
    """A duration in seconds >= 0 (restart overhead, repair time)."""
    seconds = _finite(value)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: must be >= 0 seconds")
    return seconds


def _positive(value: str) -> float:
    number = _finite(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r}: must be > 0")
    return number


def count(value: str) -> int:
    """A whole number >= 1 (nodes, GPUs per node, jobs, every Nth node)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: must be >= 1")
    return number


def _at_most(limit: int) -> Any:
    """``count`` no larger than ``limit``: a size the replay allocates for."""

    def bounded(value: str) -> int:
        number = count(value)
        if number > limit:
            raise argparse.ArgumentTypeError(f"{value!r}: must be <= {limit}")
        return number

    return bounded


# A node fails (or a spot node is interrupted) at most this often on average. Real GPU nodes
# fail every few months and spot capacity is reclaimed every few hours; below a minute the
# replay does nothing but fail and repair nodes (--mtbf 0.001 never finished).
MIN_EVENT_INTERVAL_S = 60.0
# The longest repair: a node out for more than a year is gone, and --repair 1e300 left the
# replay waiting for repairs forever.
MAX_REPAIR_S = 366 * 24 * 3600.0


def event_interval(value: str) -> float | None:
    """``interval_seconds`` for --mtbf and --spot-mtbi: at least MIN_EVENT_INTERVAL_S."""
    seconds = interval_seconds(value)
    if seconds is not None and seconds < MIN_EVENT_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"{value!r}: must be >= {MIN_EVENT_INTERVAL_S:g} seconds, or none"
        )
    return seconds


def repair_seconds(value: str) -> float:
    """``--repair``: seconds from 0 to MAX_REPAIR_S."""
    seconds = _seconds(value)
    if seconds > MAX_REPAIR_S:
        raise argparse.ArgumentTypeError(f"{value!r}: must be <= {MAX_REPAIR_S:g} seconds")
    return seconds


def request_seconds(value: str) -> float | None:
    """``--checkpoint-on-request``'s argparse type: seconds >= 0, or none/off."""
    if value.lower() in ("none", "off"):
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of seconds or 'none'"
        ) from None
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"{value!r}: must be >= 0 seconds")
    return seconds


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, help="trace CSV path, or synthetic:N")
    p.add_argument("--format", choices=FORMATS, help="trace format (default: from the header)")
    p.add_argument("--cluster", help="NxG[:model], openb[:PATH] or a node-list CSV")
    p.add_argument("--nodes", type=_at_most(MAX_NODES), help="uniform cluster: number of nodes")
    p.add_argument("--gpus-per-node", type=_at_most(MAX_NODE_GPUS), default=8)
    p.add_argument("--max-jobs", type=count, help="replay only the first N jobs")
    p.add_argument("--max-submit", type=_finite, help="replay jobs submitted at or before T s")
    p.add_argument(
        "--arrival-scale", type=_positive, default=1.0, help="multiply inter-arrival times (stress)"
    )
    p.add_argument("--seed", type=int, default=0, help="tenants, failures, spot, synthetic")
    p.add_argument("--fidelity", action="store_true", help="reference model (fifo, sjf only)")
    p.add_argument("--checkpoint-interval", type=interval_seconds, default=1800.0)
    p.add_argument("--restart-overhead", type=_seconds, default=60.0)
    p.add_argument(
        "--checkpoint-on-request",
        type=request_seconds,
        default=None,
        metavar="S|none",
        help="jobs save a checkpoint S s after a preemption asks (default none: periodic only)",
    )
    p.add_argument("--mtbf", type=event_interval, default=None, help="per-node MTBF s")
    p.add_argument("--repair", type=repair_seconds, default=4 * 3600.0, help="node repair time s")
    p.add_argument("--node-sample", type=count, default=1, help="keep every Nth node")
    p.add_argument("--spot-fraction", type=fraction, default=0.0)
    p.add_argument("--spot-mtbi", type=event_interval, default=None, help="per spot node s")
    p.add_argument("--html", help="write an offline HTML report here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--engine-config",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a gpuplatform variant NAME: these engine Config fields changed (JSON or @file)",
    )
    p.add_argument(
        "--team-weights",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a gpuplatform variant NAME: these teams' fair-share weights changed, "
        '{"team": weight} (JSON or @file; a gpuplatform-trace\'s teams)',
    )
    p.add_argument(
        "--priority-classes",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a gpuplatform variant NAME: these priority classes' values changed, "
        '{"class": value} (JSON or @file; a gpuplatform-trace\'s classes)',
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of both subcommands."""
    parser = argparse.ArgumentParser(prog="python -m scheduler.simulation", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    replay = sub.add_parser("replay", help="replay a trace under one policy")
    _add_common(replay)
    replay.add_argument("--policy", required=True, help=", ".join(POLICIES + VARIANTS))
    replay.add_argument("--out", required=True, help="metrics JSON file")
    compare = sub.add_parser("compare", help="replay one trace under several policies")
    _add_common(compare)
    compare.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    compare.add_argument("--out", help="JSON file with every policy's metrics")
    return parser


def _load(
    args: argparse.Namespace,
) -> tuple[tuple[TraceJob, ...], ClusterSpec, str, History | None]:
    history = None
    if args.trace.startswith("synthetic:"):
        size = args.trace.split(":", 1)[1]
        if not size.isdigit() or not 1 <= int(size) <= MAX_TRACE_JOBS:
            raise ValueError(
                f"--trace {args.trace!r}: synthetic:N needs N from 1 to {MAX_TRACE_JOBS}"
            )
        trace = generate_synthetic(int(size), seed=args.seed)
        fmt = "synthetic"
        if args.max_jobs:
            trace = trace[: args.max_jobs]
    else:
        fmt = args.format or detect_format(args.trace)
        if fmt == "gpuplatform":
            history = load_history(args.trace, max_jobs=args.max_jobs, max_submit=args.max_submit)
            trace = history.jobs
        else:
            trace = load_trace(
                args.trace,
                fmt=fmt,
                max_jobs=args.max_jobs,
                max_submit=args.max_submit,
                seed=args.seed,
            )
    if args.arrival_scale != 1.0:
        trace = scale_arrivals(trace, args.arrival_scale)
    if args.cluster:
        cluster = parse_cluster(args.cluster)
    elif args.nodes:
        cluster = uniform_cluster(args.nodes, args.gpus_per_node)
    elif fmt == "openb":
        cluster = parse_cluster("openb")
    elif history is not None:
        cluster = history.cluster
    else:
        cluster = uniform_cluster(128, args.gpus_per_node)
    if args.node_sample != 1:
        cluster = sample_nodes(cluster, args.node_sample)
    if args.spot_fraction:
        cluster = cluster.with_spot_fraction(args.spot_fraction, seed=args.seed)
    return trace, cluster, fmt, history


def _named_objects(specs: list[str], option: str, what: str) -> dict[str, dict[str, Any]]:
    """`NAME=JSON` (or `NAME=@file.json`) options as name -> JSON object; ValueError for a
    malformed one (the object's contents are checked where they are used)."""
    named: dict[str, dict[str, Any]] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{option} {spec!r}: expected NAME=JSON")
        if name in POLICIES + VARIANTS or name in named:
            raise ValueError(f"{option} {name}: the name is taken; choose another")
        if text.startswith("@"):
            text = Path(text[1:]).read_text()
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{option} {name}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise ValueError(f"{option} {name}: not JSON (nested too deeply)") from None
        if not isinstance(fields, dict):
            raise ValueError(f"{option} {name}: expected a JSON object of {what}")
        named[name] = fields
    return named


def _engine_variants(specs: list[str]) -> dict[str, dict[str, Any]]:
    """`--engine-config` options as name -> Config fields (checked when the policy is built)."""
    return _named_objects(specs, "--engine-config", "Config fields")


# The options that change a variant's tables, and the `with_policy` argument each fills.
TABLE_OPTIONS = (
    ("--team-weights", "team_weights", "team weights"),
    ("--priority-classes", "priority_classes", "priority class values"),
)


def _table_variants(args: argparse.Namespace) -> dict[str, dict[str, dict[str, Any]]]:
    """`--team-weights` / `--priority-classes` options as name -> {with_policy argument: the
    JSON object}."""
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    for option, key, what in TABLE_OPTIONS:
        specs = getattr(args, key)
        for name, fields in _named_objects(specs, option, what).items():
            tables.setdefault(name, {})[key] = fields
    return tables


def _policy(
    name: str,
    variants: dict[str, dict[str, Any]],
    history: History | None,
    tables: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> Policy:
    """The policy object for `name`: a baseline or labelled variant by name, or the engine
    (`gpuplatform` or a variant) configured as the history's platform was, plus the variant's
    changes: `variants` its engine Config fields, `tables` its team weights and priority class
    values (which need a history: only its header names the teams)."""
    changes = (tables or {}).get(name, {})
    if (
        name not in variants
        and not changes
        and (history is None or not name.startswith("gpuplatform"))
    ):
        return make_policy(name)
    from scheduler.policy import Config, SnapshotError, config_deprecations, config_from_dict

    from .gpuplatform_policy import GpuPlatformPolicy

    base = Config()
    if history is not None:
        try:
            base = config_from_dict(history.config, path="config")
        except SnapshotError as exc:
            raise ValueError(f"{history.cluster.name}: header {exc}") from None
        _deprecated(config_deprecations(history.config, f"{history.cluster.name}: header config"))
    for option, key, _ in TABLE_OPTIONS:
        if key not in changes:
            continue
        if history is None:
            raise ValueError(
                f"{option} {name}: needs a gpuplatform-trace (manage.py export_trace), whose "
                "header names the teams and priority classes"
            )
        try:
            history = with_policy(history, **{key: changes[key]})
        except PolicyChangeError as exc:
            raise ValueError(f"{option} {name}: {exc}") from None
    config = config_from_dict(VARIANT_FIELDS.get(name, {}), base=base, path=name)
    try:
        config = config_from_dict(variants.get(name, {}), base=config, path=name)
    except SnapshotError as exc:
        raise ValueError(f"--engine-config {exc}") from None
    _deprecated(config_deprecations(variants.get(name, {}), f"--engine-config {name}"))
    return GpuPlatformPolicy(
        config,
        name=name,
        priority_classes=history.priority_classes if history else None,
        teams=history.teams if history else None,
    )


_WARNED: set[str] = set()


def _deprecated(messages: list[str]) -> None:
    """Today's flat engine keys still work for one release; say so once per message on stderr
    (a DeprecationWarning alone is not shown to a command's user)."""
    for message in messages:
        if message not in _WARNED:
            _WARNED.add(message)
            sys.stderr.write(f"warning: {message}\n")


def _config(args: argparse.Namespace) -> SimConfig:
    if args.fidelity:
        return SimConfig(
            seed=args.seed, checkpoint_interval_s=None, restart_overhead_s=0.0, preemptible=False
        )
    return SimConfig(
        seed=args.seed,
        checkpoint_interval_s=args.checkpoint_interval,
        restart_overhead_s=args.restart_overhead,
        checkpoint_on_request_s=args.checkpoint_on_request,
        mtbf_s=args.mtbf,
        repair_s=args.repair,
        spot_mtbi_s=args.spot_mtbi,
    )


def _run_one(
    args: argparse.Namespace,
    trace: Sequence[TraceJob],
    cluster: ClusterSpec,
    name: str,
    policy: Policy,
    watch: Watch | None = None,
    tick: Watch | None = None,
) -> tuple[dict[str, Any], Any]:
    bar = Progress(f"{name:>13}", enabled=not args.quiet)
    sim: Simulator | None = None

    def progress(done: int, total: int, now: float) -> None:
        bar(done, total, now)
        if watch is not None and sim is not None:
            watch(name, sim, done, total, now)

    def ticked(done: int, total: int, now: float) -> None:
        if tick is not None and sim is not None:
            tick(name, sim, done, total, now)

    sim = Simulator(
        trace,
        cluster,
        policy,
        _config(args),
        timer=time.perf_counter,
        progress=progress,
        tick=None if tick is None else ticked,
    )
    sim.run()
    metrics = compute_metrics(sim)
    metrics["params"] = {
        "trace": args.trace,
        "format": args.format,
        "max_jobs": args.max_jobs,
        "max_submit": args.max_submit,
        "arrival_scale": args.arrival_scale,
        "seed": args.seed,
        "fidelity": args.fidelity,
        "config": {k: getattr(sim.config, k) for k in sim.config.__dataclass_fields__},
        # the half-life the usage was decayed with: the engine's own for gpuplatform variants
        "fair_share_half_life_s": sim.fair_share_half_life_s,
    }
    return metrics, sim


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """A plain-text table of the headline metrics, one row per policy."""
    headers = ["policy"] + [h for _, h, _ in TABLE_KEYS]
    rows = [
        [name] + [fmt.format(m.get(key, float("nan"))) for key, _, fmt in TABLE_KEYS]
        for name, m in results.items()
    ]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [headers, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _prepare(args: argparse.Namespace) -> tuple[Any, ClusterSpec, History | None, dict[str, Any]]:
    """(trace, cluster, history, policy name -> policy object) of parsed arguments; ValueError
    (or OSError, KeyError, SimulationError) for bad input."""
    variants = _engine_variants(args.engine_config)
    tables = _table_variants(args)
    named = tuple(dict.fromkeys([*variants, *tables]))
    trace, cluster, _, history = _load(args)
    policies = [args.policy] if args.command == "replay" else args.policies.split(",")
    objects = {}
    for p in policies:
        if p not in POLICIES + VARIANTS and p not in named:
            names = ", ".join(POLICIES + VARIANTS + named)
            raise ValueError(f"unknown policy {p!r}; expected one of {names}")
        if args.fidelity and p not in FIDELITY_POLICIES:
            raise ValueError(f"--fidelity models only {FIDELITY_POLICIES}, not {p!r}")
        objects[p] = _policy(p, variants, history, tables)
    return trace, cluster, history, objects


def replay_policies(
    argv: list[str], *, watch: Watch | None = None, tick: Watch | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, Simulator], History | None]:
    """What ``compare`` computes for the command line ``argv`` (the same parsing, policies and
    replays, so the same metrics), for a caller in the same process: (policy -> metrics, policy
    -> finished simulator, the loaded history or None). ``watch(policy, sim, done, total, now)``
    is called where the progress bar is drawn (every 0.5 % of the jobs finished), ``tick`` (same
    arguments) every few dozen rounds of events and policy calls whether or not a job finished
    (``Simulator.run``); an exception either raises stops the replay and propagates. Bad input
    raises ValueError, OSError, KeyError or SimulationError (the command's exit status 2)."""
    args = build_parser().parse_args(argv)
    trace, cluster, history, objects = _prepare(args)
    results: dict[str, dict[str, Any]] = {}
    sims: dict[str, Simulator] = {}
    for p, policy in objects.items():
        results[p], sims[p] = _run_one(args, trace, cluster, p, policy, watch, tick)
    return results, sims, history


def _check_output(option: str, path: str) -> None:
    """ValueError unless ``path`` can be written: checked before the replay, which may take
    hours, rather than after it."""
    if not path:
        raise ValueError(f"{option}: the path is empty")
    if os.path.isdir(path):
        raise ValueError(f"{option} {path}: is a directory")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise ValueError(f"{option} {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{option} {path}: directory {parent} is not writable")


def _write_all(texts: dict[str, str]) -> None:
    """Write every ``path: text``, or none: each goes to a temporary file beside its path and
    the files are renamed into place only when all were written."""
    staged: list[tuple[str, str]] = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, text in texts.items():
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".sim-")
            staged.append((tmp, path))
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the report from others
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        for option, path in (("--out", args.out), ("--html", args.html)):
            if path is not None:
                _check_output(option, path)
        if args.out is not None and args.out == args.html:
            raise ValueError(f"--out and --html name the same file {args.out}")
        trace, cluster, _, objects = _prepare(args)
        if not args.quiet:
            sys.stderr.write(
                f"{len(trace)} jobs on {cluster.name} ({len(cluster.nodes)} nodes, "
                f"{cluster.total_gpus} GPUs)\n"
            )
        results: dict[str, dict[str, Any]] = {}
        runs = []
        for p, policy in objects.items():
            metrics, sim = _run_one(args, trace, cluster, p, policy)
            results[p] = metrics
            if args.html:
                from .report import series_of

                runs.append(series_of(sim, metrics))
    except (OSError, ValueError, KeyError, SimulationError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    texts: dict[str, str] = {}
    if args.command == "replay":
        texts[args.out] = json.dumps(results[args.policy], indent=2) + "\n"
    else:
        print(format_table(results))
        if args.out:
            texts[args.out] = json.dumps({"results": results}, indent=2) + "\n"
    if args.html:
        from .report import render_html

        texts[args.html] = render_html(runs, f"{args.trace} on {cluster.name}")
    try:
        _write_all(texts)
    except OSError as exc:
        # the checks above passed, so only something that changed during the replay
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0
