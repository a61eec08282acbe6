"""What organisations expect of notification delivery, on real counterparts (aiosmtpd, a local
HTTP receiver): at-least-once delivery whose repeats carry the identity a receiver dedupes on;
no redirect and no second DNS answer can turn a webhook toward the platform's network; the
documented signature recipe verifies a real delivery and refuses a replay; emails carry the
headers mail systems act on and encode non-ASCII names; a person who left the team, or was
deactivated, before delivery is not told; a storm of failures is one message per window."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from notifications import delivery
from notifications.delivery import message_deliver
from notifications.dispatch import notifications_dispatch
from notifications.models import Message, Webhook
from scheduler.states import JobState
from scheduler.transitions import job_finish
from tenants.models import Membership
from tenants.services import membership_remove

from .conftest import after_window, run_dispatch, running_job, team_hook

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[3] / "docs" / "tenancy.md"


def _fail(jobs, capture) -> None:
    with capture(execute=True):
        for job in jobs:
            job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=1)


class WorkerDied(Exception):
    """Stands for a worker killed between the send and its record."""


def test_a_worker_dying_after_the_send_resends_under_the_same_identity(
    platform,
    alice_mail,
    smtp,
    receiver,
    notify_settings,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    """Delivery is at-least-once: the platform cannot know whether a send it never recorded
    arrived, so it sends again. The repeat is the same email Message-ID and the same
    ``webhook-id``, which is what mail systems and receivers dedupe on."""
    team_hook(platform["admin"], receiver)
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    now = after_window()

    def die(*args, **kwargs):
        raise WorkerDied

    record = delivery._record
    monkeypatch.setattr(delivery, "_record", die)
    claimed = notifications_dispatch(now=now).claimed
    assert len(claimed) == 2
    for pk in claimed:
        with pytest.raises(WorkerDied):
            message_deliver(message_id=pk, now=now)
    monkeypatch.setattr(delivery, "_record", record)
    assert len(smtp.messages) == 1 and len(receiver.requests) == 1
    assert set(Message.objects.values_list("status", flat=True)) == {"sending"}

    assert run_dispatch(now + timedelta(minutes=5)) == []  # the worker may still be at it
    assert run_dispatch(now + timedelta(minutes=11)) == ["delivered", "delivered"]
    first, again = smtp.messages
    assert first["message"]["Message-ID"] == again["message"]["Message-ID"]
    one, two = receiver.requests
    assert one["headers"]["webhook-id"] == two["headers"]["webhook-id"]
    assert two["verified"]


def _documented_verify():
    """The verification recipe of docs/tenancy.md, run as it is printed."""
    text = DOCS.read_text()
    match = re.search(r"```python\n(.*?def verify\(.*?)```", text, re.S)
    assert match, "docs/tenancy.md shows no `def verify(` recipe for webhook signatures"
    namespace: dict = {}
    exec(match.group(1), namespace)  # noqa: S102 (our own documentation)
    return namespace["verify"]


def test_the_documented_recipe_verifies_a_real_delivery_and_refuses_a_replay(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    verify = _documented_verify()
    hook = team_hook(platform["admin"], receiver)
    job = running_job(platform["alice"], name="Обучение")  # non-ASCII: raw bytes are signed
    _fail([job], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["delivered"]
    [request] = receiver.requests
    headers, body = request["headers"], request["body"]

    assert verify(hook.secret, headers, body) is True
    assert verify(hook.secret, headers, body.replace(b"failed", b"passed")) is False
    assert verify("whsec_" + "A" * 32, headers, body) is False  # another hook's secret
    # The timestamp is signed: the same request played back ten minutes later is refused,
    # and moving its timestamp forward breaks the signature.
    sent = int(headers["webhook-timestamp"])
    assert verify(hook.secret, headers, body, now=sent + 600) is False
    moved = {**headers, "webhook-timestamp": str(sent + 600)}
    assert verify(hook.secret, moved, body, now=sent + 600) is False


def test_email_carries_the_headers_mail_systems_act_on(
    platform,
    alice_mail,
    smtp,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["delivered"]
    [mail] = smtp.messages
    headers = mail["message"]
    # Auto-responders (vacation replies, Exchange's out-of-office) stay quiet.
    assert headers["Auto-Submitted"] == "auto-generated"
    assert headers["X-Auto-Response-Suppress"] == "All"
    # Mail clients offer "unsubscribe": it leads to the person's notification settings.
    assert headers["List-Unsubscribe"] == "<https://gpus.example.com/notifications/settings/>"
    assert re.fullmatch(r"<[^<>@\s]+@[^<>@\s]+>", headers["Message-ID"])
    assert headers["Date"]


@pytest.mark.parametrize("change", ["left the team", "was deactivated"])
def test_a_person_who_left_or_was_deactivated_before_delivery_is_not_told(
    change,
    platform,
    teams,
    alice_mail,
    smtp,
    receiver,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    Webhook.objects.create(
        owner=alice_mail, name="alice-dm", url=receiver.url, allow_private_network=True
    )
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    assert run_dispatch() == []  # her email and her own webhook are collecting
    assert Message.objects.filter(status="collecting").count() == 2

    if change == "left the team":
        membership_remove(user=platform["admin"], team=teams["vision"], username="alice")
    else:
        alice_mail.is_active = False
        alice_mail.save()
    assert run_dispatch(after_window()) == ["dropped", "dropped"]
    assert smtp.messages == [] and receiver.requests == []


def test_a_grouped_email_keeps_only_the_teams_its_reader_still_belongs_to(
    platform,
    teams,
    alice_mail,
    smtp,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    Membership.objects.create(user=alice_mail, team=teams["nlp"], role="member")
    seg = running_job(alice_mail, name="segmenter", team="vision")
    lm = running_job(alice_mail, name="language-model", team="nlp")
    _fail([seg, lm], django_capture_on_commit_callbacks)
    assert run_dispatch() == []
    membership_remove(user=platform["admin"], team=teams["vision"], username="alice")

    assert run_dispatch(after_window()) == ["delivered"]
    [mail] = smtp.messages
    assert mail["subject"] == f"[gpuplatform] Job language-model (#{lm.pk}) failed"
    assert "segmenter" not in mail["body"] and "vision" not in mail["body"]
    assert Message.objects.get().event_count == 1
