"""The ``gpuctl`` command: argument parsing, the subcommands and their exit codes.

Exit codes (the contract scripts rely on):
  0  success
  1  the API refused or failed the request, or could not be reached (the message names the
     field the server objected to, e.g. ``spec.gpuModel: unknown GPU model 'tpu-v5'``)
  2  bad usage: unknown option, a job spec that fails local validation (nothing is sent to the
     server), or no login configured
  3  ``wait``: the jobs ended, and one of them failed or was cancelled
  124  ``wait --timeout``: time ran out with a job still live
  141  standard output was closed early (``gpuctl ls | head -1``); nothing is printed about it

Human-readable tables go to stdout by default; ``--json`` prints the API's objects instead.
Errors always go to stderr (as one JSON object with ``--json``). The API token is printed only by
``gpuctl login --show-token``, once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from . import __version__, config, fleet, output, reports, session, waiting
from . import policy as policy_commands
from . import whatif as whatif_commands
from .argparser import CommandParser
from .cancelling import cancel_arguments, cmd_cancel
from .client import ApiError, Client, UnsendableError
from .common import (
    LIVE_STATES,
    STATES,
    UsageError,
    counts_text,
    job_id_arg,
    job_states,
    jobs_listed,
    positive_number,
)
from .common import client as _client
from .common import err as _err
from .common import out as _out
from .common import report as _report
from .spec import SpecError, array_path_for, spec_path_for
from .submission import build_submission, flag_for, submit_arguments, wait_arguments

EXIT_OK, EXIT_API, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + 13  # killed by SIGPIPE, as the shell reports it
# A subcommand: parsed arguments in, exit code out.
Handler = Callable[[argparse.Namespace], int]


def _common(json_default: Any = argparse.SUPPRESS) -> CommandParser:
    # Shared by the top level and each subcommand, so `gpuctl --json ls` and `gpuctl ls --json`
    # both work; SUPPRESS on the subcommand copy keeps it from resetting the top-level value.
    parent = CommandParser(add_help=False)
    parent.add_argument(
        "--json", action="store_true", default=json_default, help="print JSON for scripts"
    )
    parent.add_argument(
        "--url",
        default=json_default if json_default is argparse.SUPPRESS else None,
        help="server URL (default: GPUCTL_URL, then the saved login)",
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar (also used to render ``--help``)."""
    parser = CommandParser(
        prog="gpuctl",
        description="Submit and manage GPU training jobs on a gpuplatform server.",
        parents=[_common(json_default=False)],
        epilog="Exit codes: 0 ok, 1 API error, 2 bad usage; wait: 3 a job did not succeed, 124 "
        "timed out. Docs: docs/jobspec.md",
    )
    parser.add_argument("--version", action="version", version=f"gpuctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    common = _common()

    def add(
        name: str, handler: Handler, help_text: str, aliases: Sequence[str] = ()
    ) -> argparse.ArgumentParser:
        cmd = sub.add_parser(
            name, parents=[common], help=help_text, description=help_text, aliases=list(aliases)
        )
        cmd.set_defaults(handler=handler)
        return cmd

    login = add("login", session.cmd_login, "get an API token and save it for later commands")
    login.add_argument("--username", "-u", help="your user name (prompted when omitted)")
    login.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    login.add_argument(
        "--token-name", default="gpuctl", help="label for the token (default gpuctl)"
    )
    login.add_argument(
        "--token-stdin",
        action="store_true",
        help="read an API token created in the portal (Teams → API tokens) from standard input "
        "instead of a password: how single sign-on users log in",
    )
    login.add_argument(
        "--show-token", action="store_true", help="also print the new token, once (for CI)"
    )
    add("logout", session.cmd_logout, "forget the saved server URL and token")

    submit = add(
        "submit", cmd_submit, "submit a job (or a job array, if the spec has one) from YAML/flags"
    )
    submit_arguments(submit)
    wait_arguments(submit)
    estimate = add(
        "estimate",
        cmd_estimate,
        "when a job would start and finish if submitted now, and whether it makes its deadline",
    )
    submit_arguments(estimate)

    ls = add("ls", cmd_ls, "list jobs, newest first")
    ls.add_argument(
        "--state",
        "-s",
        help="comma-separated states in any case, e.g. pending,running; Slurm's PD, R, CD "
        "(succeeded), F, CA also work",
    )
    ls.add_argument("--live", action="store_true", help="only pending, running and preempted jobs")
    ls.add_argument("--team", help="only this team's jobs")
    ls.add_argument("--user", help="only jobs submitted by this user")
    ls.add_argument("--mine", action="store_true", help="only my jobs")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")

    show = add(
        "show",
        cmd_show,
        "a job's details, where it runs and why there, and its event timeline",
        aliases=["get"],
    )
    show.add_argument("job_id", metavar="JOB_ID")
    why = add("why", cmd_why, "why a job is pending and when it should start")
    why.add_argument("job_id", metavar="JOB_ID")
    wait = add(
        "wait",
        waiting.cmd_wait,
        "wait until jobs end; exit 0 if all succeeded, 3 if one failed or was cancelled",
    )
    waiting.register(wait)
    cancel_arguments(
        add(
            "cancel",
            cmd_cancel,
            "cancel jobs by id, or every live job matching filters (as scancel -u me -t PD)",
        )
    )
    logs = add("logs", cmd_logs, "a job's output: its tail, or (-f) followed to the end")
    logs.add_argument("job_id", metavar="JOB_ID")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new output until the job ends (through requeues: attempt after "
        "attempt, unless --attempt is given)",
    )
    logs.add_argument("--attempt", help="which attempt (default: the latest)")
    logs.add_argument(
        "--interval", default="1", help="seconds between reads when following (default 1)"
    )

    record = add(
        "record", cmd_record, "an attempt's reproducibility record (JSON): what exactly ran"
    )
    record.add_argument("job_id", metavar="JOB_ID")
    record.add_argument("--attempt", help="which attempt (default: the latest)")
    resubmit = add(
        "resubmit", cmd_resubmit, "submit a new job that runs exactly what an attempt ran"
    )
    resubmit.add_argument("job_id", metavar="JOB_ID")
    resubmit.add_argument("--attempt", help="which attempt (default: the latest)")

    quota = add("quota", reports.cmd_quota, "GPU quotas of your teams")
    quota.add_argument("--team", help="only this team")
    quota.add_argument("--gpu-model", help="only this GPU model")

    cost = add(
        "cost", reports.cmd_cost, "what your teams spent, from the monthly billing statements"
    )
    cost.add_argument("--team", help="only this team (its statement rolls up its sub-teams)")
    cost.add_argument("--month", help="YYYY-MM (default: the newest month with a statement)")
    cost.add_argument(
        "--lines", action="store_true", help="also list usage by team and GPU model, and egress"
    )

    array = add("array", cmd_array_help, "job arrays (sweeps): submit, list, get, cancel")
    array_sub = array.add_subparsers(
        dest="array_command", metavar="ACTION", parser_class=CommandParser
    )

    def add_array(
        name: str, handler: Handler, help_text: str, aliases: Sequence[str] = ()
    ) -> argparse.ArgumentParser:
        cmd = array_sub.add_parser(
            name, parents=[common], help=help_text, description=help_text, aliases=list(aliases)
        )
        cmd.set_defaults(handler=handler)
        return cmd

    array_submit = add_array(
        "submit", cmd_array_submit, "submit a job array: the spec's array section, or --count"
    )
    submit_arguments(array_submit)
    wait_arguments(array_submit)
    array_submit.add_argument(
        "--count", help="number of indices (array.count; like sbatch --array=0-(N-1))"
    )
    array_list = add_array("list", cmd_array_list, "job arrays, newest first", aliases=["ls"])
    array_list.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    array_get = add_array(
        "get", cmd_array_get, "an array's template and count per state", aliases=["show"]
    )
    array_get.add_argument("array_id", metavar="ARRAY_ID")
    array_get.add_argument("--jobs", action="store_true", help="also list the array's jobs")
    array_cancel = add_array("cancel", cmd_array_cancel, "cancel every live job of an array")
    array_cancel.add_argument("array_id", metavar="ARRAY_ID")

    # Actions of a command with subcommands (policy, whatif, nodes, clusters): each takes the
    # common options and runs its handler.
    def add_under(
        subparsers: argparse._SubParsersAction[CommandParser],
    ) -> Callable[[str, Handler, str], argparse.ArgumentParser]:
        def add_action(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
            cmd: argparse.ArgumentParser = subparsers.add_parser(
                name, parents=[common], help=help_text, description=help_text
            )
            cmd.set_defaults(handler=handler)
            return cmd

        return add_action

    policy = add(
        "policy", policy_commands.cmd_help, "the scheduling policy history (platform admins)"
    )
    policy_sub = policy.add_subparsers(
        dest="policy_command", metavar="ACTION", parser_class=CommandParser
    )

    policy_commands.register(add_under(policy_sub))

    whatif = add(
        "whatif",
        whatif_commands.cmd_help,
        "replay the cluster's history under candidate policies (platform admins)",
    )
    whatif_sub = whatif.add_subparsers(
        dest="whatif_command", metavar="ACTION", parser_class=CommandParser
    )

    whatif_commands.register(add_under(whatif_sub))

    nodes = add("nodes", reports.cmd_nodes, "cluster nodes, their state and health")
    nodes.add_argument(
        "--state", help="comma-separated states: ready, draining, quarantined, down, retired"
    )
    nodes.add_argument("--rack", help="only this rack")
    nodes.add_argument("--gpu-model", help="only this GPU model")
    nodes.add_argument("--cluster", help="only this cluster")
    nodes_sub = nodes.add_subparsers(
        dest="nodes_command", metavar="ACTION", parser_class=CommandParser
    )

    fleet.register_nodes(add_under(nodes_sub))
    clusters = add(
        "clusters",
        fleet.cmd_clusters,
        "clusters and whether they are in service; retire or reinstate one (platform admins)",
    )
    clusters_sub = clusters.add_subparsers(
        dest="clusters_command", metavar="ACTION", parser_class=CommandParser
    )
    fleet.register_clusters(add_under(clusters_sub))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one gpuctl command; returns the exit code (the console script exits with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    json_mode = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
    try:
        args = parser.parse_args(argv)
        json_mode = args.json
        if not getattr(args, "handler", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        code = args.handler(args) or EXIT_OK
        # Flushed here, not at exit, so a reader that went away is handled below.
        sys.stdout.flush()
        return code
    except UsageError as exc:
        _report(json_mode, "usage", exc.message, exc.fields)
        return EXIT_USAGE
    except SpecError as exc:
        _report(json_mode, "usage", "invalid job spec", exc.errors)
        return EXIT_USAGE
    except config.ConfigError as exc:
        _report(json_mode, "usage", str(exc), {})
        return EXIT_USAGE
    except UnsendableError as exc:
        _report(json_mode, "usage", str(exc), {exc.field: [exc.message]})
        return EXIT_USAGE
    except ApiError as exc:
        _report(json_mode, "api", exc.message, exc.fields, status=exc.status)
        # A 400 is bad input named by the server: the same exit as bad input named here.
        return EXIT_USAGE if exc.status == 400 else EXIT_API
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gpuctl ls | head -1`): stop quietly, as Unix tools do, with the
        # status a SIGPIPE death would give. What is still buffered for stdout goes to devnull,
        # or the interpreter's flush at exit would fail on the closed pipe again.
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no real file (captured in a test): nothing to flush
        pass


# --- helpers ---------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _gpus(job: dict[str, Any]) -> str:
    return f"{job.get('workers')}x{job.get('gpus_per_worker')}"


def _placement(job: dict[str, Any]) -> str:
    """``n1[0-7],n2[0-3,6]``: nodes with their GPU indices, runs compressed as in Slurm."""
    placement = job.get("placement") or {}
    return ",".join(f"{node}[{_ranges(gpus)}]" for node, gpus in sorted(placement.items()))


def _ranges(indices: list[int]) -> str:
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# --- commands --------------------------------------------------------------------------------


# Flag → spec path; errors on a value that came from a flag name the flag.
def _pick_team(api: Client) -> str:
    teams = api.get_all("/api/v1/teams/")
    usable = [str(t["slug"]) for t in teams if t.get("role") not in ("viewer",)]
    if len(usable) == 1:
        return usable[0]
    if not usable:
        reason = "is required: you are not a member who may submit to any team"
    else:
        reason = f"is required: you belong to several teams ({', '.join(usable)})"
    raise UsageError(
        "no team given", {"metadata.team (or --team)": [reason + "; set metadata.team or --team"]}
    )


def cmd_submit(args: argparse.Namespace) -> int:
    """Validate locally (exit 2 on a bad spec, nothing sent), then POST /api/v1/jobs/, or
    /api/v1/job-arrays/ when the spec has an ``array`` section."""
    body, from_flags, array = build_submission(args)
    return _send_submission(args, body, from_flags, array=array)


def _send_submission(
    args: argparse.Namespace, body: dict[str, Any], from_flags: dict[str, str], *, array: bool
) -> int:
    if args.dry_run:
        if args.json:
            output.print_json(body, _out())
        else:
            output.key_values(sorted(body.items()), _out())
            _out().write("(dry run: nothing was submitted)\n")
        return EXIT_OK
    path_for = array_path_for if array else spec_path_for
    # Checked before anything is sent: a typo must not leave a job behind unwaited.
    interval_s = waiting.wait_interval(args.wait_interval, "--wait-interval")
    with _client(args) as api:
        if "team" not in body:
            body = {"team": _pick_team(api), **body}
        created = _post_naming_fields(
            api,
            "/api/v1/job-arrays/" if array else "/api/v1/jobs/",
            body,
            from_flags,
            path_for,
        )
    if args.json:
        if not args.wait:  # with --wait, one document: the end
            output.print_json(created, _out())
    elif array:
        _out().write(
            f"array {created['id']} submitted ({created['name']}, team {created['team']}): "
            f"{created['size']} job{'s' if created['size'] != 1 else ''} "
            f"{counts_text(created.get('counts') or {})}\n"
        )
    else:
        why = f" — {created['why']}" if created.get("why") else ""
        _out().write(
            f"job {created['id']} submitted ({created['name']}, team {created['team']}): "
            f"{created['state']}{why}\n"
        )
    if not args.wait:
        return EXIT_OK
    _out().flush()
    if array:
        return waiting.wait_for_array(args, created, interval_s)
    return waiting.wait_for_jobs(args, [created["id"]], interval_s, None)


def _post_naming_fields(
    api: Client,
    url: str,
    body: dict[str, Any],
    from_flags: dict[str, str],
    path_for: Callable[[str], str],
) -> Any:
    """POST ``body``; a 400 names the user's own fields (spec path or flag), not the wire's."""
    try:
        return api.post(url, body)
    except ApiError as exc:
        named: dict[str, list[str]] = {}
        for wire, reasons in exc.fields.items():
            named.setdefault(flag_for(path_for(wire), from_flags), []).extend(reasons)
        exc.fields = named
        if exc.fields:
            first_path, first_reasons = next(iter(exc.fields.items()))
            exc.message = f"{first_path}: {first_reasons[0]}"
        raise


def cmd_estimate(args: argparse.Namespace) -> int:
    """When the job of this spec and flags would start and finish if submitted now, and whether
    it would make its deadline (POST /api/v1/jobs/estimate/); nothing is submitted."""
    body, from_flags, array = build_submission(args)
    if array:
        raise UsageError("estimate takes one job: this spec has an array section")
    with _client(args) as api:
        if "team" not in body:
            body = {"team": _pick_team(api), **body}
        estimate = _post_naming_fields(
            api, "/api/v1/jobs/estimate/", body, from_flags, spec_path_for
        )
    if args.json:
        output.print_json(estimate, _out())
        return EXIT_OK
    out = _out()
    runs = f"runs about {estimate['runtime_s']:.0f} s by {estimate['runtime_source']}"
    if estimate["finish"]:
        starts = "now" if estimate["starts_now"] else f"about {estimate['start']}"
        out.write(
            f"likely done by {estimate['finish']} at current load (starts {starts}, {runs})\n"
        )
    else:
        out.write(f"no finish estimate at current load: no start time for it yet ({runs})\n")
    if estimate["meets_deadline"] is True:
        out.write(f"that is before its deadline, {estimate['deadline']}\n")
    elif estimate["meets_deadline"] is False:
        out.write(
            f"that is after its deadline, {estimate['deadline']}: it will likely miss it unless "
            "the load drops\n"
        )
    out.write("(nothing was submitted)\n")
    return EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    """GET /api/v1/jobs/ with filters; a squeue-like table or the JSON list."""
    if args.limit < 1:
        raise UsageError("--limit must be >= 1", {"--limit": ["must be >= 1"]})
    state = ",".join(job_states(args.state)) if args.state else None
    state = state or (",".join(LIVE_STATES) if args.live else None)
    with _client(args) as api:
        # The token's user, not the name saved at login: GPUCTL_TOKEN overrides the saved
        # token (CI has no file at all), and another user's name filters on their jobs.
        submitter = api.get("/api/v1/auth/me")["username"] if args.mine else args.user
        jobs, count = jobs_listed(
            api, state=state, team=args.team, submitter=submitter, limit=args.limit
        )
    if args.json:
        output.print_json(jobs, _out())
        if count > len(jobs):
            # On stderr, so the JSON stays the plain list scripts parse; a script cancelling
            # "all my pending jobs" learns it did not get them all.
            _err().write(
                f"note: {len(jobs)} of {count} jobs listed; use --limit or filters for the rest\n"
            )
        return EXIT_OK
    now = _now()
    rows = [
        [
            job["id"],
            job["name"],
            job["team"],
            job.get("submitter"),
            job["state"],
            _gpus(job),
            job.get("gpu_model") or "any",
            job.get("priority_class"),
            output.age(job.get("submitted_at"), now),
            (job.get("why") if job["state"] == "pending" else _placement(job)),
        ]
        for job in jobs
    ]
    headers = ["ID", "NAME", "TEAM", "USER", "STATE", "GPUS", "MODEL", "PRIORITY", "AGE"]
    output.table([*headers, "NODES/REASON"], rows, _out(), max_width=50)
    if count > len(jobs):
        _out().write(f"({len(jobs)} of {count} shown; use --limit or filters)\n")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """GET the job and its events; details then a timeline (JSON: the job plus ``events``)."""
    job_id = job_id_arg(args.job_id)
    with _client(args) as api:
        job = api.get(f"/api/v1/jobs/{job_id}/")
        events = api.get(f"/api/v1/jobs/{job_id}/events/") or []
    if args.json:
        output.print_json({**job, "events": events}, _out())
        return EXIT_OK
    now = _now()
    route = latest_route(events)
    elastic = job.get("elastic")
    pairs = [
        ("ID", job["id"]),
        ("Name", job["name"]),
        ("Team", job["team"]),
        ("Submitter", job.get("submitter")),
        ("State", job["state"]),
        ("Image", job.get("image")),
        ("Command", job.get("command")),
        ("Workers", job.get("workers")),
        ("GPUs per worker", job.get("gpus_per_worker")),
        ("Total GPUs", job.get("total_gpus")),
        ("GPU model", job.get("gpu_model") or "any"),
        ("Priority class", job.get("priority_class")),
        ("Preemptible", job.get("preemptible")),
        ("Checkpoint every", _seconds(job.get("checkpoint_interval_s"))),
        ("Runtime limit", _seconds(job.get("runtime_limit_s"))),
        ("Deadline", output.when(job.get("deadline"), now) if job.get("deadline") else None),
        ("Dataset", job.get("dataset")),
        ("Elastic", f"{elastic['min_workers']}..{elastic['max_workers']}" if elastic else None),
        ("Submitted", output.when(job.get("submitted_at"), now)),
        ("Started", output.when(job.get("started_at"), now)),
        ("Finished", output.when(job.get("finished_at"), now)),
        ("Attempts", job.get("attempts")),
        ("Last checkpoint", output.when(job.get("last_checkpoint_at"), now)),
        ("Routing", routing_text(job.get("routing"))),
        ("Cluster", _cluster_text(job, route)),
        ("Placement", _placement(job)),
        ("Exit code", job.get("exit_code")),
    ]
    if job["state"] == "pending":
        pairs += [
            ("Why pending", job.get("why")),
            ("Estimated start", output.when(job.get("estimated_start"), now)),
        ]
    output.key_values(pairs, _out())
    if route is not None:
        _write_route(route, _out())
    if events:
        _out().write("\nEvents:\n")
        output.table(
            ["TIME", "KIND", "MESSAGE"],
            [[output.when(e.get("time"), now), e.get("kind"), e.get("message")] for e in events],
            _out(),
            max_width=80,
        )
    return EXIT_OK


def routing_text(routing: dict[str, Any] | None) -> str | None:
    """``clusters=a,b regions=eu-west max_price_per_gpu_h=3.0 spot=no``: the constraints the job
    set (its defaults left out), or None for a job without routing."""
    if not routing:
        return None
    parts = []
    for key in ("clusters", "regions", "prefer_clusters", "prefer_regions"):
        if routing.get(key):
            parts.append(f"{key}={','.join(routing[key])}")
    if routing.get("max_price_per_gpu_h") is not None:
        parts.append(f"max_price_per_gpu_h={routing['max_price_per_gpu_h']}")
    for key in ("spot", "comm_heavy"):
        if routing.get(key) is not None:
            parts.append(f"{key}={'yes' if routing[key] else 'no'}")
    return " ".join(parts) or None


def latest_route(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest ``routed`` event (where the job's latest start went, and why there)."""
    routes = [e for e in events if e.get("kind") == "routed"]
    return routes[-1] if routes else None


def _cluster_text(job: dict[str, Any], route: dict[str, Any] | None) -> str | None:
    region = ((route or {}).get("data") or {}).get("region")
    if not job.get("cluster"):
        return None
    return f"{job['cluster']} ({region})" if region else job["cluster"]


def _write_route(route: dict[str, Any], out: TextIO) -> None:
    """The latest start's route: the pool, its expected cost and the alternatives weighed."""
    data = route.get("data") or {}
    out.write(f"\nWhere and why: {route.get('message')}\n")
    rows = [
        [
            data.get("pool"),
            _money(data.get("expected_cost")),
            _money(data.get("egress_cost")),
            "chosen",
        ]
    ]
    for alt in data.get("alternatives") or []:
        rows.append(
            [alt.get("pool"), _money(alt.get("expected_cost")), None, alt.get("excluded") or "-"]
        )
    output.table(["POOL", "EXPECTED COST", "DATA MOVEMENT", "NOTE"], rows, out, max_width=80)


def _money(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def _seconds(value: int | None) -> str | None:
    return None if value is None else f"{output.human_duration(value)} ({value}s)"


def cmd_why(args: argparse.Namespace) -> int:
    """Why a job is (not) running: the scheduler's reason and its estimated start."""
    job_id = job_id_arg(args.job_id)
    with _client(args) as api:
        job = api.get(f"/api/v1/jobs/{job_id}/")
    summary = {k: job.get(k) for k in ("id", "name", "state", "why", "estimated_start")}
    if args.json:
        output.print_json(summary, _out())
        return EXIT_OK
    now = _now()
    out = _out()
    head = f"job {job['id']} ({job['name']})"
    state = job["state"]
    if state == "pending":
        out.write(f"{head} is pending: {job.get('why') or 'no reason recorded yet'}\n")
        if job.get("estimated_start"):
            out.write(f"estimated start: {output.when(job['estimated_start'], now)}\n")
        else:
            out.write("estimated start: unknown (no reservation yet)\n")
    elif state == "running":
        out.write(f"{head} is running since {output.when(job.get('started_at'), now)}\n")
        if job.get("cluster"):
            out.write(f"cluster: {job['cluster']}\n")
        if job.get("placement"):
            out.write(f"on: {_placement(job)}\n")
    elif state == "preempted":
        reason = f": {job['why']}" if job.get("why") else ""
        out.write(f"{head} is being preempted{reason}; it will be requeued\n")
    else:
        code = f", exit code {job['exit_code']}" if job.get("exit_code") is not None else ""
        finished = output.when(job.get("finished_at"), now)
        out.write(f"{head} is not waiting: it {state} at {finished}{code}\n")
    return EXIT_OK


def cmd_record(args: argparse.Namespace) -> int:
    """Print an attempt's reproducibility record as JSON (it is a JSON document either way)."""
    job_id = job_id_arg(args.job_id)
    attempt = positive_number(args.attempt, "--attempt")
    with _client(args) as api:
        if attempt is None:
            records = (api.get(f"/api/v1/jobs/{job_id}/records/") or {}).get("records") or []
            if not records:
                raise ApiError(404, f"job {job_id} has no record yet (it has not started)")
            record = records[-1]
        else:
            record = api.get(f"/api/v1/jobs/{job_id}/records/{attempt}/")
    output.print_json(record, _out())
    return EXIT_OK


def cmd_resubmit(args: argparse.Namespace) -> int:
    """POST resubmit: a new job running exactly what the attempt ran; prints its id."""
    job_id = job_id_arg(args.job_id)
    attempt = positive_number(args.attempt, "--attempt")
    with _client(args) as api:
        job = api.post(f"/api/v1/jobs/{job_id}/resubmit/", {"attempt": attempt})
    if args.json:
        output.print_json(job, _out())
    else:
        _out().write(f"job {job['id']} submitted (exactly as job {job_id} ran)\n")
        for note in job.get("notes") or ():
            _out().write(f"note: {note}\n")
    return EXIT_OK


# Following logs reads at least once an hour; a longer pause is a typo (time.sleep overflows on
# 1e300 long before that would matter).
_MAX_LOG_INTERVAL = 3600


def cmd_logs(args: argparse.Namespace) -> int:
    """Print a job's output. With ``-f`` keep reading by cursor until the job is over: when an
    attempt ends and the job is requeued, wait for the next attempt and go on with it (with
    ``--attempt``, stop at the end of that attempt). A pending job is waited for."""
    job_id = job_id_arg(args.job_id)
    attempt = positive_number(args.attempt, "--attempt")
    interval = float(
        positive_number(
            args.interval, "--interval", number=float, minimum=0.05, maximum=_MAX_LOG_INTERVAL
        )
    )
    out = _out()
    path = f"/api/v1/jobs/{job_id}/logs/"
    with _client(args) as api:
        chunk: dict[str, Any] = api.get(path, {"attempt": attempt})
        _print_log(args, out, chunk)
        # After the first read, a server restart or an overloaded proxy is waited out.
        follow = waiting.PatientReads(api, f"job {job_id}", interval)
        while args.follow:
            shown = chunk["attempt"]
            if shown is not None and not (chunk["finished"] and not chunk["text"]):
                # The attempt may still write: read what follows the cursor.
                if not chunk["text"]:
                    time.sleep(interval)
                chunk = follow.get(path, {"attempt": shown, "cursor": chunk["cursor"]})
                _print_log(args, out, chunk)
                continue
            # This attempt is over (or the job has not started): the next one, or the end.
            if attempt is not None or chunk["state"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(interval)
            job = follow.get(f"/api/v1/jobs/{job_id}/")
            if job["attempts"] > (shown or 0):
                chunk = follow.get(path, {"attempt": (shown or 0) + 1})
                if shown is not None and not args.json:
                    out.write(f"--- attempt {chunk['attempt']} ---\n")
                _print_log(args, out, chunk)
            else:
                chunk = {**chunk, "state": job["state"]}
    return EXIT_OK


def _print_log(args: argparse.Namespace, out: TextIO, chunk: dict[str, Any]) -> None:
    if args.json and args.follow:
        # A stream of documents: JSON Lines, so a reader splits it by line; a read that found
        # nothing new (most of them, while a job is quiet) is no news.
        if chunk.get("text") or chunk.get("finished"):
            out.write(output.json_line(chunk) + "\n")
    elif args.json:
        output.print_json(chunk, out)
    elif chunk.get("text"):
        out.write(chunk["text"])
    out.flush()


# --- job arrays --------------------------------------------------------------------------------


def cmd_array_help(args: argparse.Namespace) -> int:
    """``gpuctl array`` without an action: the actions, on stderr (exit 2)."""
    raise UsageError(
        "gpuctl array needs an action: submit, list, get or cancel",
        {"ACTION": ["one of submit, list, get, cancel"]},
    )


def cmd_array_submit(args: argparse.Namespace) -> int:
    """Like ``submit``, but the spec must describe an array (an ``array`` section or --count)."""
    body, from_flags, array = build_submission(args)
    if not array:
        raise UsageError(
            "not a job array: add an array section to the spec or give --count",
            {"array": ["is required (array.count, array.env or array.items), or give --count"]},
        )
    return _send_submission(args, body, from_flags, array=True)


def _array_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(
            f"array id must be a number >= 1, not {text!r}",
            {"ARRAY_ID": [f"must be a number >= 1, not {text!r}"]},
        )
    return value


def cmd_array_list(args: argparse.Namespace) -> int:
    """GET /api/v1/job-arrays/: arrays of the caller's teams with their count per state."""
    if args.limit < 1:
        raise UsageError("--limit must be >= 1", {"--limit": ["must be >= 1"]})
    with _client(args) as api:
        data = api.get("/api/v1/job-arrays/", {"limit": args.limit})
    arrays = data["results"] if isinstance(data, dict) and "results" in data else data
    if args.json:
        output.print_json(arrays, _out())
        return EXIT_OK
    now = _now()
    rows = [
        [
            a["id"],
            a["name"],
            a["team"],
            a.get("submitter"),
            a["size"],
            *[(a.get("counts") or {}).get(state, 0) for state in STATES],
            output.age(a.get("submitted_at"), now),
        ]
        for a in arrays
    ]
    headers = ["ID", "NAME", "TEAM", "USER", "SIZE", "PENDING", "RUNNING", "PREEMPTED"]
    headers += ["SUCCEEDED", "FAILED", "CANCELLED", "AGE"]
    output.table(headers, rows, _out())
    if isinstance(data, dict) and data.get("count", 0) > len(arrays):
        _out().write(f"({len(arrays)} of {data['count']} shown; use --limit)\n")
    return EXIT_OK


def cmd_array_get(args: argparse.Namespace) -> int:
    """GET /api/v1/job-arrays/ID/ (and its jobs with ``--jobs``): template and counts."""
    array_id = _array_id(args.array_id)
    with _client(args) as api:
        array = api.get(f"/api/v1/job-arrays/{array_id}/")
        jobs = (
            api.get_all(f"/api/v1/job-arrays/{array_id}/jobs/", {"limit": 500})
            if args.jobs
            else None
        )
    if args.json:
        output.print_json(array if jobs is None else {**array, "jobs": jobs}, _out())
        return EXIT_OK
    now = _now()
    counts = array.get("counts") or {}
    pairs = [
        ("ID", array["id"]),
        ("Name", array["name"]),
        ("Team", array["team"]),
        ("Submitter", array.get("submitter")),
        ("Size", array["size"]),
        ("Submitted", output.when(array.get("submitted_at"), now)),
        ("Cancelled", output.when(array.get("cancelled_at"), now)),
        *[(state.capitalize(), counts.get(state, 0)) for state in STATES],
        *[(f"Template {k}", v) for k, v in sorted((array.get("template") or {}).items())],
    ]
    output.key_values(pairs, _out())
    if jobs:
        _out().write("\nJobs:\n")
        output.table(
            ["INDEX", "ID", "NAME", "STATE", "GPUS", "NODES/REASON"],
            [
                [
                    # Members come by index, and every index of the array exists.
                    job.get("array_index", index),
                    job["id"],
                    job["name"],
                    job["state"],
                    _gpus(job),
                    job.get("why") if job["state"] == "pending" else _placement(job),
                ]
                for index, job in enumerate(jobs)
            ],
            _out(),
            max_width=50,
        )
    return EXIT_OK


def cmd_array_cancel(args: argparse.Namespace) -> int:
    """POST /api/v1/job-arrays/ID/cancel/: every live job of the array, at once."""
    array_id = _array_id(args.array_id)
    with _client(args) as api:
        array = api.post(f"/api/v1/job-arrays/{array_id}/cancel/")
    if args.json:
        output.print_json(array, _out())
    else:
        _out().write(
            f"array {array_id} cancelled ({array['name']}): "
            f"{counts_text(array.get('counts') or {})}\n"
        )
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
