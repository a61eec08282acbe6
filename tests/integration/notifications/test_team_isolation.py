"""Who the dispatcher tells of what, across teams: a notification is a stream to a person or a
team's receiver, so every message must carry only the events its target may hear.

Two sibling teams under a parent (research -> vision, nlp), each with a team webhook, people
with personal webhooks and email, and events of every kind on both sides: after one dispatch
pass, a team webhook's messages hold its own team's events only (the parent's hook hears nothing
of its sub-teams), a person's hold events of their own jobs and of teams they belong to only,
and node events reach platform admins only.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.dispatch import notifications_dispatch
from notifications.events import TEAM_HOOK_EVENTS
from notifications.models import Event, Message, Webhook
from scheduler.models import Job, JobArray
from tenants.models import Membership, QuotaRequest
from tests.integration.roles import make_user

pytestmark = pytest.mark.django_db


def _job(team, user, priorities, name, array=None):
    return Job.objects.create(
        team=team,
        submitter=user,
        name=name,
        workers=1,
        gpus_per_worker=1,
        priority_class=priorities["research"],
        submitted_at=timezone.now(),
        state="failed",
        array=array,
        array_index=0 if array else None,
    )


def test_every_message_carries_only_what_its_target_may_hear(
    platform, teams, priorities, gpu_models, vera
):
    alice, bob, admin = platform["alice"], platform["bob"], platform["admin"]
    nick = make_user("nick", teams["nlp"], "admin")
    rhea = make_user("rhea", teams["research"], "owner", email="rhea@example.com")
    for user in (alice, bob, vera, nick, admin):
        user.email = f"{user.username}@example.com"
        user.save()
    for slug in ("research", "vision", "nlp"):
        Webhook.objects.create(
            team=teams[slug],
            name=f"{slug}-hook",
            url="https://example.com/h",
            events=list(TEAM_HOOK_EVENTS),
            created_by=admin,
        )
    for user in (alice, bob, rhea):
        Webhook.objects.create(owner=user, name="mine", url="https://example.com/mine")
    now = timezone.now() - timedelta(minutes=5)
    events = []
    for slug, user in (("vision", alice), ("nlp", bob)):
        team = teams[slug]
        array = JobArray.objects.create(
            team=team, submitter=user, name=f"{slug}-sweep", size=1, template={}, submitted_at=now
        )
        for job in (_job(team, user, priorities, f"{slug}-run"), _job(team, user, priorities,
                    f"{slug}-sweep-0", array)):  # fmt: skip
            for kind in ("job.failed", "job.idle", "job.preempted"):
                events.append(Event(kind=kind, team=team, job_id=job.pk, created_at=now))
        request = QuotaRequest.objects.create(
            team=team,
            gpu_model=gpu_models["h100"],
            requested_by=vera if slug == "vision" else nick,
            guaranteed_gpus=1,
            borrow_limit_gpus=0,
            reason="more",
            status="rejected",
        )
        events.append(
            Event(kind="quota.decided", team=team, data={"request": request.pk}, created_at=now)
        )
    for slug in ("research", "vision", "nlp"):
        events.append(Event(kind="budget.threshold", team=teams[slug], created_at=now))
    events.append(Event(kind="node.quarantined", data={"node": "n1"}, created_at=now))
    Event.objects.bulk_create(events)

    notifications_dispatch(now=now + timedelta(seconds=1))

    messages = list(Message.objects.select_related("webhook", "user").prefetch_related("events"))
    assert messages
    heard: dict[str, set[str]] = {}
    for message in messages:
        person = message.user or (message.webhook.owner if message.webhook else None)
        kinds_teams = {(e.kind, e.team.slug if e.team else None) for e in message.events.all()}
        target = person.username if person else f"hook:{message.webhook.team.slug}"
        heard.setdefault(target, set()).update(f"{k}@{t}" for k, t in kinds_teams)
        if person is None:  # a team webhook: its own team's events only, never a node's
            assert {t for _, t in kinds_teams} == {message.webhook.team.slug}, (target, kinds_teams)
            continue
        teams_of_person = set(
            Membership.objects.filter(user=person).values_list("team__slug", flat=True)
        )
        for kind, team in kinds_teams:
            if kind.startswith("node."):
                assert person.is_superuser, (target, kind)
            else:
                assert team in teams_of_person, (target, kind, team)
    # Each side hears its own: the submitters their jobs, the requesters their decisions, the
    # managers their budgets; the parent's owner and hook only the parent's own budget.
    assert "job.failed@vision" in heard["alice"] and "job.failed@nlp" in heard["bob"]
    assert "quota.decided@vision" in heard["vera"] and "quota.decided@nlp" in heard["nick"]
    assert heard["rhea"] == {"budget.threshold@research"}
    assert heard["hook:research"] == {"budget.threshold@research"}
    assert "node.quarantined@None" in heard["root"]
