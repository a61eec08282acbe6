"""Deadlines end to end: a submitted deadline is stored, shown, handed to the engine, and a job
that will miss it says so in its why."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job
from scheduler.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


def test_deadline_is_stored_shown_and_handed_to_the_engine(platform, submit):
    due = (timezone.now() + timedelta(hours=6)).replace(microsecond=0)
    response = submit(platform["alice"], name="due", deadline=due.isoformat())
    assert response.status_code == 201, response.json()
    assert response.json()["deadline"].startswith(due.strftime("%Y-%m-%dT%H:%M:%S"))
    snapshot, _ = build_snapshot(now=timezone.now())
    (pending,) = snapshot.pending
    assert pending.deadline == due.timestamp()


def test_a_job_that_cannot_make_its_deadline_says_so(platform, submit):
    # Needs 3 h, due in 1 h, behind a gang holding both H100 nodes: it finishes late.
    due = timezone.now() + timedelta(hours=1)
    h100_gang = {"gpus_per_worker": 8, "workers": 2, "gpu_model": "h100-80gb"}
    submit(platform["alice"], name="first", runtime_limit_s=2 * 3600, **h100_gang)
    job_id = submit(
        platform["alice"],
        name="late",
        runtime_limit_s=3 * 3600,
        deadline=due.isoformat(),
        **h100_gang,
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == "pending"
    assert job.why_pending.startswith("will miss its deadline: expected to finish")
    # the timeline hears it once, not every cycle
    run_cycle()
    risks = list(job.events.filter(kind="deadline_at_risk").values_list("message", flat=True))
    assert len(risks) == 1 and risks[0].startswith("will miss its deadline: expected to finish")


def test_a_job_that_starts_at_once_but_will_finish_late_says_so_as_it_starts(platform, submit):
    # Room for it now, but 3 h of run time against a deadline 1 h away: it never waits, so its
    # why never speaks; the timeline does, at the start.
    due = timezone.now() + timedelta(hours=1)
    late = submit(
        platform["alice"], name="late", runtime_limit_s=3 * 3600, deadline=due.isoformat()
    ).json()["id"]
    fine = submit(
        platform["alice"], name="fine", runtime_limit_s=1800, deadline=due.isoformat()
    ).json()["id"]
    run_cycle()
    late_job, fine_job = Job.objects.get(pk=late), Job.objects.get(pk=fine)
    assert late_job.state == fine_job.state == "running"
    risks = list(late_job.events.filter(kind="deadline_at_risk").values_list("message", flat=True))
    assert risks == ["will miss its deadline: expected to finish 2 h after it"]
    assert not fine_job.events.filter(kind="deadline_at_risk").exists()
    run_cycle()
    assert late_job.events.filter(kind="deadline_at_risk").count() == 1


def test_the_job_page_says_missed_once_the_deadline_passes_while_it_waits(platform, submit, client):
    due = timezone.now() + timedelta(hours=6)
    job_id = submit(
        platform["alice"], name="big", workers=2, gpus_per_worker=8, deadline=due.isoformat()
    ).json()["id"]
    client.force_login(platform["alice"])
    assert "missed" not in client.get(f"/jobs/{job_id}/").content.decode()
    Job.objects.filter(pk=job_id).update(deadline=timezone.now() - timedelta(minutes=1))
    page = client.get(f"/jobs/{job_id}/").content.decode()
    assert '<span data-field="deadline-missed">missed: not finished by then</span>' in page
