"""The beat schedule never starves the scheduling cycle of its own lock."""

from gpuplatform.celery import app

# Tasks that take the loop's single-flight lock (scheduler.locks.scheduler_lock).
LOOP_LOCK_TASKS = {"scheduler.tasks.run_cycle", "scheduler.tasks.sync_backends"}


def test_only_the_cycle_takes_the_loops_lock_on_the_beat():
    # A "backend sync" entry of the cycle's period was sent a few milliseconds before each cycle
    # and held the lock through it: a real worker skipped 14 of its first 15 cycles, and once no
    # job started for a whole minute (CI, stop 28).
    app.loader.import_default_modules()
    app.finalize()
    on_beat = [entry["task"] for entry in app.conf.beat_schedule.values()]
    assert [task for task in on_beat if task in LOOP_LOCK_TASKS] == ["scheduler.tasks.run_cycle"]
