"""Delivery of one message: render it for its channel, make one attempt, record it, and either
finish the message or queue it again after an exponential backoff with jitter (up to
``NOTIFY_MAX_ATTEMPTS``; an email whose recipient the relay refuses for good, a 5xx such as 550,
fails at once).

``message_deliver`` (the ``deliver`` Celery task) claims its message with a conditional UPDATE
(enqueued → sending), so a duplicate task does nothing. Retries are scheduled in the database
(``next_attempt_at``) and picked up by the dispatcher, so they survive worker restarts and show in
the delivery log. A webhook failing ``NOTIFY_WEBHOOK_DISABLE_AFTER`` deliveries in a row is
disabled with the reason shown to its owners, and its pending messages are dropped. Webhook
targets are resolved and checked again at each attempt (``targets``). A message to a person
(their email, their own webhook) carries only the events they may still hear when it is sent
(``dispatch.still_heard``): none left, it is dropped.

Delivery is at-least-once: a worker that dies after the other side accepted a message and
before the attempt is recorded leaves it ``sending``; the dispatcher sends it again. The repeat
keeps the email's Message-ID and the webhook's ``webhook-id``, which receivers dedupe on.
"""

from __future__ import annotations

import random
import smtplib
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parseaddr
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from tenants.audit import audit_record

from . import render, targets
from .describe import describe, portal_url
from .dispatch import still_heard
from .events import Channel
from .models import DeliveryAttempt, Event, Message, MessageStatus, Webhook, WebhookFormat


def _setting(name: str) -> Any:
    return getattr(settings, name)


def backoff_seconds(attempt: int) -> float:
    """Wait after failed attempt ``attempt`` (1-based): base × 2^(attempt-1), ±10 % jitter, capped."""
    base = _setting("NOTIFY_RETRY_BASE_SECONDS") * 2 ** (attempt - 1)
    wait_s: float = min(base * random.uniform(0.9, 1.1), _setting("NOTIFY_RETRY_MAX_SECONDS"))
    return wait_s


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status_code: int | None = None
    error: str = ""
    excerpt: str = ""
    # The other side said no for good (a mail relay's 5xx to the recipient): no retry.
    permanent: bool = False


def _recipient_refused_for_good(exc: Exception) -> bool:
    """Did the relay refuse the recipient with a permanent (5xx) reply, such as 550 "no such
    user"? A 4xx (mailbox busy, greylisting) is worth retrying; a 5xx is the same answer every
    time, and resending it four times only makes the platform look like a spammer."""
    if not isinstance(exc, smtplib.SMTPRecipientsRefused):
        return False
    # object: what a relay answers is checked, not trusted to match smtplib's types.
    codes: list[object] = [code for code, _reply in exc.recipients.values()]
    return bool(codes) and all(isinstance(code, int) and code >= 500 for code in codes)


def _lines(events: list[Event]) -> list[render.Line]:
    """One line per event of the message; only those the message lists one by one are
    described (read from their jobs, budgets, nodes), the others are counted by kind."""
    describe(events[: render.MAX_LISTED])
    return [
        render.Line(
            kind=e.kind,
            title=e.title or e.get_kind_display(),
            detail=e.detail,
            url=e.link,
            team=e.team.slug if e.team else "",
            time=e.created_at.isoformat(),
            job=e.job_id,
        )
        for e in events
    ]


def _array_name(message: Message) -> str:
    if not message.group_key.startswith("array:"):
        return ""
    from scheduler.models import JobArray

    array = JobArray.objects.filter(pk=int(message.group_key.split(":", 1)[1])).first()
    return array.name if array else ""


def _message_id(message: Message) -> str:
    """The same Message-ID on every attempt of ``message``, whichever worker sends it (Django's
    own is random and names the worker's host): a repeat after a crash is then one message to
    mail systems that dedupe on it. The creation time keeps two installations apart."""
    domain = parseaddr(settings.DEFAULT_FROM_EMAIL)[1].rpartition("@")[2] or "localhost"
    return f"<gpuplatform.{message.pk}.{int(message.created_at.timestamp())}@{domain}>"


def _send_email(message: Message, lines: list[render.Line], heading: str) -> Outcome:
    recipient = message.user
    assert recipient is not None  # message_deliver drops an email message without one
    settings_url = portal_url("/notifications/settings/")
    text = render.email_text(lines, heading=heading, settings_url=settings_url)
    email = EmailMessage(
        # A job name may hold a line break, which a header may not (Django refuses it against
        # header injection): folded, rather than failing every attempt of the message.
        subject=" ".join(f"[gpuplatform] {heading}".split())[:250],
        body=text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[recipient.email],
        headers={
            "X-Gpuplatform-Message": f"msg_{message.pk}",
            "Message-ID": _message_id(message),
            # RFC 3834, and Exchange's own header: no vacation or out-of-office replies to a
            # sender nobody reads.
            "Auto-Submitted": "auto-generated",
            "X-Auto-Response-Suppress": "All",
            # Mail clients show "unsubscribe" for it; choices are per event, so it leads to the
            # settings page rather than a one-click opt-out of everything.
            "List-Unsubscribe": f"<{settings_url}>",
        },
        connection=get_connection(timeout=_setting("NOTIFY_EMAIL_TIMEOUT_SECONDS")),
    )
    try:
        email.send()
    except Exception as exc:  # SMTP errors come in many types; each is a failed attempt
        return Outcome(
            False,
            error=f"{type(exc).__name__}: {exc}"[:500],
            permanent=_recipient_refused_for_good(exc),
        )
    return Outcome(True)


