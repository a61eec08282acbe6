"""Write the platform's finished job history as a `gpuplatform-trace` file (JSON Lines, format in
docs/simulation.md), so an admin can replay the cluster's own past under a changed policy with
``python -m scheduler.simulation``."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Generator
from datetime import datetime
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from scheduler.models import Allocation, Cluster, Job, Node
from scheduler.simulation.history import FORMAT, VERSION
from scheduler.snapshot import policy_config_data
from scheduler.states import FINAL_STATES
from tenants.models import PriorityClass, Quota, Team

# Job lines wait here until the skipped counts for the header (the first line) are known; past
# this size they go to disk, so memory stays flat however long the history is.
SPOOL_MAX_BYTES = 8 * 1024 * 1024
# A caller's ``progress`` hook (the what-if's time bound and cancel) is called after every this
# many jobs read: a few milliseconds of work, as the replay's hook every TICK_EVERY simulator
# rounds, so a bound or a cancel stops a long export as promptly as it stops the replay.
PROGRESS_EVERY_ROWS = 500

JOB_FIELDS = (
    "id",
    "state",
    "submitted_at",
    "started_at",
    "finished_at",
    "earlier_runs_s",
    "lost_gpu_seconds",
    "workers",
    "gpus_per_worker",
    "team__slug",
    "gpu_model__name",
    "priority_class__name",
    "preemptible",
    "checkpoint_interval_s",
    "runtime_limit_s",
    "submitter__username",
    "name",
    "image",
)


def _bad(option: str, reason: str) -> CommandError:
    return CommandError(f"{option}: {reason}", returncode=2)


def _parse_time(option: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        # Python 3.11 reads a bare date as its midnight, and a trailing Z as UTC.
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise _bad(option, f"{value!r} is not an ISO 8601 date or datetime ({exc})") from None
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, timezone.get_default_timezone())
    return parsed


def _jsonable(value: Any) -> Any:
    # Config overrides are written as Python (tuples for thresholds); JSON knows only lists.
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def service_seconds(row: dict[str, Any]) -> float | None:
    """What the job needed exclusively, from a values() row; None when it cannot be known."""
    # (the row's fields, as Job declares them)
    started: datetime | None = row["started_at"]
    finished: datetime | None = row["finished_at"]
    if started is None or finished is None:
        return None
    last_run = (finished - started).total_seconds()
    release: datetime | None = row["last_release"]
    if release is not None and release < finished:
        # Finalised while queued to resume (a requeued job cancelled): its GPUs went back at the
        # requeue, started_at is that attempt's, and earlier_runs_s already holds its run.
        last_run = 0.0
    gpus: int = row["workers"] * row["gpus_per_worker"]
    # Each restart resets started_at and each requeue adds its run (lost work included) to
    # earlier_runs_s, so attained + last run are all runs; lost_gpu_seconds counts GPU-seconds.
    earlier_s: float = row["earlier_runs_s"]
    lost_gpu_s: float = row["lost_gpu_seconds"]
    return earlier_s + last_run - lost_gpu_s / gpus


def job_line(row: dict[str, Any], *, origin: datetime, duration_s: float) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        # Rounded to the database's microseconds, so float noise never reaches the file.
        "submit_s": round((row["submitted_at"] - origin).total_seconds(), 6),
        "duration_s": duration_s,
        "workers": row["workers"],
        "gpus_per_worker": row["gpus_per_worker"],
        "team": row["team__slug"],
        "gpu_model": row["gpu_model__name"],
        "priority_class": row["priority_class__name"],
        "preemptible": row["preemptible"],
        "checkpoint_interval_s": row["checkpoint_interval_s"],
        "runtime_limit_s": row["runtime_limit_s"],
        # what the run-time model learns from in a replay, as the live loop's does
        "user": row["submitter__username"] or "",
        "name": row["name"] or "",
        "image": row["image"] or "",
    }


def _teams() -> list[dict[str, Any]]:
    quotas: dict[str, dict[str, list[int]]] = {}
    for team, model, guaranteed, borrow in Quota.objects.order_by(
        "team__slug", "gpu_model__name"
    ).values_list("team__slug", "gpu_model__name", "guaranteed_gpus", "borrow_limit_gpus"):
        quotas.setdefault(team, {})[model] = [guaranteed, borrow]
    return [
        {"name": slug, "parent": parent, "weight": weight, "quota": quotas.get(slug, {})}
        for slug, parent, weight in Team.objects.order_by("slug").values_list(
            "slug", "parent__slug", "fair_share_weight"
        )
    ]


def _nodes(cluster: Cluster | None) -> list[dict[str, Any]]:
    rows = Node.objects.all() if cluster is None else Node.objects.filter(cluster=cluster)
    nodes: list[dict[str, Any]] = [
        {
            "name": row["name"],
            "gpu_model": row["gpu_model__name"],
            "gpus": row["gpu_count"],
            "zone": row["zone"],
            "rack": row["rack"],
            "nvlink_domain": row["nvlink_domain"],
            "fabric": row["fabric"],
            "spot": row["spot"],
        }
        for row in rows.order_by("cluster__name", "name").values(
            "name",
            "gpu_model__name",
            "gpu_count",
            "zone",
            "rack",
            "nvlink_domain",
            "fabric",
            "spot",
        )
    ]
    repeated = sorted(name for name, n in Counter(n["name"] for n in nodes).items() if n > 1)
    if repeated:
        # Names are unique per cluster only, and the replay identifies nodes by name alone.
        raise _bad(
            "--cluster",
            f"node names {', '.join(repeated)} occur in several clusters; export one cluster",
        )
    return nodes


class Command(BaseCommand):
    help = (
        "Export finished jobs, nodes, teams and the policy configuration as a gpuplatform-trace "
        "file for the trace simulator (docs/simulation.md)."
    )
    # call_command only: ``progress(jobs_read)`` is called every PROGRESS_EVERY_ROWS jobs read
    # and may raise to stop the export (the file at --out is then left as it was).
    stealth_options = ("progress",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="file to write, - for stdout")
        parser.add_argument(
            "--since", help="jobs submitted at or after this ISO 8601 date or datetime"
        )
        parser.add_argument("--until", help="jobs submitted before this ISO 8601 date or datetime")
        parser.add_argument(
            "--cluster", help="only jobs that ran on this cluster, and only its nodes"
        )

    def handle(
        self,
        *args: Any,
        out: str,
        since: str | None,
        until: str | None,
        cluster: str | None,
        progress: Callable[[int], object] | None = None,
        **options: Any,
    ) -> None:
        since_at = _parse_time("--since", since)
        until_at = _parse_time("--until", until)
        if since_at is not None and until_at is not None and since_at >= until_at:
            raise _bad("--since", f"{since!r} is not before --until {until!r}")
        cluster_row = None
        if cluster is not None:
            cluster_row = Cluster.objects.filter(name=cluster).first()
            if cluster_row is None:
                known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none"
                raise _bad("--cluster", f"no cluster named {cluster!r} (known: {known})")
        if out != "-" and os.path.isdir(out):
            raise _bad("--out", f"{out} is a directory")

        jobs = Job.objects.all()
        if since_at is not None:
            jobs = jobs.filter(submitted_at__gte=since_at)
        if until_at is not None:
            jobs = jobs.filter(submitted_at__lt=until_at)
        if cluster_row is not None:
            jobs = jobs.filter(cluster=cluster_row)

        exported_at = timezone.now()
        if out == "-":
            # ending="": OutputWrapper would end every chunk of the copy with a newline.
            counts = self._export(
                jobs,
                cluster_row,
                exported_at,
                lambda text: self.stdout.write(text, ending=""),
                spool_dir=None,
                target="-",
                progress=progress,
            )
            where = "stdout"
        else:
            counts = self._export_atomically(jobs, cluster_row, exported_at, out, progress)
            where = out
        self.stderr.write(
            f"exported {counts['exported']} jobs (skipped: {counts['never_ran']} never ran, "
            f"{counts['unfinished']} unfinished) to {where}"
        )

    def _export_atomically(
        self,
        jobs: QuerySet[Job],
        cluster_row: Cluster | None,
        exported_at: datetime,
        out: str,
        progress: Callable[[int], object] | None,
    ) -> dict[str, int]:
        directory = os.path.dirname(os.path.abspath(out))
        try:
            fd, temp = tempfile.mkstemp(
                dir=directory, prefix=f".{os.path.basename(out)}.", suffix=".tmp"
            )
        except OSError as exc:
            raise _bad("--out", f"cannot write {out}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                counts = self._export(
                    jobs,
                    cluster_row,
                    exported_at,
                    handle.write,
                    spool_dir=directory,
                    target=out,
                    progress=progress,
                )
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, out)
        except BaseException:
            # A failed export leaves whatever was at PATH before, never half a file.
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        return counts

    def _export(
        self,
        jobs: QuerySet[Job],
        cluster_row: Cluster | None,
        exported_at: datetime,
        write: Callable[[str], object],
        *,
        spool_dir: str | None,
        target: str,
        progress: Callable[[int], object] | None = None,
    ) -> dict[str, int]:
        header: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "exported_at": exported_at.isoformat(),
            "origin": None,
            "priority_classes": dict(
                PriorityClass.objects.order_by("-value", "name").values_list("name", "value")
            ),
            "teams": _teams(),
            "nodes": _nodes(cluster_row),
            # The configuration in force (the policy history's, else SCHEDULER_POLICY).
            "config": _jsonable(policy_config_data()),
            "skipped": {"never_ran": 0, "unfinished": 0},
        }
        try:
            _dumps(header["config"])
        except (TypeError, ValueError) as exc:
            raise CommandError(f"SCHEDULER_POLICY: not JSON-serialisable ({exc})") from None

        last_release = Subquery(
            Allocation.objects.filter(
                job=OuterRef("pk"), attempt=OuterRef("attempts"), ended_at__isnull=False
            )
            .order_by("-ended_at")
            .values("ended_at")[:1]
        )
        # One statement for every job in scope, finished or not, so the counts and the lines
        # come from the same moment even while the loop keeps moving jobs.
        rows = (
            jobs.order_by("submitted_at", "id")
            .values(*JOB_FIELDS, last_release=last_release)
            .iterator(chunk_size=2000)
        )
        exported = 0
        skipped = header["skipped"]
        origin: datetime | None = None
        # Closed however the export ends (a progress hook may raise: a cancel, a deadline), so
        # its statement is finished before the caller writes again: on SQLite an open statement
        # holds a read transaction that a write cannot upgrade once another connection committed.
        statement = contextlib.closing(cast(Generator[dict[str, Any], None, None], rows))
        with (
            statement,
            tempfile.SpooledTemporaryFile(
                SPOOL_MAX_BYTES, mode="w+", encoding="utf-8", dir=spool_dir
            ) as spool,
        ):
            group: list[dict[str, Any]] = []
            group_at: datetime | None = None
            for read, row in enumerate(rows, 1):
                if progress is not None and read % PROGRESS_EVERY_ROWS == 0:
                    progress(read)
                if row["state"] not in FINAL_STATES:
                    skipped["unfinished"] += 1
                    continue
                duration = service_seconds(row)
                if duration is not None:
                    duration = round(duration, 6)
                if duration is None or duration <= 0:
                    skipped["never_ran"] += 1
                    continue
                if origin is None:
                    origin = row["submitted_at"]
                if row["submitted_at"] != group_at:
                    _write_group(spool, group)
                    group, group_at = [], row["submitted_at"]
                group.append(job_line(row, origin=origin, duration_s=duration))
                exported += 1
            _write_group(spool, group)
            header["origin"] = origin.isoformat() if origin is not None else None
            spool.seek(0)
            try:
                write(_dumps(header) + "\n")
                while chunk := spool.read(1 << 16):
                    write(chunk)
            except OSError as exc:
                raise _bad("--out", f"cannot write {target}: {exc.strerror or exc}") from None
        return {"exported": exported, **skipped}


def _write_group(spool: IO[str], group: list[dict[str, Any]]) -> None:
    # Jobs submitted in the same microsecond (an array's members) go in the format's
    # (submit_s, id) order, where id is a string as the loaders compare it: "10" before "9".
    for line in sorted(group, key=lambda j: j["id"]):
        spool.write(_dumps(line) + "\n")
