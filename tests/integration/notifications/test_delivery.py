"""Notifications end to end on real counterparts: job state changes published by the loop's own
services reach a real SMTP server and a real HTTP receiver that checks the signature; a failing
receiver is retried with exponential backoff, then disabled, and its owner sees why in the
portal; a 500-job array finishing is one message; webhook targets are checked at creation and
again at delivery."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from notifications import dispatch, services, targets
from notifications.models import DeliveryAttempt, Event, Message, Webhook
from scheduler.arrays import ArrayRequest, array_submit
from scheduler.models import Job
from scheduler.states import JobState
from scheduler.transitions import job_finish, job_requeue
from tenants.models import AuditEntry

from .conftest import after_window, run_dispatch, running_job, team_hook

pytestmark = pytest.mark.django_db


def test_failed_job_emails_its_submitter_through_a_real_smtp_server(
    platform, alice_mail, smtp, notify_settings, django_capture_on_commit_callbacks
):
    job = running_job(alice_mail)
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=3)
    assert list(Event.objects.values_list("kind", "job_id")) == [("job.failed", job.pk)]

    assert run_dispatch() == []  # within the grouping window: still collecting
    assert smtp.messages == []
    assert run_dispatch(after_window()) == ["delivered"]

    [mail] = smtp.messages
    assert mail["to"] == ["alice@example.com"]
    assert mail["subject"] == f"[gpuplatform] Job train (#{job.pk}) failed"
    assert "exit code 3" in mail["body"]
    assert f"https://gpus.example.com/jobs/{job.pk}/" in mail["body"]
    attempt = DeliveryAttempt.objects.get()
    assert attempt.ok and attempt.number == 1

    # Visible to alice in the delivery log (page and API), not to bob.
    alice_client, bob_client = Client(), Client()
    alice_client.force_login(alice_mail)
    bob_client.force_login(platform["bob"])
    assert "failed" in alice_client.get("/notifications/deliveries/").content.decode()
    assert len(alice_client.get("/api/v1/notifications/deliveries/").json()["results"]) == 1
    assert bob_client.get("/api/v1/notifications/deliveries/").json()["results"] == []
    message = Message.objects.get()
    assert bob_client.get(f"/api/v1/notifications/deliveries/{message.pk}/").status_code == 404


def test_team_webhook_gets_a_signed_generic_body(
    platform, vera, receiver, notify_settings, django_capture_on_commit_callbacks
):
    hook = team_hook(platform["admin"], receiver)
    job = running_job(platform["alice"], name="resnet")
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, target=JobState.SUCCEEDED, now=timezone.now(), exit_code=0)
    assert run_dispatch(after_window()) == ["delivered"]

    [request] = receiver.requests
    assert request["verified"], "the standardwebhooks library rejected our signature"
    assert request["headers"]["webhook-id"] == f"msg_{Message.objects.get().pk}"
    body = request["json"]
    assert body["type"] == "notification" and body["count"] == 1
    assert body["subject"] == f"Job resnet (#{job.pk}) finished"
    assert body["events"][0]["kind"] == "job.succeeded"
    assert body["events"][0]["team"] == "vision"
    assert body["events"][0]["url"] == f"https://gpus.example.com/jobs/{job.pk}/"

    # vera (team admin) manages the hook; alice (member) and bob do not see it.
    for user, status in ((vera, 200), (platform["alice"], 404), (platform["bob"], 404)):
        client = Client()
        client.force_login(user)
        assert client.get(f"/api/v1/notifications/webhooks/{hook.pk}/").status_code == status


def test_slack_and_teams_bodies(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    admin = platform["admin"]
    for fmt in ("slack", "teams"):
        services.webhook_create(
            user=admin,
            team="vision",
            name=fmt,
            url=receiver.url + "/" + fmt,
            format=fmt,
            allow_private_network=True,
        )
    job = running_job(platform["alice"], name="vit")
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=1)
    assert sorted(run_dispatch(after_window())) == ["delivered", "delivered"]
    bodies = {r["path"].rsplit("/", 1)[1]: r["json"] for r in receiver.requests}
    slack, teams = bodies["slack"], bodies["teams"]
    assert slack["text"] == f"Job vit (#{job.pk}) failed"
    assert slack["blocks"][0]["type"] == "section"
    assert f"<https://gpus.example.com/jobs/{job.pk}/|Job vit" in slack["blocks"][1]["text"]["text"]
    card = teams["attachments"][0]
    assert teams["type"] == "message"
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["content"]["type"] == "AdaptiveCard"
    heading, line = card["content"]["body"][:2]
    assert heading["inlines"][0]["text"] == f"Job vit (#{job.pk}) failed"
    title = line["inlines"][0]
    assert title["selectAction"] == {
        "type": "Action.OpenUrl",
        "url": f"https://gpus.example.com/jobs/{job.pk}/",
    }


def test_a_job_name_cannot_put_markdown_in_a_teams_card(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    """Adaptive Cards read markdown in a TextBlock: a job named like a link gave the team's
    channel a link of its owner's choosing. User text now goes in TextRuns, which read none."""
    services.webhook_create(
        user=platform["admin"],
        team="vision",
        name="teams",
        url=receiver.url,
        format="teams",
        allow_private_network=True,
    )
    name = "x](https://evil.example) **[y"
    job = running_job(platform["alice"], name=name)
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=1)
    assert run_dispatch(after_window()) == ["delivered"]

    [request] = receiver.requests
    body = request["json"]["attachments"][0]["content"]["body"]
    shown_as_markdown = [block for block in body if block["type"] == "TextBlock"]
    assert not any(name in block["text"] for block in shown_as_markdown)
    runs = [run for block in body for run in block.get("inlines", [])]
    assert all(run["type"] == "TextRun" for run in runs)
    assert any(name in run["text"] for run in runs)
    links = [run["selectAction"]["url"] for run in runs if "selectAction" in run]
    assert links == [f"https://gpus.example.com/jobs/{job.pk}/"]