def _send_webhook(message: Message, lines: list[render.Line], heading: str) -> Outcome:
    hook = message.webhook
    assert hook is not None  # message_deliver drops a webhook message without one
    message_id = f"msg_{message.pk}"
    if hook.format == WebhookFormat.SLACK:
        body = render.slack_body(lines, heading=heading)
    elif hook.format == WebhookFormat.TEAMS:
        body = render.teams_body(lines, heading=heading)
    else:
        body = render.generic_body(
            lines, message_id=message_id, heading=heading, sent_at=timezone.now().isoformat()
        )
    content = render.encode(body)
    try:
        # Resolved and checked again now: the name may point elsewhere than when it was saved.
        target = targets.check_url(hook.url, allow_private=hook.allow_private_network)
    except targets.TargetRefused as exc:
        return Outcome(False, error=f"refused: {exc}"[:500])
    headers = render.signed_headers(
        secret=hook.secret, message_id=message_id, timestamp=int(time.time()), content=content
    )
    try:
        response = targets.pinned_post(
            target,
            content=content,
            headers=headers,
            timeout_s=_setting("NOTIFY_WEBHOOK_TIMEOUT_SECONDS"),
        )
    except Exception as exc:  # connection refused, timeout, TLS: each is a failed attempt
        return Outcome(False, error=f"{type(exc).__name__}: {exc}"[:500])
    excerpt = response.text[:500]
    if 200 <= response.status_code < 300:
        return Outcome(True, status_code=response.status_code, excerpt=excerpt)
    return Outcome(
        False,
        status_code=response.status_code,
        error=f"HTTP {response.status_code} from {target.host}",
        excerpt=excerpt,
    )


def message_deliver(*, message_id: int, now: datetime | None = None) -> str:
    """Make one delivery attempt of an enqueued message; returns its new status. Claims the
    message first (enqueued → sending), so a duplicate task does nothing ("skipped"). A message
    or webhook gone meanwhile is a clean exit ("gone" when it went after the claim)."""
    now = now or timezone.now()
    if not Message.objects.filter(pk=message_id, status=MessageStatus.ENQUEUED).update(
        status=MessageStatus.SENDING, claimed_at=now
    ):
        return "skipped"
    message = Message.objects.select_related("user", "webhook__owner").filter(pk=message_id).first()
    if message is None:
        # Deleted with its webhook or person between the claim and this read.
        return "gone"
    hook = message.webhook
    if message.channel == Channel.WEBHOOK and (hook is None or not hook.enabled):
        Message.objects.filter(pk=message.pk).update(status=MessageStatus.DROPPED)
        return MessageStatus.DROPPED
    if message.channel == Channel.EMAIL and not (message.user and message.user.email):
        Message.objects.filter(pk=message.pk).update(
            status=MessageStatus.DROPPED, last_error="the recipient has no email address"
        )
        return MessageStatus.DROPPED
    events = list(message.events.select_related("team").order_by("created_at", "id"))
    if message.channel == Channel.EMAIL:
        person = message.user
    else:
        assert hook is not None  # a webhook message without one was dropped above
        person = hook.owner
    if person is not None:
        events = still_heard(person, events)
        if not events:
            Message.objects.filter(pk=message.pk).update(
                status=MessageStatus.DROPPED,
                last_error="the recipient no longer belongs to the team or is deactivated",
            )
            return MessageStatus.DROPPED
    lines = _lines(events)
    heading = render.subject(lines, array_name=_array_name(message))
    number = message.attempts + 1
    started = time.monotonic()
    if message.channel == Channel.EMAIL:
        outcome = _send_email(message, lines, heading)
    else:
        outcome = _send_webhook(message, lines, heading)
    duration_ms = int((time.monotonic() - started) * 1000)
    return _record(message, number, now, duration_ms, outcome, heading, len(lines))


