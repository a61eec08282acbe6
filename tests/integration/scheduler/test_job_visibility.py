"""Which jobs a caller sees (``Job.objects.visible_to``, behind ``scheduler.selectors.job_list``):
their teams' jobs, every job for a platform admin, none for anyone signed out, whatever form
"signed out" takes (``tenants.permissions.Caller``: an anonymous user, or None where no request
is at hand)."""

import pytest
from django.contrib.auth.models import AnonymousUser

from scheduler.models import Job
from scheduler.selectors import job_list
from scheduler.services import JobRequest, job_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(platform):
    def submit(user, team):
        request = JobRequest(name="train", team=team, workers=1, gpus_per_worker=1)
        return job_submit(user=user, request=request).pk

    return {"vision": submit(platform["alice"], "vision"), "nlp": submit(platform["bob"], "nlp")}


def _ids(user) -> set[int]:
    return set(job_list(user=user).values_list("pk", flat=True))


def test_members_see_their_teams_jobs_and_admins_all(platform, jobs):
    assert _ids(platform["alice"]) == {jobs["vision"]}
    assert _ids(platform["charlie"]) == {jobs["vision"]}  # a viewer of vision
    assert _ids(platform["bob"]) == {jobs["nlp"]}
    assert _ids(platform["admin"]) == set(jobs.values())


@pytest.mark.parametrize("caller", [AnonymousUser(), None], ids=["anonymous", "none"])
def test_a_signed_out_caller_sees_no_job(platform, jobs, caller):
    # As tenants.permissions answers for the same caller (team_ids_of, visible_teams): nothing,
    # rather than an AttributeError on None.
    assert _ids(caller) == set()
    assert not Job.objects.visible_to(caller).exists()
