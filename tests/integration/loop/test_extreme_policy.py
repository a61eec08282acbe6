"""A policy version with extreme but valid values (the largest the engine's codec takes) must not
stop the loop: the times the loop derives from them lie far ahead (before durations were bounded
at a century, beyond what ``datetime`` holds), and the loop has to cope with that instead of
raising in every cycle for every team. Real loop, real simulated backend."""

from __future__ import annotations

from datetime import timedelta

import pytest

from policyversions.services import policy_apply
from scheduler.loop.cycle import run_cycle
from scheduler.models import Job, JobEvent
from scheduler.snapshot import build_snapshot
from scheduler.states import JobState
from tests.integration.loop.conftest import fill_with_best_effort

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("fast_simulation", "jobs_outlive_the_test"),
]

CENTURY_S = 3_153_600_000  # the codec's largest duration (scheduler/policy/fields.py)


def test_a_grace_beyond_the_calendar_preempts_instead_of_failing_every_cycle(platform, submit):
    # "Never cut a victim before it checkpoints": the longest grace the codec takes (a century;
    # it took a trillion seconds before durations were bounded).
    policy_apply(
        user=platform["admin"],
        reason="no forced stops",
        engine_config={"preemption_grace_s": CENTURY_S},
    )
    low = fill_with_best_effort(platform, submit)
    assert run_cycle().ran
    high = submit(
        platform["alice"], name="urgent", gpus_per_worker=8, priority_class="production"
    ).json()["id"]
    # Before the fix the apply stage overflowed on now + grace: the cycle raised here, every
    # cycle after it too, and nobody's job was scheduled any more.
    result = run_cycle()
    assert result.ran and len(result.preempted) == 1
    victim = Job.objects.get(pk=result.preempted[0])
    assert victim.pk in low and victim.state == JobState.PREEMPTED
    assert victim.preempt_deadline.year >= 2100  # no forced stop in anyone's working life
    event = JobEvent.objects.get(job=victim, kind="preempted")
    assert event.data["grace_s"] == CENTURY_S
    # The victim checkpoints when asked (the simulated run does at once), is requeued, and the
    # job that needed its GPUs starts. (Events, not states: at this time scale a job's work
    # takes half a second, so on a slow machine both may have moved on by the last cycle.)
    for _ in range(3):
        assert run_cycle().ran
    requeue = JobEvent.objects.get(job=victim, kind="requeued")
    assert requeue.data["reason"] == "preempted" and requeue.data["attempt"] == 1
    assert JobEvent.objects.filter(job_id=high, kind="started").exists()


def test_a_half_life_beyond_the_calendar_counts_usage_without_decay(platform, submit):
    # "Usage never decays", as near as the codec allows: a half-life of a century (it took
    # 1e300 s before durations were bounded, which overflowed the usage horizon).
    policy_apply(
        user=platform["admin"],
        reason="no decay",
        engine_config={"fair_share_half_life_s": CENTURY_S},
    )
    job_id = submit(platform["bob"], team="nlp", name="used", gpus_per_worker=2).json()["id"]
    assert run_cycle().ran  # before the fix: the usage horizon overflowed in every snapshot
    # An hour into the run.
    snapshot, _ = build_snapshot(now=Job.objects.get(pk=job_id).started_at + timedelta(hours=1))
    usage = {t.name: t.usage_gpu_s for t in snapshot.teams}
    # Without decay to speak of, usage is the GPU-seconds run so far (two GPUs for an hour; an
    # hour of a century's half-life takes 8e-7 of it), not zero from a difference of two
    # exponentials both rounded to 1.0.
    assert usage["nlp"] == pytest.approx(2 * 3600, rel=1e-6)
    assert usage["vision"] == 0.0
    other = submit(platform["alice"], name="next").json()["id"]
    assert run_cycle().ran
    assert Job.objects.get(pk=other).state == JobState.RUNNING