def _record(
    message: Message,
    number: int,
    now: datetime,
    duration_ms: int,
    outcome: Outcome,
    heading: str,
    count: int,
) -> str:
    with transaction.atomic():
        # Deleting a webhook (or a person) deletes its messages, this one too, while the
        # attempt ran. Locked, the rows stay until this record commits (``webhook_delete``
        # locks the hook first too, and then deletes this attempt with the rest); gone already,
        # there is nothing to record an attempt or count a failure on.
        hook_gone = (
            message.webhook_id is not None
            and not Webhook.objects.select_for_update().filter(pk=message.webhook_id).exists()
        )
        if hook_gone or not Message.objects.select_for_update().filter(pk=message.pk).exists():
            return "gone"
        DeliveryAttempt.objects.create(
            message=message,
            number=number,
            started_at=now,
            duration_ms=duration_ms,
            ok=outcome.ok,
            status_code=outcome.status_code,
            error=outcome.error,
            response_excerpt=outcome.excerpt,
        )
        fields = {
            "attempts": number,
            "subject": heading[:300],
            "event_count": count,
            "last_error": outcome.error,
        }
        hook = message.webhook
        if hook is not None:
            _count_speed(hook, duration_ms, now)
        if outcome.ok:
            status = MessageStatus.DELIVERED
            fields.update(delivered_at=timezone.now(), next_attempt_at=None)
            if hook is not None:
                Webhook.objects.filter(pk=hook.pk).update(consecutive_failures=0)
        else:
            disabled = hook is not None and _count_failure(hook, outcome, now)
            if disabled or outcome.permanent:
                status = MessageStatus.FAILED
                fields["next_attempt_at"] = None
            elif number < _setting("NOTIFY_MAX_ATTEMPTS"):
                status = MessageStatus.QUEUED
                fields["next_attempt_at"] = now + timedelta(seconds=backoff_seconds(number))
            else:
                status = MessageStatus.FAILED
                fields["next_attempt_at"] = None
        Message.objects.filter(pk=message.pk).update(status=status, **fields)
    return status


def _count_speed(hook: Webhook, duration_ms: int, now: datetime) -> None:
    """Count an attempt that took over half the deadline against ``hook`` (a quick one starts
    the count again). A hook answering 2xx in 9.9 s of 10 never fails, yet holds one of the
    worker's two slots each time; flagged, its owners see why their deliveries lag (and that
    the fix is to answer first and work after)."""
    deadline_s = _setting("NOTIFY_WEBHOOK_TIMEOUT_SECONDS")
    if duration_ms * 2 <= deadline_s * 1000:
        Webhook.objects.filter(pk=hook.pk, consecutive_slow__gt=0).update(
            consecutive_slow=0, slow_warning="", slow_since=None
        )
        return
    Webhook.objects.filter(pk=hook.pk).update(consecutive_slow=F("consecutive_slow") + 1)
    hook.refresh_from_db(fields=["consecutive_slow", "slow_warning"])
    limit = _setting("NOTIFY_WEBHOOK_SLOW_AFTER")
    if hook.consecutive_slow < limit or hook.slow_warning:
        return
    warning = (
        f"slow: the last {hook.consecutive_slow} deliveries each took over half the "
        f"{deadline_s:g} s deadline (last {duration_ms / 1000:.1f} s); every team's notifications "
        "share the delivery worker, so this hook's messages go out behind others'. Answer at "
        "once (2xx) and do the work afterwards."
    )[:500]
    if Webhook.objects.filter(pk=hook.pk, slow_warning="").update(
        slow_warning=warning, slow_since=now
    ):
        audit_record(
            actor=None,
            action="webhook.slow",
            target=hook,
            team=hook.team,
            before=None,
            after={"consecutive_slow": hook.consecutive_slow},
            comment=warning,
        )


def _count_failure(hook: Webhook, outcome: Outcome, now: datetime) -> bool:
    """Count a failed delivery against ``hook``; disable it at the limit (True). Its other
    pending messages are dropped: they would only fail the same way."""
    Webhook.objects.filter(pk=hook.pk).update(consecutive_failures=F("consecutive_failures") + 1)
    hook.refresh_from_db(fields=["consecutive_failures", "enabled"])
    limit = _setting("NOTIFY_WEBHOOK_DISABLE_AFTER")
    if not hook.enabled or hook.consecutive_failures < limit:
        return False
    reason = (
        f"disabled after {hook.consecutive_failures} failed deliveries in a row; "
        f"last: {outcome.error or 'no answer'}"
    )[:500]
    if Webhook.objects.filter(pk=hook.pk, enabled=True).update(
        enabled=False, disabled_reason=reason, disabled_at=now
    ):
        audit_record(
            actor=None,
            action="webhook.disable",
            target=hook,
            team=hook.team,
            before={"enabled": True},
            after={"enabled": False},
            comment=reason,
        )
        Message.objects.filter(
            webhook=hook,
            status__in=[MessageStatus.COLLECTING, MessageStatus.QUEUED, MessageStatus.ENQUEUED],
        ).update(status=MessageStatus.DROPPED, last_error="the webhook was disabled")
    return True
