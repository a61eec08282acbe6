"""A parent team's cost dashboard covers its sub-teams' spend (docs/billing.md), but membership,
not the team tree, decides whose jobs and people a user sees (docs/tenancy.md): the parent's
owner or viewer reads every sub-team's amounts, and a sub-team they are not a member of shows no
job name, job id, attempt or submitter, on the page, in its chart, and in the cost API. A member
of the sub-team too, and platform admins, see them as before.

Tree of the fixtures: research -> vision (alice), nlp (bob)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from billing import dashboards, meter
from tests.integration.roles import make_user

from .conftest import utc

pytestmark = pytest.mark.django_db

DEC = utc(2026, 12, 1).date()
DEC_3 = utc(2026, 12, 3)
SECRETS = ("nlp-secret-run", "vision-secret-run", "bob", "alice")


@pytest.fixture
def december(c4, clouds, make_job, allocate, price, bob, teams):
    """$2/GPU-h. vision: alice's run, 10 GPU-h on the cloud ($20 + $16 egress). nlp: bob's run,
    5 GPU-h on the cloud ($10 + $16 egress). research itself runs nothing."""
    price("h100", "on_demand", "2.00", utc(2026, 1, 1))
    vision = make_job(name="vision-secret-run", dataset="c4")
    allocate(vision, "c1", 0, utc(2026, 12, 1, 0), utc(2026, 12, 1, 10))
    nlp = make_job(team="nlp", user=bob, name="nlp-secret-run", dataset="c4")
    allocate(nlp, "c1", 1, utc(2026, 12, 1, 0), utc(2026, 12, 1, 5))
    meter.meter_run(now=DEC_3)
    return {"vision": vision, "nlp": nlp}


def _views(user) -> dict[str, str]:
    client = Client()
    client.force_login(user)
    page = client.get("/billing/teams/research/?month=2026-12")
    api = client.get("/api/v1/billing/costs/?team=research&month=2026-12")
    assert page.status_code == api.status_code == 200
    return {"page": page.content.decode(), "api": api.content.decode()}


def test_a_parent_teams_owner_and_viewer_see_sub_team_amounts_not_their_jobs_or_people(
    december, teams
):
    owner = make_user("rhea", teams["research"], "owner")
    viewer = make_user("rita", teams["research"], "viewer")
    for user in (owner, viewer):
        for where, text in _views(user).items():
            for secret in SECRETS:
                assert secret not in text, (user.username, where, secret)
        d = dashboards.team_cost_dashboard(user=user, team_slug="research", month=DEC, now=DEC_3)
        # Every amount is still there: the parent's spend covers its sub-teams.
        assert d.budget.spend == Decimal("62.00")
        assert [(j.job_id, j.name, j.team, j.user) for j in d.top_jobs] == [
            (None, "a job of team vision (#1 by cost)", "vision", ""),
            (None, "a job of team nlp (#2 by cost)", "nlp", ""),
        ]
        assert [(u, round(h, 3), c) for u, h, c in d.by_user] == [
            ("(team vision)", 10.0, Decimal("20.00")),
            ("(team nlp)", 5.0, Decimal("10.00")),
        ]
        assert {(e.job_id, e.attempt, e.team, e.cost) for e in d.egress} == {
            (None, None, "vision", Decimal("16.00")),
            (None, None, "nlp", Decimal("16.00")),
        }
    body = Client()
    body.force_login(owner)
    api = body.get("/api/v1/billing/costs/?team=research&month=2026-12").json()
    assert {c["job"] for c in api["egress"]["charges"]} == {None}
    assert {j["job"] for j in api["top_jobs"]} == {None}


def test_a_member_of_the_sub_team_too_sees_its_jobs_and_only_its(december, teams, bob):
    dora = make_user("dora", teams["research"], "owner")
    teams["nlp"].memberships.create(user=dora, role="viewer")
    d = dashboards.team_cost_dashboard(user=dora, team_slug="research", month=DEC, now=DEC_3)
    shown = {j.team: (j.job_id, j.name, j.user) for j in d.top_jobs}
    assert shown["nlp"] == (december["nlp"].pk, "nlp-secret-run", "bob")
    assert shown["vision"][0] is None and shown["vision"][2] == ""
    assert [u for u, _, _ in d.by_user] == ["(team vision)", "bob"]
    # Her own team's dashboard is what it always was.
    nlp = dashboards.team_cost_dashboard(user=bob, team_slug="nlp", month=DEC, now=DEC_3)
    assert [(j.name, j.user) for j in nlp.top_jobs] == [("nlp-secret-run", "bob")]


def test_platform_admins_see_every_job_and_person(december, platform_admin):
    for d in (
        dashboards.team_cost_dashboard(
            user=platform_admin, team_slug="research", month=DEC, now=DEC_3
        ),
        dashboards.admin_cost_overview(user=platform_admin, month=DEC, now=DEC_3).dashboard,
    ):
        assert {j.name for j in d.top_jobs} == {"vision-secret-run", "nlp-secret-run"}
        assert {u for u, _, _ in d.by_user} == {"alice", "bob"}
        assert None not in {e.job_id for e in d.egress}


def test_a_statement_list_naming_another_team_is_a_404_on_the_page_as_in_the_api(
    december, alice, teams
):
    """``?team=`` naming a team the caller does not see: the API said 404 and the page said
    "Statements of nlp: none yet"; both are a 404 now, the same whether the team exists."""
    client = Client()
    client.force_login(alice)
    for team in ("nlp", "research", "no-such-team"):
        assert client.get(f"/billing/statements/?team={team}").status_code == 404, team
        assert client.get(f"/api/v1/billing/statements/?team={team}").status_code == 404, team
    page = client.get("/billing/statements/?team=vision")
    api = client.get("/api/v1/billing/statements/?team=vision")
    assert page.status_code == api.status_code == 200
    # The meter opened December's statements of vision and of its tree.
    assert [s["team"] for s in api.json()["results"]] == ["vision"]
    assert ">nlp<" not in page.content.decode()
