"""The demo's past: weeks of finished jobs on the demo cluster, written in bulk.

A new user's first look at the portal should show a cluster that has been working for a while: a
cost dashboard with a month of spend by day and GPU model, a utilization history, preemptions and
node failures with the work they lost, a quarantine, budget alerts, an audit log. ``seed_history``
invents that past with a seeded random generator (the same shapes on every run, placed relative to
``now``) and writes it with ``bulk_create``, so seeding stays a matter of seconds.

The history is placed by a small list scheduler (each GPU is free from a known instant; a job takes
the GPUs that free up first), so no GPU is ever held twice at once and the utilization chart never
exceeds the cluster. Every job ends before ``now``: the live demo workload starts on an idle
cluster and goes on from there. Usage rows are priced here from the demo price book and the
billing rollups are rebuilt by billing's own ``usage_rollup_rebuild``; every allocation's meter is
written finalized so the live meter never re-reads the past.

The past is back-dated, which ``tenants.audit.audit_record`` cannot do (it stamps the present):
the few audit entries are written here, through the same ``redact``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeAlias

from django.contrib.auth.models import User
from django.core.management.color import no_style
from django.db import connection, models
from django.db.models import ForeignObjectRel, Max

from billing.models import (
    AllocationMeter,
    Budget,
    BudgetAlert,
    Capacity,
    LostKind,
    LostWork,
    PriceRate,
    UsageDaily,
    UsageJobMonth,
    UsageRecord,
)
from catalogue.models import GpuModel
from scheduler.models import Allocation, Cluster, Job, JobEvent, Node, NodeEvent, NodeState
from tenants.audit import redact
from tenants.models import AuditEntry, Membership, PriorityClass, Team

# Shapes of demo jobs: (workers, GPUs per worker, weight). Gangs take whole 8-GPU nodes.
_SHAPES = ((1, 1, 30), (1, 2, 14), (1, 4, 14), (1, 8, 12), (2, 8, 6), (4, 8, 3))
_DURATIONS_H = ((0.5, 20), (1, 20), (2, 20), (4, 16), (8, 12), (16, 7), (30, 3))
_CHECKPOINT_S = 1800

# One GPU held by one attempt: (id, job, node, GPU index, worker, attempt, start, end).
_Held: TypeAlias = tuple[int, Job, Node, int, int, int, datetime, datetime]
# A job event's columns: (job id, time, kind, message, data).
_EventRow: TypeAlias = tuple[int, datetime, str, str, dict[str, Any]]


@dataclass
class HistoryCounts:
    jobs: int = 0
    allocations: int = 0
    usage_rows: int = 0
    preemptions: int = 0
    node_failures: int = 0
    budget_alerts: int = 0
    months: set[date] = field(default_factory=set)


@dataclass
class _Attempt:
    nodes: list[Node]
    gpus: list[list[int]]  # per node, the GPU indexes held
    start: datetime
    end: datetime
    ending: str  # "succeeded", "failed", "cancelled", "preempted", "node_failed"


def _weighted(rng: random.Random, table: Sequence[tuple[Any, ...]]) -> Any:
    """A row of ``table`` without its weight (its one value when it has one), chosen by weight."""
    return rng.choices([t[:-1] if len(t) > 2 else t[0] for t in table], [t[-1] for t in table])[0]


class _Placer:
    """Per GPU, the instant it is next free; a job takes the GPUs that free up first."""

    def __init__(self, nodes: list[Node], start: datetime):
        self.nodes = nodes
        self.free_at = {n.pk: [start] * n.gpu_count for n in nodes}

    def place(
        self, *, pool: list[Node], workers: int, per_worker: int, ready: datetime
    ) -> tuple[datetime, list[Node], list[list[int]]]:
        if workers == 1:
            best: tuple[datetime, Node] | None = None
            for node in pool:
                at = sorted(self.free_at[node.pk])[per_worker - 1]
                if best is None or at < best[0]:
                    best = (at, node)
            assert best is not None
            at, node = best
            free = self.free_at[node.pk]
            chosen = sorted(range(node.gpu_count), key=free.__getitem__)[:per_worker]
            nodes, gpus = [node], [chosen]
        else:
            by_whole = sorted(pool, key=lambda n: max(self.free_at[n.pk]))[:workers]
            at = max(max(self.free_at[n.pk]) for n in by_whole)
            nodes, gpus = by_whole, [list(range(per_worker)) for _ in by_whole]
        return max(at, ready), nodes, gpus

    def hold(self, nodes: list[Node], gpus: list[list[int]], until: datetime) -> None:
        for node, indexes in zip(nodes, gpus, strict=True):
            for i in indexes:
                self.free_at[node.pk][i] = max(self.free_at[node.pk][i], until)

    def block_node(self, node: Node, until: datetime) -> None:
        self.free_at[node.pk] = [max(t, until) for t in self.free_at[node.pk]]


def seed_history(
    *, cluster: Cluster, people: dict[str, User], admin: User, now: datetime, days: int
) -> HistoryCounts:
    """Write ``days`` of finished history on ``cluster`` for the demo users in ``people``
    (username -> user, each a member of one team). Call once, on a cluster with no jobs (the
    caller checks); deterministic for a given ``now``."""
    rng = random.Random(20240601)
    counts = HistoryCounts()
    start = (now - timedelta(days=days)).replace(minute=0, second=0, microsecond=0)
    nodes = list(Node.objects.filter(cluster=cluster).select_related("gpu_model").order_by("name"))
    pools: dict[str, list[Node]] = {}
    for node in nodes:
        pools.setdefault(node.gpu_model.name, []).append(node)
    classes = {c.name: c for c in PriorityClass.objects.all()}
    teams = {
        m.user.username: m.team
        for m in Membership.objects.filter(user__in=people.values()).select_related("team", "user")
    }
    rates: dict[tuple[int, str], Decimal] = {}
    for price in PriceRate.objects.filter(effective_from__lte=start).order_by("effective_from"):
        rates[(price.gpu_model_id, price.capacity)] = price.rate_per_gpu_hour

    placer = _Placer(nodes, start)
    # A quarantine: a node with repeated ECC errors is taken out for a day and a half, early on.
    quarantined = pools["h100-80gb"][5]
    q_from = start + timedelta(days=6, hours=3)
    q_to = q_from + timedelta(hours=36)
    placer.hold([quarantined], [list(range(quarantined.gpu_count))], q_from)
    node_events: list[NodeEvent] = [
        NodeEvent(
            node=quarantined,
            time=q_from,
            kind=NodeEvent.Kind.QUARANTINED,
            message="repeated ECC errors on GPU 3 (admin)",
        ),
        NodeEvent(
            node=quarantined,
            time=q_to,
            kind=NodeEvent.Kind.RELEASED,
            message="GPU 3 replaced; burn-in passed (admin)",
        ),
    ]
    audits = [
        _audit(
            AuditEntry,
            redact,
            admin,
            q_from,
            "node.quarantine",
            quarantined,
            {"state": NodeState.READY},
            {"state": NodeState.QUARANTINED},
            "repeated ECC errors on GPU 3",
        ),
        _audit(
            AuditEntry,
            redact,
            admin,
            q_to,
            "node.release",
            quarantined,
            {"state": NodeState.QUARANTINED},
            {"state": NodeState.READY},
            "GPU 3 replaced; burn-in passed",
        ),
    ]

    # Arrivals: a daily rhythm (busier in working hours, quieter at weekends), both teams.
    arrivals: list[tuple[datetime, str]] = []
    t = start
    while t < now - timedelta(hours=2):
        hour = t.hour
        weekday = t.weekday() < 5
        per_hour = (9.0 if 8 <= hour < 20 else 3.5) * (1.0 if weekday else 0.5)
        t += timedelta(hours=rng.expovariate(per_hour))
        arrivals.append((t, rng.choice(["alice", "alice", "bob"])))

    jobs: list[Job] = []
    plans: list[tuple[Job, list[_Attempt]]] = []
    failures_left = 4
    for number, (submitted, username) in enumerate(arrivals, start=1):
        workers, per_worker = _weighted(rng, _SHAPES)
        hours = _weighted(rng, _DURATIONS_H) * rng.uniform(0.7, 1.3)
        model = rng.choice(["h100-80gb", "h100-80gb", "a100-40gb"])
        klass = rng.choice(["research", "research", "research", "best-effort"])
        team = teams[username]
        work_s = hours * 3600
        attempts: list[_Attempt] = []
        ready = submitted + timedelta(seconds=rng.uniform(5, 40))
        remaining = work_s
        preempt = klass == "best-effort" and hours >= 2 and rng.random() < 0.25
        fail_node = failures_left > 0 and hours >= 4 and workers == 1 and rng.random() < 0.05
        while True:
            at, held_nodes, gpus = placer.place(
                pool=pools[model], workers=workers, per_worker=per_worker, ready=ready
            )
            end = at + timedelta(seconds=remaining)
            ending = "succeeded"
            if not attempts and (preempt or fail_node):
                cut = rng.uniform(0.3, 0.7) * remaining
                end = at + timedelta(seconds=cut)
                ending = "node_failed" if fail_node else "preempted"
            elif rng.random() < 0.06:
                end = at + timedelta(seconds=remaining * rng.uniform(0.05, 0.5))
                ending = rng.choice(["failed", "cancelled"])
            if end >= now:
                attempts = []  # would still be running: not part of the finished past
                break
            placer.hold(held_nodes, gpus, end)
            attempts.append(_Attempt(held_nodes, gpus, at, end, ending))
            if ending in ("preempted", "node_failed"):
                ran = (end - at).total_seconds()
                remaining -= ran - ran % _CHECKPOINT_S
                ready = end + timedelta(seconds=rng.uniform(30, 300))
                if ending == "node_failed":
                    failures_left -= 1
                    repair = end + timedelta(minutes=rng.uniform(40, 180))
                    placer.block_node(held_nodes[0], repair)
                    node_events += [
                        NodeEvent(
                            node=held_nodes[0],
                            time=end,
                            kind=NodeEvent.Kind.FAILED,
                            message="node stopped answering (Xid 79: GPU fell off the bus)",
                        ),
                        NodeEvent(
                            node=held_nodes[0],
                            time=repair,
                            kind=NodeEvent.Kind.RECOVERED,
                            message="node back after a reboot",
                        ),
                    ]
                continue
            break
        if not attempts:
            continue
        final = attempts[-1]
        lost_s = sum(
            ((a.end - a.start).total_seconds() % _CHECKPOINT_S) * workers * per_worker
            for a in attempts
            if a.ending in ("preempted", "node_failed")
        )
        job = Job(
            team=team,
            submitter=people[username],
            name=f"{team.slug}-{rng.choice(['train', 'finetune', 'eval', 'sweep'])}-h{number:04d}",
            image="nvcr.io/nvidia/pytorch:24.05-py3",
            command="python train.py",
            workers=workers,
            gpus_per_worker=per_worker,
            gpu_model=held_model(final),
            priority_class=classes[klass],
            preemptible=True,
            checkpoint_interval_s=_CHECKPOINT_S,
            runtime_limit_s=int(max(work_s * 1.5, 3600)),
            state=final.ending,
            submitted_at=submitted,
            started_at=final.start,
            finished_at=final.end,
            attempts=len(attempts),
            requeued=len(attempts) > 1,
            earlier_runs_s=sum((a.end - a.start).total_seconds() for a in attempts[:-1]),
            lost_gpu_seconds=lost_s,
            exit_code={"succeeded": 0, "failed": 1}.get(final.ending),
            cluster=cluster,
            backend_ref=f"sim-h{number}",
            simulated_duration_s=work_s,
        )
        jobs.append(job)
        plans.append((job, attempts))
    # Ids chosen here, as for the allocations below: bulk_create prepares each of a job's forty
    # values through its field, which cost most of a second for a month of jobs.
    next_job = (Job.objects.aggregate(m=Max("id"))["m"] or 0) + 1
    for number, job in enumerate(jobs):
        job.pk = next_job + number
    columns = [f.attname for f in Job._meta.concrete_fields]
    _insert(Job, columns, [tuple(getattr(job, c) for c in columns) for job in jobs])
    counts.jobs = len(jobs)

    # (id, job, node, GPU index, worker, attempt, start, end); ids chosen here so usage rows can
    # name their allocation without reading the rows back.
    allocations: list[_Held] = []
    next_id = (Allocation.objects.aggregate(m=Max("id"))["m"] or 0) + 1
    events: list[_EventRow] = []
    for job, attempts in plans:
        events.append(
            _event(
                job=job,
                time=job.submitted_at,
                kind="submitted",
                message=f"submitted by {job.submitter.username}",
            )
        )
        for number, attempt in enumerate(attempts, start=1):
            where = ", ".join(n.name for n in attempt.nodes)
            events.append((job.pk, attempt.start, "started", f"on {where}", {}))
            for worker, (node, indexes) in enumerate(zip(attempt.nodes, attempt.gpus, strict=True)):
                for index in indexes:
                    allocations.append(
                        (next_id, job, node, index, worker, number, attempt.start, attempt.end)
                    )
                    next_id += 1
            if attempt.ending in ("preempted", "node_failed"):
                ran = (attempt.end - attempt.start).total_seconds()
                lost = (ran % _CHECKPOINT_S) * job.total_gpus
                if attempt.ending == "preempted":
                    counts.preemptions += 1
                    message = "preempted by a research job of another team; checkpoint grace 120 s"
                else:
                    counts.node_failures += 1
                    message = f"node {attempt.nodes[0].name} failed"
                events.append(
                    _event(
                        job=job,
                        time=attempt.end,
                        kind=attempt.ending,
                        message=message,
                        data={"attempt": number, "lost_gpu_s": lost},
                    )
                )
                events.append(
                    _event(
                        job=job,
                        time=attempt.end,
                        kind="requeued",
                        message=f"resumes from its checkpoint, lost {lost / 3600:.2f} GPU-h",
                        data={"reason": attempt.ending, "lost_gpu_s": lost, "attempt": number},
                    )
                )
            else:
                events.append(
                    _event(
                        job=job,
                        time=attempt.end,
                        kind=attempt.ending,
                        message={"succeeded": "exit code 0", "failed": "exit code 1"}.get(
                            attempt.ending, f"cancelled by {job.submitter.username}"
                        ),
                    )
                )
    _insert(
        Allocation,
        ["id", "job", "node", "gpu_index", "worker_index", "attempt", "started_at", "ended_at"],
        [(a[0], a[1].pk, a[2].pk, *a[3:]) for a in allocations],
    )
    _insert(JobEvent, ["job", "time", "kind", "message", "data"], events)
    NodeEvent.objects.bulk_create(node_events)
    counts.allocations = len(allocations)

    # Usage: one row per allocation and UTC hour, priced from the book, as the meter writes it.
    usage: list[tuple[Any, ...]] = []
    daily_spend: dict[tuple[int, date], Decimal] = {}
    costs: dict[tuple[Decimal | None, float], Decimal] = {}
    # The rollups billing's meter keeps, summed here rather than re-read from the usage rows:
    # per (team, day, model, capacity) seconds, cost, idle seconds, idle cost; per (job, month,
    # team) seconds and cost.
    daily: dict[tuple[int, date, int, str], list[Any]] = {}
    hours_db: dict[datetime, Any] = {}  # an hour -> the database's value of it
    job_month: dict[tuple[int, date, int], list[Any]] = {}
    adapt = connection.ops.adapt_datetimefield_value
    # The GPUs one attempt holds on one node share their hours: priced and summed once.
    for (job, attempt, node, began, ended), group in itertools.groupby(
        allocations, key=lambda a: (a[1], a[5], a[2], a[6], a[7])
    ):
        ids = [a[0] for a in group]
        held_gpus = len(ids)
        capacity = Capacity.SPOT if node.spot else Capacity.ON_DEMAND
        rate = rates.get((node.gpu_model_id, capacity))
        fixed = (job.pk, attempt, job.team_id, job.submitter_id, node.gpu_model_id, capacity)
        slices = []
        t = began
        while t < ended:
            hour = t.replace(minute=0, second=0, microsecond=0)
            upto = min(ended, hour + timedelta(hours=1))
            seconds = (upto - t).total_seconds()
            idle = round(rng.random() ** 3 * 0.6, 3)
            cost = costs.get((rate, seconds))
            if cost is None:
                cost = (Decimal(seconds) * (rate or 0) / 3600).quantize(Decimal("0.000001"))
                costs[(rate, seconds)] = cost
            if hour not in hours_db:
                hours_db[hour] = adapt(hour)
            slices.append((hours_db[hour], seconds, cost, 0.0 if rate else seconds, idle))
            day = hour.date()
            month = day.replace(day=1)
            counts.months.add(month)
            key = (job.team_id, day)
            daily_spend[key] = daily_spend.get(key, Decimal(0)) + cost * held_gpus
            sums = daily.setdefault(
                (job.team_id, day, node.gpu_model_id, capacity), [0.0, 0, 0.0, 0.0]
            )
            sums[0] += seconds * held_gpus
            sums[1] += cost * held_gpus
            sums[2] += seconds * idle * held_gpus
            sums[3] += float(cost) * idle * held_gpus
            per_job = job_month.setdefault((job.pk, month, job.team_id), [0.0, 0])
            per_job[0] += seconds * held_gpus
            per_job[1] += cost * held_gpus
            t = upto
        job_id, attempt_no, team_id, user_id, model_id, cap = fixed
        usage.extend(
            (
                alloc_id,
                hour_db,
                job_id,
                attempt_no,
                team_id,
                user_id,
                model_id,
                cap,
                secs,
                cost,
                unpriced,
                idle,
                True,
                cluster.pk,
            )
            for alloc_id in ids
            for hour_db, secs, cost, unpriced, idle in slices
        )
    _insert(
        UsageRecord,
        [
            "allocation_id",
            "hour",
            "job",
            "attempt",
            "team",
            "user",
            "gpu_model",
            "capacity",
            "gpu_seconds",
            "cost",
            "unpriced_gpu_seconds",
            "idle_fraction",
            "finalized",
            "cluster",
        ],
        usage,
        prepared=True,
    )
    _insert(
        AllocationMeter,
        ["allocation", "metered_until", "finalized"],
        [(a[0], a[7], True) for a in allocations],
    )
    counts.usage_rows = len(usage)
    quantum = Decimal("0.000001")
    UsageDaily.objects.bulk_create(
        [
            UsageDaily(
                team_id=team_id,
                day=day,
                gpu_model_id=model_id,
                capacity=capacity,
                cluster_id=cluster.pk,
                gpu_seconds=secs,
                cost=cost,
                unpriced_gpu_seconds=0.0,
                telemetry_gpu_seconds=secs,
                idle_gpu_seconds=idle_secs,
                idle_cost=Decimal(repr(idle_usd)).quantize(quantum),
            )
            for (team_id, day, model_id, capacity), (secs, cost, idle_secs, idle_usd) in (
                daily.items()
            )
        ],
        batch_size=2000,
    )
    _insert(
        UsageJobMonth,
        ["job", "month", "team", "gpu_seconds", "cost"],
        [
            (job_id, connection.ops.adapt_datefield_value(month), team_id, secs, cost)
            for (job_id, month, team_id), (secs, cost) in job_month.items()
        ],
    )

    lost_rows = []
    for job, attempts in plans:
        cumulative = 0.0
        for attempt in attempts:
            if attempt.ending not in ("preempted", "node_failed"):
                continue
            ran = (attempt.end - attempt.start).total_seconds()
            lost = (ran % _CHECKPOINT_S) * job.total_gpus
            if lost <= 0:
                continue
            cumulative += lost
            node = attempt.nodes[0]
            capacity = Capacity.SPOT if node.spot else Capacity.ON_DEMAND
            lost_rate = rates.get((node.gpu_model_id, capacity), Decimal(0))
            lost_rows.append(
                LostWork(
                    job=job,
                    cumulative_gpu_seconds=cumulative,
                    team_id=job.team_id,
                    user_id=job.submitter_id,
                    gpu_model_id=node.gpu_model_id,
                    capacity=capacity,
                    kind=LostKind.PREEMPTED
                    if attempt.ending == "preempted"
                    else LostKind.NODE_FAILED,
                    occurred_at=attempt.end,
                    gpu_seconds=lost,
                    cost=(Decimal(lost) * lost_rate / 3600).quantize(Decimal("0.000001")),
                )
            )
        if cumulative != job.lost_gpu_seconds:
            job.lost_gpu_seconds = cumulative
            Job.objects.filter(pk=job.pk).update(lost_gpu_seconds=cumulative)
    LostWork.objects.bulk_create(lost_rows, batch_size=1000)

    # Budgets for each month of the past: vision's runs over, nlp's stays comfortably under;
    # each alert fired on the day the running spend crossed its threshold.
    plan = []
    for month in sorted(counts.months):
        for team, factor in ((teams["alice"], "0.9"), (teams["bob"], "1.7")):
            series = sorted(
                (day, c)
                for (tid, day), c in daily_spend.items()
                if tid == team.pk and day.replace(day=1) == month
            )
            spent = sum((c for _, c in series), Decimal(0))
            if spent <= 0:
                continue
            amount = max((spent * Decimal(factor)).quantize(Decimal("1")), Decimal(100))
            plan.append((Budget(team=team, month=month, amount=amount), series))
    Budget.objects.bulk_create([b for b, _ in plan])
    alerts = []
    for budget, series in plan:
        running = Decimal(0)
        fired: set[int] = set()
        for day, cost in series:
            running += cost
            for threshold in BudgetAlert.THRESHOLDS:
                if threshold not in fired and running * 100 >= budget.amount * threshold:
                    fired.add(threshold)
                    alerts.append(
                        BudgetAlert(
                            budget=budget,
                            threshold=threshold,
                            spend=running.quantize(Decimal("0.01")),
                            fired_at=_at(day, now, hours=18),
                        )
                    )
        audits.append(
            _audit(
                AuditEntry,
                redact,
                admin,
                _at(budget.month, now, hours=9),
                "budget.set",
                budget,
                None,
                {"team": budget.team.slug, "month": budget.month, "amount": budget.amount},
                "monthly budget",
                team=budget.team,
            )
        )
    BudgetAlert.objects.bulk_create(alerts)
    counts.budget_alerts = len(alerts)
    AuditEntry.objects.bulk_create(sorted(audits, key=lambda e: e.time))
    return counts


def _event(
    *, job: Job, time: datetime, kind: str, message: str, data: dict[str, Any] | None = None
) -> _EventRow:
    return (job.pk, time, kind, message, data or {})


def _insert(
    model: type[models.Model],
    names: list[str],
    rows: Sequence[Sequence[Any]],
    *,
    prepared: bool = False,
) -> None:
    """``rows`` (values in the order of the fields ``names``) straight into ``model``'s table:
    tens of thousands of rows, where building a model instance per row would cost seconds.
    Datetimes and JSON go through the database's adaptation (unless the caller ``prepared``
    them); on PostgreSQL the id sequence is
    moved past ids given here."""
    fields = [model._meta.get_field(name) for name in names]
    column_names = [_column(f) for f in fields]
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} "
        f"({', '.join(quote(c) for c in column_names)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    # Only the columns that need it are converted, each value once: datetimes repeat (every GPU
    # of an attempt starts and ends together) and most JSON is an empty object.
    ops = connection.ops
    converters: list[tuple[int, Callable[[Any], Any]]] = []
    for i, f in enumerate(fields):
        if isinstance(f, models.DateTimeField):
            cache: dict[Any, Any] = {}

            def convert_datetime(
                value: Any,
                cache: dict[Any, Any] = cache,
                adapt: Callable[[Any], Any] = ops.adapt_datetimefield_value,
            ) -> Any:
                if value not in cache:
                    cache[value] = adapt(value)
                return cache[value]

            converters.append((i, convert_datetime))
        elif isinstance(f, models.JSONField):
            empty = f.get_db_prep_save({}, connection)

            def convert_json(
                value: Any, f: models.JSONField[Any, Any] = f, empty: Any = empty
            ) -> Any:
                return empty if value == {} else f.get_db_prep_save(value, connection)

            converters.append((i, convert_json))
    if not prepared and converters:
        converted = []
        for row in rows:
            values = list(row)
            for i, convert in converters:
                values[i] = convert(values[i])
            converted.append(values)
        rows = converted
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # COPY: one stream instead of a statement per row (minutes on a busy server).
            columns = ", ".join(quote(c) for c in column_names)
            with cursor.cursor.copy(
                f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            for i in range(0, len(rows), 5000):
                cursor.executemany(sql, rows[i : i + 5000])
        if "id" in names:
            for statement in connection.ops.sequence_reset_sql(no_style(), [model]):
                cursor.execute(statement)


def _column(field: models.Field[Any, Any] | ForeignObjectRel) -> str:
    """The column of a field ``_insert`` writes: a concrete field, never a reverse relation."""
    assert isinstance(field, models.Field) and field.column, f"{field} has no column"
    return field.column


def held_model(attempt: _Attempt) -> GpuModel:
    return attempt.nodes[0].gpu_model


def _at(day: date, now: datetime, *, hours: int) -> datetime:
    return datetime.combine(day, datetime.min.time(), now.tzinfo) + timedelta(hours=hours)


def _audit(
    model: type[AuditEntry],
    redact: Callable[[Any], Any],
    actor: User,
    time: datetime,
    action: str,
    target: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    comment: str,
    *,
    team: Team | None = None,
    target_type: str = "",
) -> AuditEntry:
    return model(
        time=time,
        actor=actor,
        actor_name=actor.get_username(),
        action=action,
        target_type=target_type or target._meta.model_name or "",
        target_id=str(target.pk or ""),
        target_repr=str(target)[:300],
        team=team,
        before=redact(before) if before is not None else None,
        after=redact(after) if after is not None else None,
        comment=comment,
    )
