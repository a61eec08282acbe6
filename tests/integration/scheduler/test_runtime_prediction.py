"""The loop plans a job without a runtime limit with the run time predicted from the team's and
user's finished jobs, and keeps the user's limit where there is one."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Job
from scheduler.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


def _finished(platform, n: int, *, name: str, run_s: float) -> None:
    end = timezone.now() - timedelta(hours=1)
    vision = platform["alice"].memberships.get().team
    research = Job._meta.get_field("priority_class").related_model.objects.get(name="research")
    Job.objects.bulk_create(
        Job(
            team=vision,
            submitter=platform["alice"],
            name=f"{name}-{i}",
            image="pytorch:24.05",
            workers=1,
            gpus_per_worker=4,
            priority_class=research,
            state="succeeded",
            submitted_at=end - timedelta(seconds=run_s + 60),
            started_at=end - timedelta(seconds=run_s),
            finished_at=end,
        )
        for i in range(n)
    )


def test_pending_job_without_limit_is_planned_with_its_predicted_run_time(platform, submit):
    _finished(platform, 30, name="pretrain", run_s=5 * 3600)
    unlimited = submit(
        platform["alice"],
        name="pretrain-99",
        image="pytorch:24.05",
        gpus_per_worker=4,
        gpu_model="h100-80gb",
    ).json()["id"]
    limited = submit(
        platform["alice"],
        name="pretrain-100",
        image="pytorch:24.05",
        gpus_per_worker=4,
        runtime_limit_s=1800,
    ).json()["id"]
    snapshot, _ = build_snapshot(now=timezone.now())
    estimates = {p.id: p.runtime_estimate_s for p in snapshot.pending}
    assert 2.5 * 3600 <= estimates[str(unlimited)] <= 10 * 3600
    assert estimates[str(limited)] == 1800


def test_without_enough_history_the_engine_keeps_its_default(platform, submit):
    _finished(platform, 5, name="pretrain", run_s=5 * 3600)
    job = submit(platform["alice"], name="pretrain-99").json()["id"]
    snapshot, _ = build_snapshot(now=timezone.now())
    assert {p.id: p.runtime_estimate_s for p in snapshot.pending}[str(job)] is None


def test_jobs_finished_after_the_first_read_are_learned_once(platform, submit):
    from scheduler import runtime_prediction

    _finished(platform, 25, name="eval", run_s=600)
    job = submit(platform["alice"], name="eval-x", gpus_per_worker=4).json()["id"]
    build_snapshot(now=timezone.now())
    learned = runtime_prediction._learner.model.samples
    assert learned == 25
    build_snapshot(now=timezone.now())
    assert runtime_prediction._learner.model.samples == 25
    _finished(platform, 3, name="eval", run_s=600)
    snapshot, _ = build_snapshot(now=timezone.now())
    assert runtime_prediction._learner.model.samples == 28
    assert {p.id for p in snapshot.pending} == {str(job)}


def _succeeded(team, user, n: int, *, name: str, run_s: float) -> None:
    end = timezone.now() - timedelta(hours=1)
    research = Job._meta.get_field("priority_class").related_model.objects.get(name="research")
    Job.objects.bulk_create(
        Job(
            team=team,
            submitter=user,
            name=f"{name}-{i}",
            workers=1,
            gpus_per_worker=1,
            priority_class=research,
            state="succeeded",
            submitted_at=end - timedelta(seconds=run_s + 60),
            started_at=end - timedelta(seconds=run_s),
            finished_at=end,
        )
        for i in range(n)
    )


def test_another_teams_runs_of_a_name_do_not_show_in_a_deadline_warning(platform, submit):
    # The loop's prediction reaches the user: a job that starts with a deadline it will miss is
    # told "expected to finish N after it". Pooled by name, vision's job named like nlp's
    # two-day runs was told it would finish days late: nlp's run time, read through a warning.
    from scheduler.loop.cycle import run_cycle

    alice, bob = platform["alice"], platform["bob"]
    _succeeded(alice.memberships.get().team, alice, 25, name="eval", run_s=600)
    _succeeded(bob.memberships.get().team, bob, 30, name="llama-70b-secret", run_s=2 * 86400)
    due = timezone.now() + timedelta(hours=3)
    job = submit(alice, name="llama-70b-secret-7", deadline=due.isoformat()).json()["id"]
    run_cycle(now=timezone.now())
    started = Job.objects.get(pk=job)
    assert started.state == "running"
    assert not started.events.filter(kind="deadline_at_risk").exists(), list(
        started.events.values_list("message", flat=True)
    )
