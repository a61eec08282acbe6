"""Checkpoint advice from the platform's own history: the interruption rate of a pool from
requeues per running hour, the checkpoint cost measured from request to report, the advised
interval in the job's environment and on its page, the submit form's table, and checkpoints the
platform asks for on the advised schedule (on the simulated backend)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from scheduler import checkpoint_advice
from scheduler.checkpoint_interval import daly_interval_s
from scheduler.loop.cycle import run_cycle
from scheduler.loop.enforce import job_spec, reconcile
from scheduler.models import Allocation, Job, JobEvent, SimulatedRun
from scheduler.selectors import job_placement
from scheduler.transitions import event_record, job_requeue

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_rates():
    cache.delete(checkpoint_advice._CACHE_KEY)
    yield
    cache.delete(checkpoint_advice._CACHE_KEY)


def _running(platform, submit, **fields):
    body = {"gpu_model": "h100-80gb", "simulated_duration_s": 1_000_000}
    body.update(fields)
    response = submit(platform["alice"], **body)
    assert response.status_code == 201, response.json()
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == "running"
    return job


def _history(platform, submit, hours: float = 30, interruptions: int = 1):
    """A vision job that ran ``hours`` on H100 on-demand and was interrupted."""
    now = timezone.now()
    job = _running(platform, submit, name="history")
    for _ in range(interruptions):
        Allocation.objects.filter(job=job, ended_at__isnull=True).update(
            started_at=now - timedelta(hours=hours / interruptions)
        )
        Job.objects.filter(pk=job.pk).update(started_at=now - timedelta(hours=hours))
        assert job_requeue(job=job, now=now, reason="node failure (test)")
        run_cycle()
    # Rates are cached for a few minutes; the cycles above cached the empty history.
    cache.delete(checkpoint_advice._CACHE_KEY)
    return job


def test_advice_from_observed_interruptions_and_default_cost(platform, submit, client):
    _history(platform, submit, hours=30)
    job = _running(platform, submit, name="new", checkpoint_interval_s=4 * 3600)
    found = checkpoint_advice.job_advice(job, now=timezone.now())
    assert found is not None and found.rate.scope == "team"
    assert found.rate.interruptions == 1 and found.rate.run_hours == pytest.approx(30, abs=0.1)
    # One interruption per 30 h (108,000 s), a 60 s checkpoint: Daly's 3560 s, by hand.
    expected = daly_interval_s(60, 108_000)
    assert expected == pytest.approx(3560.1, abs=0.1)
    assert found.advice.advised_interval_s == pytest.approx(expected, rel=0.01)
    assert found.cost_source.startswith("default")
    assert 0 < found.advice.saving < 1
    # The job page says it in a sentence.
    client.force_login(platform["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "You checkpoint every 4.0 h" in page and "would lose" in page
    assert "GPUPLATFORM_CHECKPOINT_ADVICE_S=" in page


def test_the_run_gets_the_advice_in_its_environment(platform, submit):
    _history(platform, submit)
    job = _running(platform, submit, name="env")
    env = job_spec(job, job_placement(job)).env
    assert abs(int(env["GPUPLATFORM_CHECKPOINT_ADVICE_S"]) - 3560) <= 40
    # A job setting the variable itself keeps its own value.
    own = _running(platform, submit, name="own", env={"GPUPLATFORM_CHECKPOINT_ADVICE_S": "7"})
    assert job_spec(own, job_placement(own)).env["GPUPLATFORM_CHECKPOINT_ADVICE_S"] == "7"


def test_no_history_no_advice(platform, submit, client):
    job = _running(platform, submit)
    assert checkpoint_advice.job_advice(job, now=timezone.now()) is None
    assert "GPUPLATFORM_CHECKPOINT_ADVICE_S" not in job_spec(job, job_placement(job)).env
    client.force_login(platform["alice"])
    assert "No interruption observed" in client.get("/jobs/new/").content.decode()


def test_checkpoint_cost_is_measured_from_request_to_report(platform, submit):
    job = _running(platform, submit)
    now = timezone.now()
    event_record(job=job, kind="checkpoint_requested", time=now - timedelta(seconds=300))
    event_record(job=job, kind="checkpoint", time=now - timedelta(seconds=210))
    assert checkpoint_advice.checkpoint_cost(job, now=now) == (90.0, "measured on this job")
    other = _running(platform, submit, name="sibling")
    assert checkpoint_advice.checkpoint_cost(other, now=now) == (
        90.0,
        "measured on the team's jobs",
    )


def test_submit_form_shows_the_pools_advice_only_for_own_teams(platform, submit, client):
    _history(platform, submit)
    client.force_login(platform["alice"])
    page = client.get("/jobs/new/").content.decode()
    assert 'id="pool-advice"' in page and "h100-80gb" in page and "59 min" in page
    client.force_login(platform["bob"])  # nlp has no history of its own and sees no vision row
    assert "No interruption observed" in client.get("/jobs/new/").content.decode()


def test_platform_asks_opted_in_jobs_to_checkpoint_on_schedule(platform, submit):
    _history(platform, submit)
    eager = _running(platform, submit, name="eager", checkpoint_on_advice=True)
    plain = _running(platform, submit, name="plain")
    now = timezone.now()
    reconcile(now=now)  # just started: not due yet
    assert not JobEvent.objects.filter(kind="checkpoint_requested").exists()
    later = now + timedelta(hours=1, minutes=1)
    reconcile(now=later)
    asked = JobEvent.objects.filter(kind="checkpoint_requested")
    assert [e.job_id for e in asked] == [eager.pk]
    run = SimulatedRun.objects.get(job_id__endswith=str(eager.pk), attempt=eager.attempts)
    assert run.checkpoint_requested_at is not None
    assert not SimulatedRun.objects.get(
        job_id__endswith=str(plain.pk), attempt=plain.attempts
    ).checkpoint_requested_at
    reconcile(now=later + timedelta(minutes=5))  # asked already: not again until the next interval
    assert JobEvent.objects.filter(kind="checkpoint_requested").count() == 1
