"""Every periodic task is registered with Celery under the name settings give, and the in-process
loop runs each once when due (and not again before its period)."""

import pytest
from django.conf import settings

from scheduler.loop import inprocess

pytestmark = pytest.mark.django_db


def test_periodic_tasks_exist_and_run_when_due(platform, monkeypatch):
    from celery import current_app

    current_app.loader.import_default_modules()
    calls = []
    for task_name, _every in settings.PERIODIC_TASKS:
        assert task_name in current_app.tasks, task_name
        task = current_app.tasks[task_name]
        monkeypatch.setattr(task, "run", lambda name=task_name: calls.append(name))
    last_run: dict[str, float] = {}
    inprocess._run_due_housekeeping(last_run)
    inprocess._run_due_housekeeping(last_run)
    assert calls == [name for name, _ in settings.PERIODIC_TASKS]


def test_the_real_tasks_run_on_an_empty_platform(platform, caplog):
    inprocess._run_due_housekeeping({})
    failures = [r for r in caplog.records if "periodic task" in r.getMessage()]
    assert failures == [], [r.getMessage() for r in failures]


def test_demo_workload_tops_up_live_jobs_to_its_target(db, settings):
    from demo.seed import demo_workload_tick, seed
    from scheduler.models import Job

    settings.DEBUG = True
    seed(jobs=0)
    assert demo_workload_tick(target_live=2) == 2
    assert Job.objects.filter(state="pending").count() == 2
    assert demo_workload_tick(target_live=2) == 0
    settings.DEBUG = False
    assert demo_workload_tick(target_live=10) == 0


def test_demo_workload_goes_on_when_a_demo_user_may_no_longer_submit(db, settings, caplog):
    """An admin removed alice from vision after the demo was seeded: her submission is refused
    (a field error on ``team``), which raised out of the task on every tick, and bob's jobs
    after it were never submitted. Her refusal is logged and the tick goes on."""
    from demo.seed import demo_workload_tick, seed
    from scheduler.models import Job
    from tenants.models import Membership

    settings.DEBUG = True
    seed(jobs=0)
    Membership.objects.filter(user__username="alice", team__slug="vision").delete()
    assert demo_workload_tick(target_live=3) == 2
    assert set(Job.objects.values_list("submitter__username", flat=True)) == {"bob"}
    assert "alice" in caplog.text and "refused" in caplog.text
