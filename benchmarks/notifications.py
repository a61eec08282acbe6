"""What notifications cost where it matters: the stream hook in the job-finish path (the only
notification code that runs in the loop's thread), and one dispatcher pass over a burst.

1. ``job_finish`` of N running jobs, each in its own transaction as the backend sync does it,
   with the notification listener subscribed and without it (alternating rounds): CPU ms and
   queries per finish.
2. One dispatcher pass (fan-out and grouping) over the events of an array of ``--size`` jobs
   finishing, with the submitter's email and a team webhook as targets: wall and CPU seconds,
   queries, messages made (2: one per target).
3. With ``--claim-backlog N`` (only this): choosing which due messages to hand out
   (``dispatch._fair_share``: round-robin across owners, a bound per owner) over N queued
   messages, half of them one team's and the rest spread over 200 teams, against the
   oldest-first query it replaced: median ms, queries, owners among the 200 handed out.

    createdb -h 127.0.0.1 -U postgres gp_bench_notify
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/gp_bench_notify \\
        REDIS_URL=redis://127.0.0.1:6379/8 DJANGO_DEBUG=true
    .venv/bin/python manage.py migrate -v0 && .venv/bin/python manage.py seed_demo --jobs 0
    .venv/bin/python benchmarks/notifications.py [--finishes 300] [--rounds 5] [--size 5000]

Prints JSON (medians over the rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")


def _running_jobs(user, count: int, name: str):
    from django.utils import timezone

    from scheduler.models import Job
    from scheduler.services import JobRequest, job_submit
    from scheduler.states import JobState

    ids = [
        job_submit(
            user=user,
            request=JobRequest(name=name, team="vision", workers=1, gpus_per_worker=1),
        ).pk
        for _ in range(count)
    ]
    Job.objects.filter(pk__in=ids).update(state=JobState.RUNNING, started_at=timezone.now())
    return list(Job.objects.filter(pk__in=ids))


class QueryCounter:
    """Counts the statements this process sends (unlike Django's query log, never capped)."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)

    def __enter__(self):
        from django.db import connection

        self._cm = connection.execute_wrapper(self)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def _finish_all(jobs) -> tuple[float, float]:
    from django.utils import timezone

    from scheduler.states import JobState
    from scheduler.transitions import job_finish

    cpu = time.process_time()
    with QueryCounter() as queries:
        for job in jobs:
            job_finish(job=job, target=JobState.SUCCEEDED, now=timezone.now(), exit_code=0)
    return (time.process_time() - cpu) * 1000 / len(jobs), queries.count / len(jobs)


def _claim_backlog(size: int, rounds: int) -> dict:
    from django.utils import timezone

    from notifications import dispatch
    from notifications.models import Message, MessageStatus, Webhook
    from tenants.models import Team

    now = timezone.now()
    teams = [
        Team.objects.get_or_create(slug=f"bench-claim-{i}", defaults={"name": f"Bench {i}"})[0]
        for i in range(200)
    ]
    hooks = Webhook.objects.bulk_create(
        [Webhook(team=t, name="bench-claim", url="https://hooks.example.com/") for t in teams]
    )
    Message.objects.bulk_create(
        [
            Message(
                channel="webhook",
                webhook=hook,
                target=f"webhook:{hook.pk}",
                group_key=f"bench-{n}",
                status=MessageStatus.QUEUED,
                created_at=now,
                send_after=now,
                next_attempt_at=now,
            )
            for n in range(size)
            for hook in [hooks[0] if n < size // 2 else hooks[n % len(hooks)]]
        ],
        batch_size=2000,
    )

    def oldest_first() -> list[int]:
        return list(
            Message.objects.filter(status=MessageStatus.QUEUED, next_attempt_at__lte=now)
            .order_by("next_attempt_at", "id")
            .values_list("pk", flat=True)[: dispatch.CLAIM_BATCH]
        )

    out = {}
    try:
        for label, choose in (
            ("fair", lambda: dispatch._fair_share(now)),
            ("oldest_first", oldest_first),
        ):  # noqa: SLF001
            times = []
            for _ in range(rounds):
                with QueryCounter() as queries:
                    start = time.perf_counter()
                    chosen = choose()
                    times.append((time.perf_counter() - start) * 1000)
            owners = Message.objects.filter(pk__in=chosen).values("webhook_id").distinct().count()
            out[label] = {
                "ms": round(statistics.median(times), 1),
                "queries": queries.count,
                "handed_out": len(chosen),
                "owners": owners,
            }
    finally:
        Webhook.objects.filter(pk__in=[h.pk for h in hooks]).delete()
        Team.objects.filter(slug__startswith="bench-claim-").delete()
    return {"queued": size, "rounds": rounds, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finishes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=5000)
    parser.add_argument("--claim-backlog", type=int, default=0)
    args = parser.parse_args()

    import django

    django.setup()
    if args.claim_backlog:
        print(json.dumps(_claim_backlog(args.claim_backlog, args.rounds), indent=2))
        return
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from core import streams
    from notifications import services
    from notifications.dispatch import notifications_dispatch
    from notifications.intake import on_committed
    from notifications.models import Event, Message, Webhook
    from scheduler.arrays import ArrayRequest, array_submit
    from scheduler.models import Job
    from scheduler.states import JobState

    alice = get_user_model().objects.get(username="alice")
    admin = get_user_model().objects.get(username="admin")
    Webhook.objects.filter(name="bench").delete()
    hook = services.webhook_create(
        user=admin,
        team="vision",
        name="bench",
        url="http://127.0.0.1:9/hook",
        allow_private_network=True,
    )

    with_hook, without_hook = [], []
    for _ in range(args.rounds):
        for subscribed, out in ((True, with_hook), (False, without_hook)):
            jobs = _running_jobs(alice, args.finishes, "bench-finish")
            if not subscribed:
                streams._listeners.remove(on_committed)  # noqa: SLF001
            try:
                out.append(_finish_all(jobs))
            finally:
                if not subscribed:
                    streams.subscribe(on_committed)
    Event.objects.all().delete()

    array = array_submit(
        user=alice,
        request=ArrayRequest(
            name="bench-array",
            team="vision",
            template={"workers": 1, "gpus_per_worker": 1},
            items=[{} for _ in range(args.size)],
        ),
    )
    Job.objects.filter(array=array).update(state=JobState.RUNNING, started_at=timezone.now())
    _finish_all(list(Job.objects.filter(array=array)))
    events = Event.objects.filter(fanned_out_at__isnull=True).count()
    Message.objects.all().delete()
    wall, cpu = time.perf_counter(), time.process_time()
    passes = 0
    with QueryCounter() as queries:
        while Event.objects.filter(fanned_out_at__isnull=True).exists():
            notifications_dispatch()
            passes += 1
    result = {
        "finish_with_hook": {
            "cpu_ms": round(statistics.median(r[0] for r in with_hook), 2),
            "queries": round(statistics.median(r[1] for r in with_hook), 2),
        },
        "finish_without_hook": {
            "cpu_ms": round(statistics.median(r[0] for r in without_hook), 2),
            "queries": round(statistics.median(r[1] for r in without_hook), 2),
        },
        "dispatch": {
            "events": events,
            "passes": passes,
            "wall_s": round(time.perf_counter() - wall, 2),
            "cpu_s": round(time.process_time() - cpu, 2),
            "queries": queries.count,
            "messages": Message.objects.filter(event_count=events).count(),
        },
        "finishes_per_round": args.finishes,
        "rounds": args.rounds,
    }
    Webhook.objects.filter(pk=hook.pk).delete()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
