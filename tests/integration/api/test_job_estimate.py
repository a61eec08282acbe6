"""``POST /api/v1/jobs/estimate/``: the submit form's finish estimate for the API and gpuctl.
Same checks as a submission, nothing written."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Job

pytestmark = pytest.mark.django_db


def estimate(api_as, user, **fields):
    body = {"name": "train", "team": "vision", "workers": 1, "gpus_per_worker": 1}
    body.update(fields)
    return api_as(user).post("/api/v1/jobs/estimate/", body, format="json")


def test_a_job_that_fits_starts_now_and_makes_its_deadline(platform, api_as):
    due = timezone.now() + timedelta(hours=3)
    response = estimate(api_as, platform["alice"], runtime_limit_s=3600, deadline=due.isoformat())
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["starts_now"] is True and body["meets_deadline"] is True
    assert (body["runtime_s"], body["runtime_source"]) == (3600.0, "your runtime limit")
    assert not Job.objects.exists()


def test_a_job_that_cannot_make_its_deadline_is_told_before_it_exists(platform, api_as):
    due = timezone.now() + timedelta(hours=1)
    response = estimate(
        api_as, platform["alice"], runtime_limit_s=3 * 3600, deadline=due.isoformat()
    )
    assert response.status_code == 200
    assert response.json()["meets_deadline"] is False
    assert not Job.objects.exists()


def test_bad_input_is_the_submissions_400(platform, api_as):
    response = estimate(api_as, platform["alice"], gpus_per_worker=0)
    assert response.status_code == 400
    assert "gpus_per_worker" in response.json()
    other_team = estimate(api_as, platform["alice"], team="nosuch")
    assert other_team.status_code == 400
    assert other_team.json()["team"] == ["you are not a member of a team 'nosuch'"]
    assert estimate(api_as, None).status_code in (401, 403)


CENTURY_S = 3_153_600_000  # the codec's largest duration (scheduler/policy/fields.py)


def test_the_longest_default_run_time_gives_a_finish_in_the_calendar(platform, api_as, settings):
    # Before the codec bounded durations, any finite default_runtime_s was a valid policy: a job
    # with no limit and no history finished past the year 9999 and the estimate raised
    # OverflowError (a 500 for every user). The largest the codec now takes stays in the
    # calendar; the estimate still says "unknown" for a finish past it (a guard kept).
    settings.SCHEDULER_POLICY = {"default_runtime_s": CENTURY_S}
    due = timezone.now() + timedelta(hours=3)
    response = estimate(api_as, platform["alice"], deadline=due.isoformat())
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["runtime_s"], body["runtime_source"]) == (CENTURY_S, "the default")
    assert body["starts_now"] is True and body["start"] is not None
    assert body["finish"] is not None and body["meets_deadline"] is False


def test_a_start_after_the_longest_grace_is_a_date(platform, api_as, submit, settings):
    # A grace of 1e300 s (then valid: never force-stop a victim) put a job that must preempt at
    # the end of that grace, and turning the engine's start into a date raised (a 500). A
    # century, the longest grace the codec takes now, is a date.
    from scheduler.loop.cycle import run_cycle

    settings.SCHEDULER_POLICY = {"preemption_grace_s": CENTURY_S}
    for _ in range(2):
        filler = submit(
            platform["bob"],
            team="nlp",
            gpus_per_worker=8,
            gpu_model="h100-80gb",
            priority_class="best-effort",
        )
        assert filler.status_code == 201, filler.content
    run_cycle(now=timezone.now())
    assert Job.objects.filter(state="running").count() == 2
    response = estimate(
        api_as,
        platform["alice"],
        gpus_per_worker=8,
        priority_class="production",
        gpu_model="h100-80gb",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["starts_now"] is False
    assert body["start"] is not None


def _succeeded(team_slug: str, username: str, n: int, *, name: str, run_s: float) -> None:
    from django.contrib.auth import get_user_model

    from tenants.models import PriorityClass, Team

    end = timezone.now() - timedelta(hours=1)
    Job.objects.bulk_create(
        Job(
            team=Team.objects.get(slug=team_slug),
            submitter=get_user_model().objects.get(username=username),
            name=f"{name}-{i}",
            workers=1,
            gpus_per_worker=1,
            priority_class=PriorityClass.objects.get(name="research"),
            state="succeeded",
            submitted_at=end - timedelta(seconds=run_s + 60),
            started_at=end - timedelta(seconds=run_s),
            finished_at=end,
        )
        for i in range(n)
    )


def test_another_teams_runs_of_a_name_do_not_show_in_the_estimate(platform, api_as):
    # nlp's history of a job name must not reach vision's estimate: with names pooled across
    # teams, alice's estimate of "llama-70b-secret-7" was nlp's two-day median for that name,
    # which told her nlp runs such a job and for how long.
    from scheduler import runtime_prediction

    _succeeded("vision", "alice", 25, name="train", run_s=600)
    runtime_prediction.reset()
    alone = estimate(api_as, platform["alice"], name="llama-70b-secret-7").json()
    assert alone["runtime_source"] == "similar past jobs"

    _succeeded("nlp", "bob", 30, name="llama-70b-secret", run_s=2 * 86400)
    runtime_prediction.reset()
    pooled = estimate(api_as, platform["alice"], name="llama-70b-secret-7").json()
    assert pooled["runtime_s"] == pytest.approx(alone["runtime_s"], rel=0.05)
    assert pooled["runtime_s"] < 3600

    # nlp's own estimate of the name learns from nlp's runs of it.
    theirs = estimate(api_as, platform["bob"], team="nlp", name="llama-70b-secret-7").json()
    assert theirs["runtime_s"] > 86400
