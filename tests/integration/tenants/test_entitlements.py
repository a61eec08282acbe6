"""Entitlements and pending caps (issue 26, findings 3 and 6): which priority classes a team may
use and whether it may opt out of preemption are part of its quota settings, set by platform
admins and enforced at submission with a 400 naming the field; a team and each of its
submitters hold at most so many pending jobs (arrays count by size)."""

from __future__ import annotations

import pytest
from django.test import Client

from core.errors import FieldErrors
from scheduler.models import Job, JobArray
from tenants import entitlements as entitlement_services
from tenants.models import AuditEntry, PriorityClass, TeamEntitlements

pytestmark = pytest.mark.django_db


@pytest.fixture
def restricted_production(priorities, platform_admin):
    """The recommended set-up: the class that preempts others is restricted."""
    entitlement_services.priority_class_set(
        user=platform_admin,
        name="production",
        value=1000,
        preemptible_by_default=False,
        restricted=True,
    )
    return PriorityClass.objects.get(name="production")


def _grant(admin, team, classes=(), opt_out=False, **caps):
    return entitlement_services.entitlements_set(
        user=admin,
        team=team,
        priority_classes=list(classes),
        may_opt_out_of_preemption=opt_out,
        **caps,
    )


def test_a_member_cannot_take_a_restricted_class_until_the_team_is_granted_it(
    platform, teams, submit, restricted_production
):
    alice, admin = platform["alice"], platform["admin"]
    refused = submit(alice, priority_class="production", preemptible=False)
    assert refused.status_code == 400
    assert "restricted priority class 'production'" in refused.json()["priority_class"][0]
    assert not Job.objects.exists()
    # A grant to the parent team reaches its sub-teams.
    _grant(admin, teams["research"], ["production"])
    accepted = submit(alice, priority_class="production", preemptible=False)
    assert accepted.status_code == 201, accepted.content
    assert Job.objects.get().preemptible is False  # the class's default; no opt-out needed
    # nlp is a sub-team of research too: the grant covers it.
    assert submit(platform["bob"], team="nlp", priority_class="production").status_code == 201


def test_opting_out_of_preemption_needs_the_teams_permission(platform, teams, submit):
    alice, admin = platform["alice"], platform["admin"]
    refused = submit(alice, priority_class="research", preemptible=False)
    assert refused.status_code == 400 and "preemptible" in refused.json()
    assert submit(alice, priority_class="research", preemptible=True).status_code == 201
    assert submit(alice, priority_class="research").status_code == 201
    _grant(admin, teams["vision"], opt_out=True)
    assert submit(alice, priority_class="research", preemptible=False).status_code == 201
    # nlp was not given the opt-out.
    assert submit(platform["bob"], team="nlp", preemptible=False).status_code == 400


def test_platform_admins_are_not_held_by_a_teams_entitlements(
    platform, submit, restricted_production
):
    response = submit(platform["admin"], priority_class="production", preemptible=False)
    assert response.status_code == 201


