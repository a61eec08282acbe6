"""What-if runs: record a replay, queue it, run it on a worker, cancel it, apply a candidate.

A run is a row (``WhatIfRun``) whose status moves queued -> running -> succeeded / failed /
cancelled only through conditional UPDATEs, so a duplicated task, a late cancel or a worker that
died cannot leave two endings or a run that holds its cluster for ever: at most one live run per
cluster (a named constraint), and a live run whose worker went silent is ended by the next start
or cancel. Progress is published to the platform admins' what-if group after each commit.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.bounds import finite_number
from core.errors import Conflict, FieldErrors, NotFound
from core.streams import WHATIF_GROUP, WhatIfProgressPayload, publish
from scheduler.models import Cluster
from tenants.audit import audit_record
from tenants.permissions import Caller

from .models import LIVE_WHATIF_STATUSES, PolicyVersion, WhatIfRun, WhatIfStatus
from .services import current_tables, policy_apply, policy_version_seed, require_admin
from .whatif import (
    MAX_WINDOW_DAYS,
    WINDOW_DAYS_RANGE,
    ReplayFailed,
    whatif_replay,
    whatif_size_problem,
    whatif_validate,
)

log = logging.getLogger(__name__)

RUN_WHATIF_TASK = "policyversions.tasks.run_whatif"

# A running replay whose worker has not been heard of for this long is taken for dead (the
# worker reports about 200 times per policy, so a live one is never this quiet).
WHATIF_STALE_AFTER_S = 600.0
# A queued run no worker has claimed for this long, while no other replay is running, was lost on
# the way (broker restarted, no worker running): without this it would hold its cluster's one
# replay slot for ever.
WHATIF_QUEUED_STALE_AFTER_S = 3600.0
# While no job of the replay finishes (no new percent to report), the worker still reads the
# cancel flag and renews its heartbeat this often: one UPDATE a second at most, and a cancel
# or a long quiet stretch is noticed within about a second of work.
WHATIF_CHECK_EVERY_S = 1.0


class WhatIfCancelled(Exception):
    """Raised inside the replay's progress hook when the run was asked to stop; the message
    says where the replay was."""


class WhatIfTooLong(Exception):
    """Raised inside the replay's progress hook when the replay has run past
    ``WHATIF_MAX_RUNTIME_SECONDS``; the message says where the replay was."""


def _whatif_payload(run: WhatIfRun) -> dict[str, Any]:
    payload: WhatIfProgressPayload = {
        "type": "whatif.progress",
        "run": run.pk,
        "status": run.status,
        "fraction": run.progress_fraction,
        "text": run.progress_text,
        "error": run.error,
        "time": timezone.now().isoformat(),
    }
    return dict(payload)


def _whatif_publish(run_id: int) -> None:
    run = WhatIfRun.objects.filter(pk=run_id).first()
    if run is not None:
        publish(WHATIF_GROUP, _whatif_payload(run))


def whatif_run_reap_stale(*, cluster: Cluster | None = None) -> None:
    """A running run of ``cluster`` (default: of every cluster) whose worker went silent, or a
    queued one no worker took (none while another run is replaying: it may be waiting for the
    worker), is marked failed, so it no longer holds the cluster's one replay slot or shows
    "running" for ever (a conditional UPDATE: a worker's claim or heartbeat
    meanwhile is never overwritten). Idempotent; the beat runs it every minute."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=WHATIF_STALE_AFTER_S)
    queued_cutoff = now - timedelta(seconds=WHATIF_QUEUED_STALE_AFTER_S)
    endings = (
        (
            WhatIfStatus.RUNNING,
            Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff),
            "the worker running the replay stopped answering; run it again",
        ),
        (
            WhatIfStatus.QUEUED,
            Q(created_at__lt=queued_cutoff),
            "no worker took the replay (is the Celery worker running?); run it again",
        ),
    )
    for status, silent, error in endings:
        if (
            status == WhatIfStatus.QUEUED
            and WhatIfRun.objects.filter(
                status=WhatIfStatus.RUNNING, heartbeat_at__gte=cutoff
            ).exists()
        ):
            # The what-if worker is busy (one process): a run may wait behind a replay as long
            # as WHATIF_MAX_RUNTIME_SECONDS, longer than a lost one is given.
            continue
        stale = list(
            (
                WhatIfRun.objects.filter(status=status)
                if cluster is None
                else WhatIfRun.objects.filter(cluster=cluster, status=status)
            )
            .filter(silent)
            .values_list("pk", flat=True)
        )
        for pk in stale:
            # Conditional on the status and the silence: a worker that claims the run or
            # reports progress meanwhile keeps it.
            if (
                WhatIfRun.objects.filter(pk=pk, status=status)
                .filter(silent)
                .update(status=WhatIfStatus.FAILED, error=error, finished_at=now)
            ):
                _whatif_publish(pk)


