"""The beat schedule never starves the scheduling cycle of its own lock."""

from django.conf import settings

from gpuplatform.celery import app


def test_only_the_cycle_takes_the_loops_lock_on_the_beat():
    # A "backend sync" entry of the cycle's period was sent a few milliseconds before each cycle
    # and held the lock through it: a real worker skipped 14 of its first 15 cycles, and once no
    # job started for a whole minute (CI, stop 28).
    app.loader.import_default_modules()
    app.finalize()
    on_beat = sorted(entry["task"] for entry in app.conf.beat_schedule.values())
    # The cycle once, and otherwise only the housekeeping tasks, which take locks of their own.
    housekeeping = [name for name, _every in settings.PERIODIC_TASKS]
    assert on_beat == sorted(["scheduler.tasks.run_cycle", *housekeeping])