def test_arrays_and_the_portal_form_follow_the_same_rules(platform, api_as, restricted_production):
    api = api_as(platform["alice"])
    body = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1, "priority_class": "research"},
        "items": [{}, {}, {"preemptible": False}],
    }
    response = api.post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400 and "items[2].preemptible" in response.json()
    body["template"]["priority_class"] = "production"
    body["items"] = [{}, {}]
    response = api.post("/api/v1/job-arrays/", body, format="json")
    assert response.status_code == 400 and "template.priority_class" in response.json()
    portal = Client()
    portal.force_login(platform["alice"])
    page = portal.post(
        "/jobs/new/",
        {
            "name": "x",
            "team": "vision",
            "workers": "1",
            "gpus_per_worker": "1",
            "priority_class": "production",
        },
    )
    assert page.status_code == 400 and "restricted priority class" in page.content.decode()
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_entitlements_api_members_read_admins_write_other_teams_are_404(
    platform, teams, api_as, restricted_production
):
    alice, bob, admin = platform["alice"], platform["bob"], platform["admin"]
    body = {
        "priority_classes": ["production"],
        "may_opt_out_of_preemption": True,
        "max_pending_jobs": 50,
        "max_pending_jobs_per_user": None,
    }
    assert (
        api_as(alice).put("/api/v1/teams/vision/entitlements/", body, format="json").status_code
        == 403
    )
    assert api_as(bob).get("/api/v1/teams/vision/entitlements/").status_code == 404
    saved = api_as(admin).put("/api/v1/teams/vision/entitlements/", body, format="json")
    assert saved.status_code == 200, saved.content
    shown = api_as(alice).get("/api/v1/teams/vision/entitlements/").json()
    assert shown["effective"] == {
        "granted_classes": ["production"],
        "may_opt_out_of_preemption": True,
        "max_pending_jobs": 50,
        "max_pending_jobs_per_user": 10_000,
    }
    entry = AuditEntry.objects.get(action="entitlements.set")
    assert entry.after["priority_classes"] == ["production"] and entry.team == teams["vision"]
    for bad, field in (
        ({**body, "priority_classes": ["vip"]}, "priority_classes"),
        ({**body, "max_pending_jobs": 2**63}, "max_pending_jobs"),
        ({**body, "max_pending_jobs": -1}, "max_pending_jobs"),
    ):
        refused = api_as(admin).put("/api/v1/teams/vision/entitlements/", bad, format="json")
        assert refused.status_code == 400 and field in refused.json(), refused.content
    assert TeamEntitlements.objects.get(team=teams["vision"]).max_pending_jobs == 50


def test_admins_edit_quota_settings_in_the_portal_and_members_see_them(
    platform, teams, restricted_production
):
    admin = Client()
    admin.force_login(platform["admin"])
    form = admin.get("/teams/manage/?entitlements=vision")
    assert form.status_code == 200 and 'name="may_opt_out_of_preemption"' in form.content.decode()
    saved = admin.post(
        "/teams/manage/entitlements/",
        {
            "team": "vision",
            "priority_classes": ["production"],
            "may_opt_out_of_preemption": "on",
            "max_pending_jobs": "100",
            "max_pending_jobs_per_user": "",
        },
    )
    assert saved.status_code == 302
    row = TeamEntitlements.objects.get(team=teams["vision"])
    assert list(row.priority_classes.values_list("name", flat=True)) == ["production"]
    assert row.may_opt_out_of_preemption and row.max_pending_jobs == 100
    bad = admin.post(
        "/teams/manage/entitlements/", {"team": "vision", "max_pending_jobs": str(2**63)}
    )
    assert bad.status_code == 400
    member = Client()
    member.force_login(platform["alice"])
    page = member.get("/teams/team/vision/").content.decode()
    assert "Quota settings" in page and "production" in page and "100 for the team" in page
    assert member.post("/teams/manage/entitlements/", {"team": "vision"}).status_code == 403