def test_a_job_name_cannot_page_a_slack_channel(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    # Slack turns <!channel>, <!here> and <@U…> into mentions wherever it reads mrkdwn, the
    # top-level "text" (the phone notification) included.
    services.webhook_create(
        user=platform["admin"],
        team="vision",
        name="chat",
        url=receiver.url,
        format="slack",
        allow_private_network=True,
    )
    job = running_job(platform["alice"], name="<!channel> & <@U024BE7LH>")
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=1)
    assert run_dispatch(after_window()) == ["delivered"]

    [request] = receiver.requests
    body = request["json"]
    escaped = f"Job &lt;!channel&gt; &amp; &lt;@U024BE7LH&gt; (#{job.pk}) failed"
    assert body["text"] == escaped
    assert body["blocks"][0]["text"]["text"] == f"*{escaped}*"
    assert "<!channel>" not in request["body"].decode()
    assert "<@U024BE7LH>" not in request["body"].decode()


def test_failing_receiver_is_retried_with_backoff_then_disabled_and_the_owner_sees_why(
    platform, vera, receiver, notify_settings, django_capture_on_commit_callbacks
):
    hook = team_hook(platform["admin"], receiver)
    receiver.script = [500] * 10
    job = running_job(platform["alice"])
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=1)

    now = after_window()
    assert run_dispatch(now) == ["queued"]  # attempt 1 failed; a retry is scheduled
    message = Message.objects.get()
    gaps = []
    for attempt in range(2, 6):
        message.refresh_from_db()
        due = message.next_attempt_at
        gaps.append((due - now).total_seconds())
        assert run_dispatch(due - timedelta(seconds=1)) == []  # not before its time
        now = due
        expected = "queued" if attempt < 5 else "failed"
        assert run_dispatch(now) == [expected], attempt

    # Exponential backoff: base 30 s doubling, within the ±10 % jitter.
    for gap, base in zip(gaps, (30, 60, 120, 240), strict=True):
        assert base * 0.9 <= gap <= base * 1.1, gaps
    assert len(receiver.requests) == 5
    attempts = list(DeliveryAttempt.objects.order_by("number"))
    assert [(a.number, a.ok, a.status_code) for a in attempts] == [
        (n, False, 500) for n in range(1, 6)
    ]

    hook.refresh_from_db()
    assert not hook.enabled
    assert hook.disabled_reason == (
        "disabled after 5 failed deliveries in a row; last: HTTP 500 from 127.0.0.1"
    )
    # The owner (vera, the team's admin) sees why: on every page, on the webhooks page, in the
    # API and in the delivery log (all five attempts).
    client = Client()
    client.force_login(vera)
    home = client.get("/").content.decode()
    assert 'id="disabled-hooks"' in home and hook.disabled_reason in home
    assert hook.disabled_reason in client.get("/notifications/webhooks/").content.decode()
    api = client.get(f"/api/v1/notifications/webhooks/{hook.pk}/").json()
    assert api["enabled"] is False and api["disabled_reason"] == hook.disabled_reason
    [logged] = client.get("/api/v1/notifications/deliveries/").json()["results"]
    assert logged["status"] == "failed" and len(logged["attempt_log"]) == 5
    # bob, of another team, is told nothing.
    other = Client()
    other.force_login(platform["bob"])
    assert 'id="disabled-hooks"' not in other.get("/").content.decode()

    # Disabled: new events do not reach it. Enabled again (audited), it delivers.
    job2 = running_job(platform["alice"], name="second")
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job2, target=JobState.FAILED, now=timezone.now(), exit_code=1)
    assert run_dispatch(now + timedelta(minutes=5)) == []
    assert len(receiver.requests) == 5
    services.webhook_enable(user=vera, webhook_id=hook.pk)
    receiver.script = []
    services.webhook_send_test(user=vera, webhook_id=hook.pk)
    assert run_dispatch(timezone.now()) == ["delivered"]
    assert receiver.requests[-1]["json"]["events"][0]["kind"] == "test"