def _enqueue_whatif(run_id: int) -> None:
    """Hand the run to a Celery worker; in the embedded demo (no broker: Celery would run it
    eagerly, inside the request) to a thread of this process instead."""
    if settings.REDIS_URL:
        # By name: the task module imports this one.
        current_app.send_task(RUN_WHATIF_TASK, args=[run_id], retry=False)
        return

    def replay() -> None:
        try:
            whatif_run_execute(run_id=run_id)
        finally:
            connection.close()  # this thread's own connection, which nothing else closes

    threading.Thread(target=replay, name=f"whatif-{run_id}", daemon=True).start()


def _version_candidate(source: PolicyVersion) -> dict[str, Any]:
    """An earlier version as a candidate: its whole policy, as a rollback to it would put it in
    force (teams and classes deleted since are left out; those created since keep theirs)."""
    weights, classes = current_tables()
    return {
        "engine_config": source.engine_config,
        "team_weights": {k: v for k, v in source.team_weights.items() if k in weights},
        "priority_classes": {k: v for k, v in source.priority_classes.items() if k in classes},
    }


def whatif_run_start(
    *,
    user: Caller,
    candidates: Any = None,
    cluster: Any = None,
    window_days: Any = 30,
    until: datetime | None = None,
    candidate_versions: Any = None,
) -> WhatIfRun:
    """Record a what-if run of the last ``window_days`` days (up to ``until``, default now) of
    ``cluster`` (its name; default the only enabled cluster not retired) and queue it on Celery after commit.
    Platform admins only (anyone else NotFound). Bad input is FieldErrors naming the field
    (``cluster``, ``window_days``, also for a window of more than ``WHATIF_MAX_JOBS`` finished
    jobs, ``candidates.<name>.<field>``) and nothing is written; a
    second live run of the same cluster is a Conflict naming the one running."""
    admin = require_admin(user)
    errors: dict[str, list[str]] = {}
    target = None
    if cluster in (None, ""):
        # A retired cluster's history can still be replayed, by its name; it is not the default.
        enabled = list(
            Cluster.objects.filter(enabled=True, retiring_since__isnull=True).order_by("name")[:2]
        )
        if len(enabled) == 1:
            target = enabled[0]
        else:
            errors["cluster"] = ["name the cluster whose history to replay"]
    elif (
        not isinstance(cluster, str)
        or (target := Cluster.objects.filter(name=cluster).first()) is None
    ):
        errors["cluster"] = ["no such cluster"]
    days = None
    if not finite_number(window_days):
        errors["window_days"] = ["must be a number of days"]
    elif not 0 < window_days <= MAX_WINDOW_DAYS:
        errors["window_days"] = [WINDOW_DAYS_RANGE]
    else:
        days = float(window_days)
    versions = candidate_versions or {}
    if not isinstance(versions, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in versions.values()
    ):
        errors["candidate_versions"] = ["must be an object of candidate name to version number"]
        versions = {}
    if candidates is None:
        candidates = {}
    candidates = dict(candidates) if isinstance(candidates, dict) else candidates
    for name, number in versions.items():
        source = PolicyVersion.objects.filter(number=number).first()
        if isinstance(candidates, dict) and name in candidates:
            # Otherwise the edited configuration would run under the version's label.
            errors[f"candidate_versions.{name}"] = [
                "also given in candidates: name the edited candidate and the version differently"
            ]
        elif source is None:
            errors[f"candidate_versions.{name}"] = ["no such policy version"]
        elif isinstance(candidates, dict):
            candidates[name] = _version_candidate(source)
    end = until or timezone.now()
    if days is not None:
        try:
            candidates = whatif_validate(
                since=end - timedelta(days=days), until=end, candidates=candidates
            )
        except FieldErrors as exc:
            errors.update(exc.errors)
    if days is not None and target is not None and "window_days" not in errors:
        too_big = whatif_size_problem(cluster=target, since=end - timedelta(days=days), until=end)
        if too_big is not None:
            errors["window_days"] = [too_big]
    if errors:
        raise FieldErrors(errors)
    # Each of them None put its field in errors, raised above.
    assert target is not None and days is not None
    whatif_run_reap_stale(cluster=target)
    live = WhatIfRun.objects.filter(cluster=target, status__in=LIVE_WHATIF_STATUSES).first()
    busy = (
        f"a what-if replay of {target.name} is already {{}} (run {{}}, asked by {{}}); "
        "wait for it or cancel it: one replay per cluster at a time"
    )
    if live is not None:
        raise Conflict(busy.format(live.status, live.pk, live.created_by_name), field="cluster")
    in_force = policy_version_seed()
    try:
        with transaction.atomic():
            run = WhatIfRun.objects.create(
                cluster=target,
                created_at=timezone.now(),
                created_by=admin,
                created_by_name=admin.get_username(),
                since=end - timedelta(days=days),
                until=end,
                baseline_version=in_force.number,
                candidates=candidates,
                candidate_versions={k: v for k, v in versions.items() if k in candidates},
                progress_text="waiting for a worker",
            )
            audit_record(
                actor=admin,
                action="policy.whatif",
                target=run,
                before=None,
                after={"cluster": target.name, "days": days, "candidates": candidates},
                comment="",
            )
            transaction.on_commit(lambda: _enqueue_whatif(run.pk))
    except IntegrityError:
        live = WhatIfRun.objects.filter(cluster=target, status__in=LIVE_WHATIF_STATUSES).first()
        raise Conflict(
            busy.format("running", live.pk if live else "?", live.created_by_name if live else "?"),
            field="cluster",
        ) from None
    _whatif_publish(run.pk)
    return run


