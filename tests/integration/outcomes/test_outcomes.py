"""The success-rate view through the API and the portal: jobs ended per day by outcome and
cause, work lost to requeues, the interruption limit failing a job for good, the caller's teams
only (another team is a 404), and bad parameters a 400 naming the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job
from scheduler.states import JobState
from scheduler.transitions import job_fail, job_finish, job_requeue

pytestmark = pytest.mark.django_db


def _running(platform, submit, user="alice", team="vision", **fields):
    job_id = submit(platform[user], team=team, simulated_duration_s=100_000, **fields).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING
    return job


def test_outcomes_by_cause_and_lost_work(platform, submit, api_as, settings):
    settings.JOB_MAX_INTERRUPTIONS = 2
    now = timezone.now()
    ok = _running(platform, submit)
    assert job_finish(job=ok, target=JobState.SUCCEEDED, now=now, exit_code=0)
    crashed = _running(platform, submit)
    assert job_finish(job=crashed, target=JobState.FAILED, now=now, exit_code=1)
    slow = _running(platform, submit)
    job_finish(job=slow, target=JobState.FAILED, now=now, message="time limit reached")
    broken = _running(platform, submit)
    job_fail(job=broken, reason="cluster test refused the job: bad", now=now)
    # Preempted once (requeued, work lost), started again, then its node failed: the limit.
    flaky = _running(platform, submit, gpus_per_worker=2)
    Job.objects.filter(pk=flaky.pk).update(started_at=now - timedelta(hours=1))
    assert job_requeue(job=flaky, now=now, reason="preempted")
    run_cycle()
    flaky.refresh_from_db()
    assert flaky.state == JobState.RUNNING and flaky.attempts == 2
    # Failed at the clock's time, not ahead of it: the report counts jobs ended up to its now.
    assert job_requeue(job=flaky, now=timezone.now(), reason="node failure (node lost)")
    flaky.refresh_from_db()
    assert flaky.state == JobState.FAILED and "not requeued again" in flaky.why_pending
    # bob's job is nlp's: never in alice's numbers.
    theirs = _running(platform, submit, user="bob", team="nlp")
    job_finish(job=theirs, target=JobState.FAILED, now=now, exit_code=2)

    body = api_as(platform["alice"]).get("/api/v1/outcomes/", {"days": 7}).json()
    assert body["teams"] == ["vision"] and len(body["days"]) == 7
    totals = body["totals"]
    assert (totals["succeeded"], totals["failed_user_error"], totals["failed_timeout"]) == (1, 1, 1)
    assert (totals["failed_platform"], totals["failed_node_failure"]) == (1, 1)
    assert totals["failed_preemption_limit"] == 0 and totals["failed"] == 4
    assert body["success_rate"] == 0.2
    # One hour of two GPUs lost to the preemption.
    assert totals["lost_gpu_hours"]["preemption"] == pytest.approx(2.0, abs=0.01)
    assert body["days"][-1]["finished"] == 5

    # The platform view (an admin) counts bob's too; bob alone sees only nlp.
    admin = api_as(platform["admin"]).get("/api/v1/outcomes/").json()
    assert admin["totals"]["finished"] == 6
    assert api_as(platform["bob"]).get("/api/v1/outcomes/").json()["totals"]["finished"] == 1


def test_the_preemption_limit_is_its_own_cause(platform, submit, api_as, settings):
    settings.JOB_MAX_INTERRUPTIONS = 1
    job = _running(platform, submit)
    assert job_requeue(job=job, now=timezone.now(), reason="preempted")
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    body = api_as(platform["alice"]).get("/api/v1/outcomes/").json()
    assert body["totals"]["failed_preemption_limit"] == 1


def test_another_team_is_404_and_bad_days_400(platform, api_as):
    alice = api_as(platform["alice"])
    assert alice.get("/api/v1/outcomes/", {"team": "nlp"}).status_code == 404
    assert alice.get("/api/v1/outcomes/", {"team": "vision"}).status_code == 200
    for bad in ("0", "367", "many", "1e9"):
        response = alice.get("/api/v1/outcomes/", {"days": bad})
        assert response.status_code == 400 and "days" in response.json(), bad
    assert api_as().get("/api/v1/outcomes/").status_code in (401, 403)


def test_portal_page(platform, submit, client):
    ok = _running(platform, submit)
    job_finish(job=ok, target=JobState.SUCCEEDED, now=timezone.now(), exit_code=0)
    client.force_login(platform["alice"])
    page = client.get("/outcomes/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "100 %" in text and "outcomes-figure" in text and "1 succeeded" in text
    assert client.get("/outcomes/", {"team": "nlp"}).status_code == 404
    assert client.get("/outcomes/", {"days": "x"}).status_code == 200
    client.force_login(platform["bob"])
    assert "no job ended" in client.get("/outcomes/").content.decode()


def test_deadline_hit_rate(platform, submit, api_as, client):
    due = (timezone.now() + timedelta(hours=6)).isoformat()
    met = _running(platform, submit, deadline=due)
    late = _running(platform, submit, deadline=due)
    failed = _running(platform, submit, deadline=due)
    cancelled = _running(platform, submit, deadline=due)
    _running(platform, submit)  # no deadline: counts neither way
    now = timezone.now()
    job_finish(job=met, target=JobState.SUCCEEDED, now=now, exit_code=0)
    Job.objects.filter(pk=late.pk).update(deadline=now - timedelta(minutes=1))
    late.refresh_from_db()
    job_finish(job=late, target=JobState.SUCCEEDED, now=now, exit_code=0)
    job_fail(job=failed, reason="exit code 1", now=now)
    job_finish(job=cancelled, target=JobState.CANCELLED, now=now)
    body = api_as(platform["alice"]).get("/api/v1/outcomes/").json()
    assert (body["totals"]["deadline_met"], body["totals"]["deadline_missed"]) == (1, 2)
    assert body["deadline_hit_rate"] == round(1 / 3, 4)
    client.force_login(platform["alice"])
    assert '33 % <span class="muted">(1 met, 2 missed' in client.get("/outcomes/").content.decode()


def test_a_deadline_that_passes_while_the_job_waits_or_runs_is_a_miss_at_once(
    platform, submit, api_as
):
    due = (timezone.now() + timedelta(hours=6)).isoformat()
    # Behind a gang holding both H100 nodes (no deadline, so no outcome): it waits through every
    # cycle.
    h100_gang = {"workers": 2, "gpus_per_worker": 8, "gpu_model": "h100-80gb"}
    _running(platform, submit, **h100_gang)
    waiting = Job.objects.get(pk=submit(platform["alice"], deadline=due, **h100_gang).json()["id"])
    running = _running(platform, submit, deadline=due)
    cancelled_late = _running(platform, submit, deadline=due)
    cancelled_early = _running(platform, submit, deadline=due)
    still_due = _running(platform, submit, deadline=due)
    now = timezone.now()
    passed = now - timedelta(minutes=5)
    Job.objects.filter(pk__in=[waiting.pk, running.pk, cancelled_late.pk]).update(deadline=passed)
    # Cancelled after its deadline had passed: the miss had already happened.
    cancelled_late.refresh_from_db()
    job_finish(job=cancelled_late, target=JobState.CANCELLED, now=now)
    job_finish(job=cancelled_early, target=JobState.CANCELLED, now=now)
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING and waiting.finished_at is None
    body = api_as(platform["alice"]).get("/api/v1/outcomes/").json()
    assert (body["totals"]["deadline_met"], body["totals"]["deadline_missed"]) == (0, 3)
    assert body["deadline_hit_rate"] == 0.0
    today = next(d for d in body["days"] if d["day"] == passed.date().isoformat())
    assert today["deadline_missed"] == 3

    # Once the running one ends late, it is still one miss, on its deadline's day: not two.
    running.refresh_from_db()
    job_finish(job=running, target=JobState.SUCCEEDED, now=timezone.now(), exit_code=0)
    body = api_as(platform["alice"]).get("/api/v1/outcomes/").json()
    assert (body["totals"]["deadline_met"], body["totals"]["deadline_missed"]) == (0, 3)
    # still_due has not reached its deadline: it counts neither way yet.
    assert Job.objects.get(pk=still_due.pk).deadline > timezone.now()