def test_pending_caps_per_user_and_per_team_with_arrays_counted_by_size(
    platform, teams, submit, api_as, settings, vera
):
    settings.JOB_PENDING_MAX_TEAM = 5
    settings.JOB_PENDING_MAX_USER = 3
    alice = platform["alice"]
    for _ in range(3):
        assert submit(alice).status_code == 201
    mine = submit(alice)
    assert mine.status_code == 400 and "per-user cap" in mine.json()["team"][0]
    assert submit(vera).status_code == 201
    array = {
        "name": "sweep",
        "team": "vision",
        "template": {"workers": 1, "gpus_per_worker": 1},
        "count": 2,
    }
    too_big = api_as(vera).post("/api/v1/job-arrays/", array, format="json")
    assert too_big.status_code == 400 and "arrays count by size" in too_big.json()["team"][0]
    assert Job.objects.count() == 4 and not JobArray.objects.exists()
    assert submit(vera).status_code == 201  # the fifth
    assert submit(vera).status_code == 400  # the team's cap
    # Other teams are not held by vision's queue.
    assert submit(platform["bob"], team="nlp").status_code == 201
    # A team's own settings lift (or lower) its caps; jobs that start make room.
    _grant(platform["admin"], teams["vision"], max_pending_jobs=8, max_pending_jobs_per_user=5)
    assert api_as(vera).post("/api/v1/job-arrays/", array, format="json").status_code == 201
    Job.objects.filter(team=teams["vision"], submitter=alice).update(state="running")
    assert submit(alice).status_code == 201


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("second_size", [6, 1], ids=["array", "single"])
def test_concurrent_submissions_cannot_together_pass_the_team_cap(
    platform, teams, settings, vera, second_size
):
    """The cap is 10 and the team holds none. An array of 6 and another of 6 (or an array of 10
    and one job) submitted at the same moment: each counted 0 pending jobs, neither was within
    10 % of the cap on its own, so neither locked the team's row and the team held 12 (or 11).
    The second submission now waits for the first and is refused on ``team``."""
    from core.errors import FieldErrors
    from scheduler.arrays import ArrayRequest, array_submit
    from scheduler.services import JobRequest, job_submit
    from tests.integration.concurrency import race

    settings.JOB_PENDING_MAX_TEAM = 10
    alice = platform["alice"]
    first_size = 10 if second_size == 1 else 6

    def array(user, size):
        template = {"workers": 1, "gpus_per_worker": 1}
        request = ArrayRequest(name="sweep", team="vision", template=template, items=[{}] * size)
        return array_submit(user=user, request=request)

    def second():
        if second_size == 1:
            request = JobRequest(name="one", team="vision", workers=1, gpus_per_worker=1)
            return job_submit(user=alice, request=request)
        return array(alice, second_size)

    outcome = race(lambda: array(vera, first_size), second)
    assert isinstance(outcome, FieldErrors), outcome
    assert "may hold 10" in outcome.errors["team"][0]
    assert Job.objects.filter(team=teams["vision"], state="pending").count() == first_size
    assert JobArray.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first", ["delete", "grant"])
def test_a_grant_racing_the_deletion_of_its_class(platform, teams, restricted_production, first):
    """A platform admin grants a team a priority class while another deletes that class. Each
    saw the class there; whichever committed second failed on the grant's foreign key: an
    IntegrityError, a 500. Now the two take turns: a grant after the deletion is the 400 on
    ``priority_classes`` a grant of an unknown class gets (nothing written), and a deletion
    after the grant deletes the class and the grant with it, as one after the other would."""
    from core.errors import FieldErrors
    from tests.integration.concurrency import race

    admin = platform["admin"]

    def grant():
        return _grant(admin, teams["vision"], ["production"])

    def delete():
        return entitlement_services.priority_class_delete(user=admin, name="production")

    if first == "delete":
        outcome = race(delete, grant)
        assert isinstance(outcome, FieldErrors), repr(outcome)
        assert outcome.status_code == 400
        assert "unknown priority class(es): production" in outcome.errors["priority_classes"][0]
        assert not TeamEntitlements.objects.exists()
        assert not AuditEntry.objects.filter(action="entitlements.set").exists()
    else:
        outcome = race(grant, delete)
        assert outcome is None, repr(outcome)
        assert TeamEntitlements.objects.get(team=teams["vision"]).priority_classes.count() == 0
    assert not PriorityClass.objects.filter(name="production").exists()
    assert AuditEntry.objects.filter(action="priority.delete").count() == 1


@pytest.mark.parametrize("text", ["²", "٣"])
def test_a_cap_in_digits_other_than_ascii_is_refused_naming_it(platform, teams, text):
    """str.isdigit() says yes to both: int() refused "²" with a ValueError and read "٣" as 3."""
    with pytest.raises(FieldErrors) as err:
        _grant(platform["admin"], teams["vision"], max_pending_jobs=text)
    assert list(err.value.errors) == ["max_pending_jobs"]