def whatif_run_cancel(*, user: Caller, run_id: int) -> WhatIfRun:
    """Stop a live run (platform admins only). A queued run is cancelled at once; a running one
    is flagged and its worker stops within about a second of replaying (it reads the flag at
    every percent of the replay and, between them, every ``WHATIF_CHECK_EVERY_S``) and marks it
    cancelled. A finished run is a Conflict."""
    admin = require_admin(user)
    run = WhatIfRun.objects.filter(pk=run_id).first()
    if run is None:
        raise NotFound("no such what-if run", field="run")
    now = timezone.now()
    # A worker that died never reads the flag: its run is ended here, or it would show
    # "stopping" for ever.
    cutoff = now - timedelta(seconds=WHATIF_STALE_AFTER_S)
    silent = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    if (
        WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.QUEUED).update(
            status=WhatIfStatus.CANCELLED,
            cancel_requested=True,
            finished_at=now,
            progress_text=f"cancelled by {admin.get_username()} before it started",
        )
        or WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.RUNNING)
        .filter(silent)
        .update(
            status=WhatIfStatus.CANCELLED,
            cancel_requested=True,
            finished_at=now,
            progress_text=f"cancelled by {admin.get_username()}; its worker had stopped answering",
        )
    ) or WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.RUNNING).update(
        cancel_requested=True, progress_text=f"stopping (cancelled by {admin.get_username()})"
    ):
        _whatif_publish(run_id)
    else:
        raise Conflict(f"the run has already {run.status}", field="run")
    run.refresh_from_db()
    return run