def test_a_500_job_array_finishing_sends_one_grouped_message(
    platform, alice_mail, smtp, receiver, notify_settings, django_capture_on_commit_callbacks
):
    team_hook(platform["admin"], receiver)
    array = array_submit(
        user=alice_mail,
        request=ArrayRequest(
            name="sweep",
            team="vision",
            template={"workers": 1, "gpus_per_worker": 1},
            items=[{} for _ in range(500)],
        ),
    )
    jobs = list(Job.objects.filter(array=array).order_by("array_index"))
    assert len(jobs) == 500
    Job.objects.filter(array=array).update(state=JobState.RUNNING, started_at=timezone.now())

    def finish(batch):
        with django_capture_on_commit_callbacks(execute=True):
            for job in batch:
                failed = job.array_index % 25 == 0  # 20 of 500 fail
                job_finish(
                    job=job,
                    target=JobState.FAILED if failed else JobState.SUCCEEDED,
                    now=timezone.now(),
                    exit_code=1 if failed else 0,
                )

    finish(jobs[:250])
    # Half the array is still running: past the window, nothing is sent yet.
    assert run_dispatch(after_window()) == []
    finish(jobs[250:])
    assert Event.objects.count() == 500
    statuses = run_dispatch(after_window(120))
    assert statuses == ["delivered", "delivered"]  # alice's email and the team webhook

    assert len(smtp.messages) == 1
    mail = smtp.messages[0]
    assert mail["subject"] == "[gpuplatform] Job array sweep: 480 jobs finished, 20 jobs failed"
    assert "… and 450 more" in mail["body"]
    assert len(receiver.requests) == 1
    body = receiver.requests[0]["json"]
    assert receiver.requests[0]["verified"]
    assert body["count"] == 500 and body["summary"] == {"job.failed": 20, "job.succeeded": 480}
    assert len(body["events"]) == 50 and body["truncated"] is True
    assert Message.objects.filter(event_count=500).count() == 2


