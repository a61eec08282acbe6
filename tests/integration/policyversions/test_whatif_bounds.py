"""What bounds a what-if replay: its time bound and a cancel stop it while no job of the replay
finishes (not only at the next finish), and a window holding more than ``WHATIF_MAX_JOBS``
finished jobs is refused up front, naming the window and the count, with nothing written (and
failed by the worker if it grew past the cap after the start), never replayed in part."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from core import streams
from policyversions import whatif_runs
from policyversions.models import WhatIfRun
from policyversions.tasks import run_whatif
from scheduler.models import Cluster, Job
from scheduler.states import JobState
from tenants.models import AuditEntry, PriorityClass, Team

# Every job of the quiet window runs 20 days: the demo cluster's 256 GPUs start 256 of them and
# the rest wait, so the replay makes ~300 engine calls before its first job finishes.
QUIET_JOBS = 300
QUIET_DAYS = 20


@pytest.fixture
def demo(db, settings):
    from demo.seed import seed

    settings.DEBUG = True
    seed(jobs=0, history_days=3)
    return {u.username: u for u in get_user_model().objects.all()}


@pytest.fixture
def quiet_window(demo):
    """(until, days) of a one-day window, before the demo's seeded history, of long jobs."""
    return _long_jobs(demo, QUIET_JOBS)


# More jobs than the export reads between two looks at the bound and the cancel flag (500).
EXPORTED_JOBS = 1_200


@pytest.fixture
def long_export(demo):
    """(until, days) of a one-day window of EXPORTED_JOBS long jobs."""
    return _long_jobs(demo, EXPORTED_JOBS)


def _long_jobs(demo, count: int):
    until = timezone.now() - timedelta(days=5)
    since = until - timedelta(days=1)
    team = Team.objects.get(slug="vision")
    research = PriorityClass.objects.get(name="research")
    cluster = Cluster.objects.get(name="demo")
    Job.objects.bulk_create(
        Job(
            team=team,
            submitter=demo["alice"],
            name=f"long-{k}",
            workers=1,
            gpus_per_worker=1,
            priority_class=research,
            preemptible=False,
            cluster=cluster,
            state=JobState.SUCCEEDED,
            submitted_at=since + timedelta(seconds=k * 60 * QUIET_JOBS / count),
            started_at=since + timedelta(seconds=k * 60 * QUIET_JOBS / count),
            finished_at=since + timedelta(seconds=k * 60 * QUIET_JOBS / count, days=QUIET_DAYS),
            attempts=1,
        )
        for k in range(count)
    )
    return until, 1


def _start(demo, until, days):
    return whatif_runs.whatif_run_start(
        user=demo["admin"], window_days=days, until=until, candidates={"a": {"queue_aging_s": 600}}
    )