def whatif_run_execute(*, run_id: int) -> None:
    """Run a queued what-if run to its end (the Celery task's body). Claims the run with a
    conditional UPDATE (queued -> running), so a duplicated or late task does nothing; a
    missing or already claimed run is a clean exit. Progress is saved and published at every
    percent of the replay. The replay's hook is also called every few dozen simulator rounds
    and engine calls while no job finishes, so running past ``WHATIF_MAX_RUNTIME_SECONDS`` (the
    run fails saying so) stops it however long no job finishes, and so does a cancel request
    (read, with the heartbeat renewed, at every percent and at least every
    ``WHATIF_CHECK_EVERY_S`` of replaying). Every ending is recorded: succeeded with the
    results, cancelled, or failed with the reason."""
    now = timezone.now()
    claimed = WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.QUEUED).update(
        status=WhatIfStatus.RUNNING,
        started_at=now,
        heartbeat_at=now,
        progress_text="exporting the history",
    )
    if not claimed:
        return
    _whatif_publish(run_id)
    run = WhatIfRun.objects.select_related("cluster").filter(pk=run_id).first()
    if run is None:
        # Deleted with its cluster between the claim and this read.
        return
    last_percent = [-1]
    # -inf: the first call reads the flag, so a cancel asked for before the replay began stops
    # it at once.
    last_check = [-math.inf]
    max_runtime_s = float(settings.WHATIF_MAX_RUNTIME_SECONDS)
    deadline = time.monotonic() + max_runtime_s

    def watch(policy: str, index: int, policies: int, done: int, total: int) -> None:
        fraction = min(1.0, (index + (done / total if total else 1.0)) / policies)
        where = f"{fraction:.0%} ({policy}: {done:,} of {total:,} jobs finished)"
        clock = time.monotonic()
        # Before the once-a-percent filter: a replay stuck in one percent is stopped too.
        if clock > deadline:
            raise WhatIfTooLong(where)
        percent = int(fraction * 100)
        if percent == last_percent[0] and clock - last_check[0] < WHATIF_CHECK_EVERY_S:
            return
        moved = percent != last_percent[0]
        last_percent[0], last_check[0] = percent, clock
        text = f"replaying {policy} ({index + 1} of {policies}): {done:,} of {total:,} jobs"
        # Also the heartbeat: a replay where nothing finishes for ten minutes is alive, not
        # a dead worker for the reaper to fail.
        updated = WhatIfRun.objects.filter(
            pk=run_id, status=WhatIfStatus.RUNNING, cancel_requested=False
        ).update(progress_fraction=fraction, progress_text=text, heartbeat_at=timezone.now())
        if not updated:
            raise WhatIfCancelled(where)
        if moved:
            _whatif_publish(run_id)

    def exporting(jobs_read: int) -> None:
        # The export before the replay is bounded and cancellable as the replay is: a window of
        # many jobs on a slow database read for as long as it took, past the bound, unheard.
        where = f"exporting the history ({jobs_read:,} jobs read)"
        clock = time.monotonic()
        if clock > deadline:
            raise WhatIfTooLong(where)
        if clock - last_check[0] < WHATIF_CHECK_EVERY_S:
            return
        last_check[0] = clock
        try:
            updated = WhatIfRun.objects.filter(
                pk=run_id, status=WhatIfStatus.RUNNING, cancel_requested=False
            ).update(
                progress_text=f"exporting the history: {jobs_read:,} jobs read",
                heartbeat_at=timezone.now(),
            )
        except OperationalError:
            if connection.vendor != "sqlite":
                raise
            # SQLite (the embedded demo): this connection's export statement holds a read
            # transaction, and once the loop or a request has committed since it began, no write
            # can join it ("database is locked" at once; waiting cannot help). The check is
            # skipped: the deadline above still holds, and the replay's first check after the
            # export hears a cancel.
            return
        if not updated:
            raise WhatIfCancelled(where)

    def finish(*, unless_cancelled: bool = False, **fields: Any) -> bool:
        rows = WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.RUNNING)
        if unless_cancelled:
            rows = rows.filter(cancel_requested=False)
        done = bool(rows.update(finished_at=timezone.now(), **fields))
        if done:
            _whatif_publish(run_id)
        return done

    try:
        outcome = whatif_replay(
            cluster=run.cluster.name,
            since=run.since,
            until=run.until,
            candidates=run.candidates,
            watch=watch,
            exporting=exporting,
        )
    except WhatIfCancelled as exc:
        finish(
            status=WhatIfStatus.CANCELLED,
            progress_text=f"cancelled; the replay was stopped at {exc}",
        )
    except WhatIfTooLong as exc:
        finish(
            status=WhatIfStatus.FAILED,
            error=(
                f"the replay ran longer than WHATIF_MAX_RUNTIME_SECONDS ({max_runtime_s:g} s) and "
                f"was stopped at {exc}; choose a shorter window or fewer candidates"
            ),
            progress_text="failed",
        )
    except (FieldErrors, ReplayFailed) as exc:
        reason = (
            "; ".join(f"{k}: {', '.join(v)}" for k, v in exc.errors.items())
            if isinstance(exc, FieldErrors)
            else str(exc)
        )
        finish(status=WhatIfStatus.FAILED, error=reason, progress_text="failed")
    except Exception as exc:  # recorded for the admin, then logged with its traceback
        log.exception("what-if run %s failed", run_id)
        finish(
            status=WhatIfStatus.FAILED,
            error=f"the replay stopped on an internal error ({type(exc).__name__}: {exc})",
            progress_text="failed",
        )
    else:
        # A cancel asked for after the last progress report still wins: the admin said stop.
        if not finish(
            unless_cancelled=True,
            status=WhatIfStatus.SUCCEEDED,
            progress_fraction=1.0,
            progress_text="done",
            results=outcome["results"],
            details=outcome["details"],
        ):
            finish(status=WhatIfStatus.CANCELLED, progress_text="cancelled; the replay was stopped")