def test_requeue_preemption_quota_and_node_events_reach_their_people(
    platform, alice_mail, vera, smtp, receiver, notify_settings, django_capture_on_commit_callbacks
):
    from scheduler.models import Node
    from scheduler.services import node_quarantine, node_release
    from tenants.models import QuotaRequest
    from tenants.quotas import quota_request_approve, quota_request_create

    admin = platform["admin"]
    admin.email = "root@example.com"
    admin.save()
    vera.email = "vera@example.com"
    vera.save()
    team_hook(admin, receiver)
    job = running_job(alice_mail)
    node = Node.objects.first()
    with django_capture_on_commit_callbacks(execute=True):
        job_requeue(job=job, now=timezone.now(), reason="node failure (n1 lost)")
        request = quota_request_create(
            user=vera,
            team=Job.objects.get(pk=job.pk).team,
            gpu_model=node.gpu_model,
            guaranteed_gpus=4,
            reason="deadline",
        )
        quota_request_approve(user=admin, request_id=request.pk, comment="granted")
        node_quarantine(user=admin, node_id=node.pk, reason="ECC errors")
        node_release(user=admin, node_id=node.pk)
    kinds = sorted(Event.objects.values_list("kind", flat=True))
    assert kinds == ["job.requeued", "node.quarantined", "node.released", "quota.decided"]
    run_dispatch(after_window())

    by_person = {m["to"][0]: m for m in smtp.messages}
    # Requeues are opt-in by email (the job resumes by itself): alice gets no email.
    assert "alice@example.com" not in by_person
    assert "Quota request" in by_person["vera@example.com"]["subject"]
    assert QuotaRequest.objects.get().requested_by == vera
    root = by_person["root@example.com"]
    assert root["subject"] == "[gpuplatform] 2 notifications: 1 nodes quarantined, 1 nodes released"
    assert "ECC errors" in root["body"]
    # The team webhook hears the team's events, never the admins' node events.
    [hooked] = receiver.requests
    assert hooked["json"]["summary"] == {"job.requeued": 1, "quota.decided": 1}


