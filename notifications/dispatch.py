"""The dispatcher: recorded events become grouped messages, and due messages go to the workers.

``notifications_dispatch`` (a Celery beat task every ``NOTIFY_DISPATCH_SECONDS``) runs
single-flight (an advisory lock) and does, in order:

1. fan-out: each new ``Event`` joins the collecting message of every target that should hear
   it: a person's email or personal webhooks (per their preferences), the team's webhooks
   subscribed to it. Events of one target within ``NOTIFY_GROUP_WINDOW_SECONDS`` of the first
   share one message; finishes and failures of a job array share one message until the array
   has no live job left (at most ``NOTIFY_ARRAY_HOLD_SECONDS``), so a 500-job array is one
   message, not 500. Audience lookups are a fixed number of queries per batch;
2. closing, once no event is left to fan out: collecting messages whose window ended (or whose
   array is over) become queued;
3. recovery: a message a worker claimed and never finished (a crash) is queued again;
4. claiming: due queued messages become ``enqueued``, round-robin across owners with a bound
   on each owner's unfinished ones (``_fair_share``); the task hands each to ``deliver``, which
   runs on the ``notify`` queue (a worker of its own: a delivery may wait on a slow relay).

Nothing here sends anything: that is ``notifications.delivery``, one Celery task per message.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, F, Window
from django.db.models.functions import Coalesce, RowNumber
from django.utils import timezone

from tenants.models import MANAGE_ROLES, Membership

from .events import ADMIN_EVENTS, DEFAULT_ON, JOB_EVENTS, Channel, EventKind
from .models import Event, Message, MessageStatus, Preference, Webhook

FANOUT_BATCH = 2000
FANOUT_MAX_PER_PASS = 20_000
CLAIM_BATCH = 200
STUCK_AFTER = timedelta(minutes=10)
LOCK_KEY = 0x6E6F_7466  # "notf"

log = logging.getLogger(__name__)


@dataclass
class DispatchResult:
    ran: bool = True
    events: int = 0
    messages_closed: int = 0
    recovered: int = 0
    claimed: list[int] = field(default_factory=list)


def notifications_dispatch(*, now: datetime | None = None) -> DispatchResult:
    """One dispatcher pass (see the module docstring). Single-flight across workers; returns what
    it did (``claimed``: the message ids the caller must hand to ``message_deliver``)."""
    from scheduler.locks import advisory_lock

    now = now or timezone.now()
    with advisory_lock(LOCK_KEY) as acquired:
        if not acquired:
            return DispatchResult(ran=False)
        result = DispatchResult()
        drained = False
        while result.events < FANOUT_MAX_PER_PASS:
            fanned = _fan_out(now)
            result.events += fanned
            if fanned < FANOUT_BATCH:
                drained = True
                break
        # A message closes only once every recorded event has joined it: with a backlog left
        # (a burst larger than one pass), an array's message would close half-full.
        if drained:
            result.messages_closed = _close_due(now)
        stuck = Message.objects.filter(
            status__in=[MessageStatus.ENQUEUED, MessageStatus.SENDING],
            claimed_at__lt=now - STUCK_AFTER,
        )
        # Enqueued and never started: no worker took the delivery task from its queue.
        unread = stuck.filter(status=MessageStatus.ENQUEUED).count()
        if unread:
            log.warning(
                "%d notification deliveries were not taken from the 'notify' queue within %s: "
                "is a worker reading it (celery worker -Q notify, docs/deploy.md)?",
                unread,
                STUCK_AFTER,
            )
        result.recovered = stuck.update(status=MessageStatus.QUEUED, next_attempt_at=now)
        due = _fair_share(now)
        if due:
            Message.objects.filter(pk__in=due, status=MessageStatus.QUEUED).update(
                status=MessageStatus.ENQUEUED, claimed_at=now
            )
        result.claimed = due
        return result


def _owner_key() -> list[Any]:
    """Whose a message is, as PARTITION BY terms: a team webhook's team, else the person (their
    email and their own webhooks are one owner). Exactly one of the two is set."""
    return [F("webhook__team_id"), Coalesce(F("webhook__owner_id"), F("user_id"))]


def _fair_share(now: datetime) -> list[int]:
    """The due messages to hand out now, in the order the worker should take them.

    The rule: round-robin across owners, each owner's oldest first, and no owner with more than
    ``NOTIFY_IN_FLIGHT_PER_OWNER`` messages handed out and not finished. The notify worker takes
    its queue in order, two at a time, and a receiver may take the whole 10 s deadline to say
    200: oldest-first let one team's backlog (or a dozen slow hooks) fill the queue, and every
    other team's messages waited behind it for the whole window. Within a round, hooks flagged
    slow (``Webhook.slow_warning``) go last."""
    per_owner = settings.NOTIFY_IN_FLIGHT_PER_OWNER
    busy: dict[tuple[int | None, int | None], int] = defaultdict(int)
    for team_id, person_id, count in (
        Message.objects.filter(status__in=[MessageStatus.ENQUEUED, MessageStatus.SENDING])
        .annotate(team_key=_owner_key()[0], person_key=_owner_key()[1])
        .values("team_key", "person_key")
        .annotate(count=Count("id"))
        .values_list("team_key", "person_key", "count")
    ):
        busy[(team_id, person_id)] += count
    candidates = (
        Message.objects.filter(status=MessageStatus.QUEUED, next_attempt_at__lte=now)
        .annotate(
            team_key=_owner_key()[0],
            person_key=_owner_key()[1],
            turn=Window(
                RowNumber(),
                partition_by=_owner_key(),
                order_by=[F("next_attempt_at").asc(), F("id").asc()],
            ),
        )
        .filter(turn__lte=per_owner)
        .values_list(
            "pk", "team_key", "person_key", "turn", "next_attempt_at", "webhook__slow_warning"
        )
    )
    allowed = [
        (turn, bool(slow), due_at, pk)
        for pk, team_id, person_id, turn, due_at, slow in candidates
        if turn <= per_owner - busy[(team_id, person_id)]
    ]
    return [pk for *_, pk in sorted(allowed)[:CLAIM_BATCH]]


@dataclass
class _Audience:
    """Who hears one event, and in which group."""

    users: list[User] = field(default_factory=list)
    team_hooks: bool = True
    group_key: str = ""


def _audiences(events: list[Event]) -> dict[int, _Audience]:
    """Per event: the people who hear it and its group (queries: one per kind of audience)."""
    from scheduler.models import Job
    from tenants.models import QuotaRequest

    out = {e.pk: _Audience() for e in events}
    job_ids = {e.job_id for e in events if e.kind in JOB_EVENTS and e.job_id}
    jobs = Job.objects.select_related("submitter").in_bulk(job_ids)
    # A submitter hears of their job while they still belong to its team (or run the platform).
    members = set(
        Membership.objects.filter(
            user_id__in={j.submitter_id for j in jobs.values()},
            team_id__in={j.team_id for j in jobs.values()},
        ).values_list("user_id", "team_id")
    )
    budget_teams = {
        e.team_id
        for e in events
        if e.kind in (EventKind.BUDGET_THRESHOLD, EventKind.BUDGET_HARD_STOP)
        and e.team_id is not None
    }
    # Keyed by int | None: an event's team_id is read as a key, and one without a team has none.
    managers: dict[int | None, list[User]] = defaultdict(list)
    for membership in Membership.objects.filter(
        team_id__in=budget_teams, role__in=MANAGE_ROLES, user__is_active=True
    ).select_related("user"):
        managers[membership.team_id].append(membership.user)
    request_ids = {e.data.get("request") for e in events if e.kind == EventKind.QUOTA_DECIDED} - {
        None
    }
    requests = QuotaRequest.objects.select_related("requested_by").in_bulk(
        [r for r in request_ids if isinstance(r, int)]
    )
    admins = None
    for event in events:
        audience = out[event.pk]
        if event.kind in JOB_EVENTS:
            job = jobs.get(event.job_id)
            if job is None:  # deleted meanwhile: nothing to say
                audience.team_hooks = False
                continue
            submitter = job.submitter
            if submitter.is_active and (
                submitter.is_superuser or (submitter.pk, job.team_id) in members
            ):
                audience.users = [submitter]
            if job.array_id and event.kind in (EventKind.JOB_SUCCEEDED, EventKind.JOB_FAILED):
                audience.group_key = f"array:{job.array_id}"
        elif event.kind in (EventKind.BUDGET_THRESHOLD, EventKind.BUDGET_HARD_STOP):
            audience.users = managers.get(event.team_id, [])
        elif event.kind == EventKind.QUOTA_DECIDED:
            req = requests.get(event.data.get("request"))
            if req is not None and req.requested_by.is_active:
                audience.users = [req.requested_by]
        elif event.kind in ADMIN_EVENTS:
            if admins is None:
                admins = list(get_user_model().objects.filter(is_superuser=True, is_active=True))
            audience.users = admins
            audience.team_hooks = False
    return out


def still_heard(person: User, events: list[Event]) -> list[Event]:
    """The events of a message ``person`` may still be told of when it is sent. The audience was
    decided at fan-out, but a message waits for its window (an array's, for hours) and its
    retries: by then the person may have left a team, lost its admin role or been deactivated,
    and a grouped message must not carry a team's news to someone no longer in it."""
    if not person.is_active:
        return []
    if person.is_superuser:
        return events
    roles: dict[int | None, str] = dict(
        Membership.objects.filter(user=person).values_list("team_id", "role")
    )
    budget = (EventKind.BUDGET_THRESHOLD, EventKind.BUDGET_HARD_STOP)
    return [
        e
        for e in events
        if e.kind == EventKind.TEST
        or (e.kind in budget and roles.get(e.team_id, "") in MANAGE_ROLES)
        or (e.kind not in budget and e.kind not in ADMIN_EVENTS and e.team_id in roles)
    ]


def _fan_out(now: datetime) -> int:
    events = list(
        Event.objects.filter(fanned_out_at__isnull=True).order_by("created_at", "id")[:FANOUT_BATCH]
    )
    if not events:
        return 0
    audiences = _audiences(events)
    users = {u.pk: u for audience in audiences.values() for u in audience.users}
    chosen: dict[tuple[int, str, str], bool] = {
        (p.user_id, p.event, p.channel): p.enabled
        for p in Preference.objects.filter(user_id__in=users)
    }
    # int | None: the model's types; the filters below leave only hooks with the key set.
    personal: dict[int | None, list[Webhook]] = defaultdict(list)
    for hook in Webhook.objects.filter(owner_id__in=users, enabled=True):
        personal[hook.owner_id].append(hook)
    team_hooks: dict[int | None, list[Webhook]] = defaultdict(list)
    for hook in Webhook.objects.filter(
        team_id__in={e.team_id for e in events if e.team_id}, enabled=True
    ):
        team_hooks[hook.team_id].append(hook)

    def wants(user: User, kind: str, channel: str) -> bool:
        if kind in ADMIN_EVENTS and not user.is_superuser:
            return False
        return chosen.get((user.pk, kind, channel), kind in DEFAULT_ON[channel])

    # (target, group) -> (channel, user, hook, [events])
    wanted: dict[tuple[str, str], tuple[str, User | None, Webhook | None, list[Event]]] = {}

    def add(
        target: str,
        group: str,
        channel: str,
        user: User | None,
        hook: Webhook | None,
        event: Event,
    ) -> None:
        entry = wanted.setdefault((target, group), (channel, user, hook, []))
        if not entry[3] or entry[3][-1] is not event:
            entry[3].append(event)

    for event in events:
        audience = audiences[event.pk]
        group = audience.group_key
        for user in audience.users:
            if wants(user, event.kind, Channel.EMAIL) and user.email:
                add(f"email:{user.pk}", group, Channel.EMAIL, user, None, event)
            if wants(user, event.kind, Channel.WEBHOOK):
                for hook in personal.get(user.pk, []):
                    add(f"webhook:{hook.pk}", group, Channel.WEBHOOK, None, hook, event)
        if audience.team_hooks and event.team_id:
            for hook in team_hooks.get(event.team_id, []):
                if event.kind in hook.events:
                    add(f"webhook:{hook.pk}", group, Channel.WEBHOOK, None, hook, event)

    window = timedelta(seconds=settings.NOTIFY_GROUP_WINDOW_SECONDS)
    hold = timedelta(seconds=settings.NOTIFY_ARRAY_HOLD_SECONDS)
    with transaction.atomic():
        Event.objects.filter(pk__in=[e.pk for e in events]).update(fanned_out_at=now)
        open_messages = {
            (m.target, m.group_key): m
            for m in Message.objects.filter(
                status=MessageStatus.COLLECTING, target__in={t for t, _ in wanted}
            )
        }
        links = []
        for (target, group), (channel, to_user, to_hook, joined) in wanted.items():
            message = open_messages.get((target, group))
            if message is None:
                message = Message.objects.create(
                    channel=channel,
                    user=to_user,
                    webhook=to_hook,
                    target=target,
                    group_key=group,
                    created_at=now,
                    # The window opens with the first event, not with this pass.
                    send_after=min(e.created_at for e in joined)
                    + (hold if group.startswith("array:") else window),
                )
            Message.objects.filter(pk=message.pk).update(event_count=F("event_count") + len(joined))
            links += [Message.events.through(message_id=message.pk, event_id=e.pk) for e in joined]
        Message.events.through.objects.bulk_create(links, batch_size=2000)
    return len(events)


def _close_due(now: datetime) -> int:
    from scheduler.models import Job
    from scheduler.states import LIVE_STATES

    closed = Message.objects.filter(status=MessageStatus.COLLECTING, send_after__lte=now).update(
        status=MessageStatus.QUEUED, next_attempt_at=now
    )
    arrays = {
        m.pk: int(m.group_key.split(":", 1)[1])
        for m in Message.objects.filter(
            status=MessageStatus.COLLECTING, group_key__startswith="array:"
        ).only("pk", "group_key")
    }
    if arrays:
        live = set(
            Job.objects.filter(array_id__in=set(arrays.values()), state__in=LIVE_STATES)
            .values_list("array_id", flat=True)
            .distinct()
        )
        over = [pk for pk, array_id in arrays.items() if array_id not in live]
        if over:
            closed += Message.objects.filter(pk__in=over, status=MessageStatus.COLLECTING).update(
                status=MessageStatus.QUEUED, next_attempt_at=now
            )
    return closed


def notifications_prune(*, now: datetime | None = None) -> dict[str, int]:
    """Delete finished messages (delivered, failed, dropped; their attempts go with them) and
    fanned-out events older than ``NOTIFY_RETENTION_DAYS`` that no message lists. Idempotent."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.NOTIFY_RETENTION_DAYS)
    finished = [MessageStatus.DELIVERED, MessageStatus.FAILED, MessageStatus.DROPPED]
    messages, _ = Message.objects.filter(status__in=finished, created_at__lt=cutoff).delete()
    events, _ = Event.objects.filter(fanned_out_at__lt=cutoff, messages__isnull=True).delete()
    return {"messages": messages, "events": events}