def whatif_candidate_apply(
    *, user: Caller, run_id: int, candidate: str, reason: Any
) -> PolicyVersion:
    """Put a candidate of a finished run in force as the next policy version: the policy it
    replayed (its engine configuration, and its team weights and priority classes merged into
    those in force, as ``policy_apply`` merges them)."""
    require_admin(user)
    run = WhatIfRun.objects.filter(pk=run_id).first()
    if run is None:
        raise NotFound("no such what-if run", field="run")
    if candidate not in run.candidates:
        raise FieldErrors({"candidate": [f"no candidate {candidate!r} in run {run_id}"]})
    if run.status != WhatIfStatus.SUCCEEDED:
        raise FieldErrors({"candidate": ["only a finished replay's candidate can be applied"]})
    policy_version_seed()
    with transaction.atomic():
        # Locked so no other change lands between this check and the new version.
        in_force = PolicyVersion.objects.select_for_update().order_by("-number").first()
        if in_force is not None and in_force.number != run.baseline_version:
            # The run measured the candidate against another policy; applying it now would
            # also undo the changes made since, which the replay never compared.
            raise Conflict(
                f"the replay compared against policy v{run.baseline_version}, but "
                f"v{in_force.number} is in force now; run the what-if again",
                field="candidate",
            )
        policy = run.candidates[candidate]
        version = policy_apply(
            user=user,
            reason=reason,
            engine_config=policy.get("engine_config"),
            team_weights=policy.get("team_weights") or None,
            priority_classes=policy.get("priority_classes") or None,
        )
        # The version's own audit entry says what changed; this one says on what evidence.
        audit_record(
            actor=user,
            action="policy.whatif.apply",
            target=run,
            before={"version": in_force.number if in_force else None},
            after={"candidate": candidate, "version": version.number},
            comment=version.reason,
        )
        return version