def test_budget_alerts_reach_the_teams_admins(
    platform, teams, vera, smtp, notify_settings, django_capture_on_commit_callbacks
):
    from datetime import UTC, datetime
    from decimal import Decimal

    from billing.meter import meter_run
    from billing.models import Budget, Capacity, PriceRate
    from scheduler.models import Allocation, Node

    vera.email = "vera@example.com"
    vera.save()
    month = datetime(2026, 12, 1, tzinfo=UTC)
    node = Node.objects.get(name="n1")
    PriceRate.objects.create(
        gpu_model=node.gpu_model,
        capacity=Capacity.ON_DEMAND,
        rate_per_gpu_hour=Decimal("3.60"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )
    Budget.objects.create(team=teams["vision"], month=month.date(), amount=10, hard_stop=True)
    job = running_job(platform["alice"])
    Allocation.objects.create(job=job, node=node, gpu_index=0, started_at=month, attempt=1)
    with django_capture_on_commit_callbacks(execute=True):
        meter_run(now=month + timedelta(hours=3))  # $10.80 of $10: 50, 80, 100 %
    kinds = sorted(Event.objects.values_list("kind", flat=True))
    assert kinds == ["budget.hard_stop", "budget.threshold", "budget.threshold"]
    run_dispatch(after_window())
    [mail] = smtp.messages  # one grouped email to the team's admin
    assert mail["to"] == ["vera@example.com"]
    assert "budget hard stops" in mail["subject"]
    assert "new jobs are refused" in mail["body"]


def test_a_month_metered_after_its_end_alerts_its_budget_without_a_hard_stop(
    platform, teams, vera, smtp, notify_settings, django_capture_on_commit_callbacks
):
    """October's usage metered on 1 December by the backlog sweep: the October budget's alerts
    fire then, once the cost is known, naming October and saying it was metered after the
    month ended. A hard-stop budget's 100 % is an ordinary threshold alert: the stop refused
    October's submissions only, so "new jobs are refused" would be false in December."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from billing.meter import meter_backlog_run
    from billing.models import Budget, BudgetAlert, Capacity, PriceRate
    from billing.services import budget_check_submission
    from scheduler.models import Allocation, Node

    vera.email = "vera@example.com"
    vera.save()
    october = datetime(2026, 10, 1, tzinfo=UTC)
    node = Node.objects.get(name="n1")
    PriceRate.objects.create(
        gpu_model=node.gpu_model,
        capacity=Capacity.ON_DEMAND,
        rate_per_gpu_hour=Decimal("3.60"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )
    Budget.objects.create(team=teams["vision"], month=october.date(), amount=10, hard_stop=True)
    job = running_job(platform["alice"])
    start = october + timedelta(days=9)
    Allocation.objects.create(
        job=job, node=node, gpu_index=0, started_at=start, ended_at=start + timedelta(hours=3)
    )
    swept_at = datetime(2026, 12, 1, 0, 5, tzinfo=UTC)
    with django_capture_on_commit_callbacks(execute=True):
        meter_backlog_run(now=swept_at)  # $10.80 of October's $10: 50, 80, 100 %

    assert set(BudgetAlert.objects.values_list("fired_at", flat=True)) == {swept_at}
    events = list(Event.objects.order_by("id"))
    assert [e.kind for e in events] == ["budget.threshold"] * 3
    assert {(e.data["month"], e.data["after_month_end"]) for e in events} == {("2026-10", True)}
    budget_check_submission(team=teams["vision"], now=swept_at)  # December is not stopped
    run_dispatch(after_window())
    [mail] = smtp.messages
    assert "budget thresholds reached" in mail["subject"]
    assert (
        "Budget of team vision for 2026-10: 100% reached (metered after the month ended)"
        in mail["body"]
    )
    assert "new jobs are refused" not in mail["body"]


def test_webhook_targets_are_checked_at_creation(platform, vera, receiver, api_as):
    client = api_as(vera)
    refused = {
        receiver.url: "a loopback address",
        "http://169.254.169.254/latest/meta-data/": "a link-local address",
        "http://10.1.2.3/hook": "a private address",
        "http://[::1]:8080/hook": "a loopback address",
        "http://[::ffff:127.0.0.1]/hook": "a loopback address",
        "http://100.64.1.1/hook": "a carrier-grade NAT address",
        "ftp://example.com/hook": "must be an http:// or https:// URL",
        "https://user:pw@example.com/hook": "must not carry a user name or password",
    }
    for url, reason in refused.items():
        response = client.post(
            "/api/v1/notifications/webhooks/",
            {"name": "x", "url": url, "team": "vision"},
            format="json",
        )
        assert response.status_code == 400, url
        assert reason in response.json()["url"][0], (url, response.json())
    # Only platform admins allow private networks; members add no team hooks.
    response = client.post(
        "/api/v1/notifications/webhooks/",
        {"name": "x", "url": receiver.url, "team": "vision", "allow_private_network": True},
        format="json",
    )
    assert response.status_code == 400 and "allow_private_network" in response.json()
    response = api_as(platform["alice"]).post(
        "/api/v1/notifications/webhooks/",
        {"name": "x", "url": "https://example.com/hook", "team": "vision"},
        format="json",
    )
    assert response.status_code == 400 and "team" in response.json()
    assert Webhook.objects.count() == 0
    response = api_as(platform["admin"]).post(
        "/api/v1/notifications/webhooks/",
        {"name": "x", "url": receiver.url, "team": "vision", "allow_private_network": True},
        format="json",
    )
    assert response.status_code == 201, response.json()


def test_delivery_resolves_again_against_dns_rebinding(
    platform, vera, receiver, monkeypatch, notify_settings
):
    # At creation the name resolves to a public address; by delivery it points at loopback.
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.216.34"])
    hook = services.webhook_create(
        user=vera,
        team="vision",
        name="rebinding",
        url=f"http://hooks.example.test:{receiver.port}/hook",
    )
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["127.0.0.1"])
    services.webhook_send_test(user=vera, webhook_id=hook.pk)
    assert run_dispatch() == ["queued"]
    attempt = DeliveryAttempt.objects.get()
    assert not attempt.ok
    assert attempt.error.startswith(
        "refused: hooks.example.test resolves to 127.0.0.1, a loopback address"
    )
    assert receiver.requests == []  # nothing reached the local address


def test_preferences_choose_what_reaches_a_person(
    platform, alice_mail, smtp, notify_settings, django_capture_on_commit_callbacks
):
    client = Client()
    client.force_login(alice_mail)
    bad = client.put(
        "/api/v1/notifications/preferences",
        [{"event": "node.quarantined", "channel": "email", "enabled": True}],
        content_type="application/json",
    )
    assert bad.status_code == 400 and "node.quarantined.email" in bad.json()
    # The settings page: untick "job failed" by email (everything else as it was).
    page = client.get("/notifications/settings/").content.decode()
    assert 'value="job.failed|email"' in page and "node.quarantined" not in page
    ticked = [
        f"{e}|{c}"
        for (e, c), on in services.preferences_of(alice_mail).items()
        if on and (e, c) != ("job.failed", "email")
    ]
    assert client.post("/notifications/settings/", {"on": ticked}).status_code == 302
    prefs = {
        (p["event"], p["channel"]): p["enabled"]
        for p in client.get("/api/v1/notifications/preferences").json()
    }
    assert prefs[("job.failed", "email")] is False and prefs[("job.succeeded", "email")] is True

    failed, succeeded = running_job(alice_mail, "a"), running_job(alice_mail, "b")
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=failed, target=JobState.FAILED, now=timezone.now(), exit_code=1)
        job_finish(job=succeeded, target=JobState.SUCCEEDED, now=timezone.now(), exit_code=0)
    run_dispatch(after_window())
    [mail] = smtp.messages
    assert mail["subject"] == f"[gpuplatform] Job b (#{succeeded.pk}) finished"


def test_old_finished_messages_are_pruned(
    platform, alice_mail, smtp, notify_settings, django_capture_on_commit_callbacks
):
    notify_settings.NOTIFY_RETENTION_DAYS = 30
    job = running_job(alice_mail)
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=1)
    assert run_dispatch(after_window()) == ["delivered"]
    assert dispatch.notifications_prune(now=timezone.now() + timedelta(days=29)) == {
        "messages": 0,
        "events": 0,
    }
    pruned = dispatch.notifications_prune(now=timezone.now() + timedelta(days=31))
    assert pruned["messages"] >= 2  # the message, its attempt and its event link
    assert not Message.objects.exists() and not Event.objects.exists()
    assert not DeliveryAttempt.objects.exists()


def test_a_burst_larger_than_one_fan_out_batch_still_makes_one_message(
    platform, alice_mail, notify_settings, monkeypatch
):
    """Events beyond one fan-out batch join the same message: it closes only once the backlog
    is drained (here batches of 7 over 30 events, and a pass that stops after 14)."""
    from scheduler.models import JobArray

    monkeypatch.setattr(dispatch, "FANOUT_BATCH", 7)
    monkeypatch.setattr(dispatch, "FANOUT_MAX_PER_PASS", 14)
    now = timezone.now()
    array = JobArray.objects.create(
        team=platform["alice"].memberships.get().team,
        submitter=alice_mail,
        name="wide",
        size=30,
        template={},
        submitted_at=now,
    )
    jobs = [
        Job.objects.create(
            team=array.team,
            submitter=alice_mail,
            array=array,
            array_index=i,
            name=f"wide-{i}",
            workers=1,
            gpus_per_worker=1,
            priority_class=Job._meta.get_field("priority_class").related_model.objects.first(),
            submitted_at=now,
            state=JobState.SUCCEEDED,
        )
        for i in range(30)
    ]
    Event.objects.bulk_create(
        Event(kind="job.succeeded", team=array.team, job_id=j.pk, created_at=now) for j in jobs
    )
    first = dispatch.notifications_dispatch(now=after_window())
    assert first.events == 14 and first.messages_closed == 0 and first.claimed == []
    second = dispatch.notifications_dispatch(now=after_window())
    assert second.events == 14 and second.claimed == []
    third = dispatch.notifications_dispatch(now=after_window())
    assert third.events == 2 and len(third.claimed) == 1
    assert Message.objects.get().event_count == 30


@pytest.mark.django_db(transaction=True)
def test_an_edit_racing_the_disabling_delivery_keeps_the_hook_disabled(
    platform, vera, receiver, notify_settings
):
    """A team admin renames a hook while the delivery recording its fifth failure in a row
    disables it. The edit saved the whole row as it had read it before: the hook came back
    enabled, its reason and failure count wiped, with no audit entry saying so. An edit now
    writes only the fields it changes, over the row as it is when it is written."""
    from tests.integration.concurrency import race

    hook = team_hook(platform["admin"], receiver)
    Webhook.objects.filter(pk=hook.pk).update(consecutive_failures=4)
    services.webhook_send_test(user=vera, webhook_id=hook.pk)
    receiver.script = [500]

    edited = race(
        lambda: run_dispatch(timezone.now()),
        lambda: services.webhook_update(user=vera, webhook_id=hook.pk, name="vision-pager"),
    )
    assert isinstance(edited, Webhook)
    hook.refresh_from_db()
    assert hook.name == "vision-pager"
    assert not hook.enabled and hook.consecutive_failures == 5
    assert hook.disabled_reason.startswith("disabled after 5 failed deliveries in a row")
    update = AuditEntry.objects.get(action="webhook.update")
    assert update.before["enabled"] is False and update.after["enabled"] is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("answer", [200, 500])
def test_a_webhook_deleted_while_its_message_is_sent_ends_the_delivery_cleanly(
    platform, vera, receiver, notify_settings, answer
):
    """vera deletes the team hook while a delivery to it waits for the receiver's answer: the
    delete takes the hook's messages with it, and recording the attempt (an attempt row for a
    message gone, a failure counted on a hook gone) raised in the worker."""
    from django.db import connection

    hook = team_hook(platform["admin"], receiver)
    services.webhook_send_test(user=vera, webhook_id=hook.pk)
    receiver.script = [answer]

    def delete_the_hook():
        try:
            services.webhook_delete(user=vera, webhook_id=hook.pk)
        finally:
            connection.close()  # the receiver thread's own connection

    receiver.meanwhile = delete_the_hook
    assert run_dispatch(timezone.now()) == ["gone"]
    assert len(receiver.requests) == 1
    assert not Webhook.objects.filter(pk=hook.pk).exists()
    assert not Message.objects.exists() and not DeliveryAttempt.objects.exists()
    assert AuditEntry.objects.filter(action="webhook.delete").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_webhook_deleted_while_its_attempt_is_recorded_is_deleted_with_it(
    platform, vera, receiver, notify_settings
):
    """The delete comes while the delivery records its attempt: it waits for it and deletes the
    new attempt with the message. It collected the message's attempts before the new one
    committed and then failed on the attempt's foreign key."""
    from tests.integration.concurrency import race

    hook = team_hook(platform["admin"], receiver)
    services.webhook_send_test(user=vera, webhook_id=hook.pk)

    deleted = race(
        lambda: run_dispatch(timezone.now()),
        lambda: services.webhook_delete(user=vera, webhook_id=hook.pk),
    )
    assert deleted is None
    assert len(receiver.requests) == 1
    assert not Webhook.objects.filter(pk=hook.pk).exists()
    assert not Message.objects.exists() and not DeliveryAttempt.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_webhook_deleted_between_the_claim_and_the_load_ends_the_delivery_cleanly(
    platform, vera, receiver, notify_settings
):
    """vera deletes the team hook just after the worker claimed its message (enqueued ->
    sending) and before it loaded the row: the delete takes the message with it, and loading it
    raised DoesNotExist in the worker (a crashed task) rather than the clean "gone"."""
    import threading

    from django.db import connection

    hook = team_hook(platform["admin"], receiver)
    services.webhook_send_test(user=vera, webhook_id=hook.pk)
    result = dispatch.notifications_dispatch(now=timezone.now())
    [message_id] = result.claimed

    def delete_the_hook():
        try:
            services.webhook_delete(user=vera, webhook_id=hook.pk)
        finally:
            connection.close()  # this thread's own connection

    claimed = []

    def after_the_claim(execute, sql, params, many, context):
        answer = execute(sql, params, many, context)
        if not claimed and sql.startswith('UPDATE "notifications_message"') and "sending" in params:
            claimed.append(sql)
            deleter = threading.Thread(target=delete_the_hook)
            deleter.start()
            deleter.join()
        return answer

    from notifications.delivery import message_deliver

    with connection.execute_wrapper(after_the_claim):
        assert message_deliver(message_id=message_id) == "gone"
    assert claimed, "the claim's UPDATE was not seen"
    assert receiver.requests == []
    assert not Webhook.objects.filter(pk=hook.pk).exists()
    assert not Message.objects.exists() and not DeliveryAttempt.objects.exists()