@pytest.mark.django_db(transaction=True)
def test_a_replay_where_no_job_finishes_stops_at_its_bound(demo, quiet_window, settings):
    """The bound was read only when a job of the replay finished: a replay whose jobs all run
    for weeks ran every arrival (here 300 engine calls; on a real history hours) before it was
    looked at. Now it stops at the simulator's first call-back, before any job finished."""
    settings.WHATIF_MAX_RUNTIME_SECONDS = 1e-9
    run = _start(demo, *quiet_window)
    run_whatif(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert "WHATIF_MAX_RUNTIME_SECONDS" in run.error
    assert f"(gpuplatform: 0 of {QUIET_JOBS:,} jobs finished)" in run.error, run.error
    assert run.results == {} and run.details == {}
    again = whatif_runs.whatif_run_start(user=demo["admin"], window_days=1, candidates={"a": {}})
    assert again.status == "queued"


@pytest.mark.django_db(transaction=True)
def test_the_export_before_the_replay_stops_at_the_same_bound(demo, long_export, settings):
    """The bound was first read by the replay: the export of the window's jobs before it (one
    query streamed row by row, for as long as a big window on a busy database takes) ran to its
    end whatever the bound. Now it is read every 500 jobs the export reads, and the run fails
    with the replay's status and message, saying it stopped in the export."""
    settings.WHATIF_MAX_RUNTIME_SECONDS = 1e-9
    run = _start(demo, *long_export)
    run_whatif(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert run.progress_text == "failed"
    assert run.error == (
        "the replay ran longer than WHATIF_MAX_RUNTIME_SECONDS (1e-09 s) and was stopped at "
        "exporting the history (500 jobs read); choose a shorter window or fewer candidates"
    ), run.error
    assert run.results == {} and run.details == {}
    again = whatif_runs.whatif_run_start(user=demo["admin"], window_days=1, candidates={"a": {}})
    assert again.status == "queued"


@pytest.mark.django_db(transaction=True)
def test_a_cancel_stops_the_export_before_the_replay(demo, long_export):
    """A cancel asked for as the worker claims the run was first read by the replay, after the
    whole export; now the export reads it too."""
    run = _start(demo, *long_export)
    _cancel_when_claimed(demo, run)
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None
    assert run.progress_text == (
        "cancelled; the replay was stopped at exporting the history (500 jobs read)"
    ), run.progress_text
    assert run.results == {} and run.error == ""


def _cancel_when_claimed(demo, run) -> None:
    asked: list[int] = []

    def cancel_when_claimed(batch):
        for _, payload in batch:
            if payload.get("run") == run.pk and payload.get("status") == "running" and not asked:
                asked.append(run.pk)
                whatif_runs.whatif_run_cancel(user=demo["admin"], run_id=run.pk)

    streams.subscribe(cancel_when_claimed)
    try:
        run_whatif(run.pk)
    finally:
        streams._listeners.remove(cancel_when_claimed)


@pytest.mark.django_db(transaction=True)
def test_a_replay_where_no_job_finishes_stops_on_cancel(demo, quiet_window):
    """A cancel was read only at a percent of finished jobs: it waited for the replay's first
    finish (weeks of simulated time away here). Asked for as the worker claims the run, it now
    stops the replay before any job finished."""
    run = _start(demo, *quiet_window)
    _cancel_when_claimed(demo, run)
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None
    assert run.progress_text.startswith("cancelled; the replay was stopped at")
    assert f"(gpuplatform: 0 of {QUIET_JOBS:,} jobs finished)" in run.progress_text
    assert run.results == {} and run.error == ""


@pytest.mark.django_db
def test_a_window_over_the_job_cap_is_refused_naming_the_window_and_the_count(
    demo, api_as, settings
):
    settings.WHATIF_MAX_JOBS = 10
    now = timezone.now()
    finished = Job.objects.filter(
        cluster__name="demo",
        submitted_at__gte=now - timedelta(days=2),
        state__in=["succeeded", "failed", "cancelled"],
        started_at__isnull=False,
        finished_at__isnull=False,
    ).count()
    assert finished > 10
    response = api_as(demo["admin"]).post(
        "/api/v1/policy/whatif", {"window_days": 2, "candidates": {"c": {}}}, format="json"
    )
    assert response.status_code == 400, response.content
    problems = response.json()
    assert list(problems) == ["window_days"], problems
    message = problems["window_days"][0]
    assert message.startswith("the 2 days from ")
    assert "WHATIF_MAX_JOBS: 10" in message and "cluster demo" in message
    # the count, as a replay would load it (the export's jobs: those that ran and ended)
    assert f" hold {finished:,} finished jobs of cluster demo" in message, message
    assert not WhatIfRun.objects.exists()
    assert not AuditEntry.objects.filter(action="policy.whatif").exists()
    # Under the cap the same window is taken.
    settings.WHATIF_MAX_JOBS = 1_000_000
    response = api_as(demo["admin"]).post(
        "/api/v1/policy/whatif", {"window_days": 2, "candidates": {"c": {}}}, format="json"
    )
    assert response.status_code == 201, response.content


@pytest.mark.django_db(transaction=True)
def test_a_window_that_grew_past_the_cap_after_the_start_fails_without_a_replay(
    demo, quiet_window, settings
):
    run = _start(demo, *quiet_window)
    settings.WHATIF_MAX_JOBS = QUIET_JOBS - 1
    run_whatif(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and run.results == {}
    assert run.error.startswith("window: the 1 day from "), run.error
    assert f"hold {QUIET_JOBS} finished jobs of cluster demo" in run.error
    assert f"(WHATIF_MAX_JOBS: {QUIET_JOBS - 1})" in run.error
