"""The what-if pages: an admin starts a run from the form (queued, never run in the request),
watches its page (progress bar, cancel button), sees the policies side by side with the per-team
table and four charts once it is done, and applies a candidate after seeing the diff. Bad input
comes back on the form as ``field: reason``; a second run of a busy cluster is refused with the
reason."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from policyversions.models import PolicyVersion, WhatIfRun
from policyversions.tasks import run_whatif

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, settings):
    from demo.seed import seed

    settings.DEBUG = True
    seed(jobs=0, history_days=2)
    client.force_login(get_user_model().objects.get(username="admin"))
    return client


def test_an_admin_runs_a_whatif_and_applies_its_candidate(admin_client):
    page = admin_client.get("/policy/")
    assert b'href="/policy/whatif/"' in page.content
    form = admin_client.get("/policy/whatif/")
    assert form.status_code == 200 and form.context["form"]["window_days"].initial == 30
    response = admin_client.post(
        "/policy/whatif/",
        {
            "cluster": "demo",
            "window_days": "2",
            "candidate_name": "patient",
            "candidate_config": '{"queue_aging_s": 86400}',
        },
    )
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/policy/whatif/{run.pk}/"
    assert run.status == "queued"  # the request only queued it
    live = admin_client.get(f"/policy/whatif/{run.pk}/").content.decode()
    assert 'id="whatif-progress"' in live and 'id="whatif-cancel"' in live
    assert "frontend/whatif.js" in live

    run_whatif(run.pk)
    done = admin_client.get(f"/policy/whatif/{run.pk}/")
    html = done.content.decode()
    assert 'id="whatif-progress"' not in html and 'id="whatif-results"' in html
    assert [row.key for row in done.context["rows"]][:3] == [
        "avg_queue_s",
        "p95_queue_s",
        "p99_jct_s",
    ]
    assert done.context["policies"] == ["gpuplatform", "patient"]
    assert {t["team"] for t in done.context["teams"]} >= {"vision", "nlp"}
    assert [f[0] for f in done.context["figures"]] == [
        "whatif-wait",
        "whatif-team-wait",
        "whatif-team-share",
        "whatif-utilization",
    ]
    for _, figure in done.context["figures"]:
        assert len(figure["data"]) >= 2
    listed = admin_client.get("/policy/whatif/").content.decode()
    assert f'href="/policy/whatif/{run.pk}/"' in listed

    confirm = admin_client.get(f"/policy/whatif/{run.pk}/apply/?candidate=patient")
    assert [(r.key, r.after) for r in confirm.context["changes"]] == [("queue_aging_s", 86400)]
    before = PolicyVersion.objects.count()
    applied = admin_client.post(
        f"/policy/whatif/{run.pk}/apply/", {"candidate": "patient", "reason": "fewer starved"}
    )
    newest = PolicyVersion.objects.order_by("-number").first()
    assert (
        applied.status_code == 302 and applied["Location"] == f"/policy/versions/{newest.number}/"
    )
    assert PolicyVersion.objects.count() == before + 1
    assert newest.engine_config == {"queue_aging_s": 86400}
    assert admin_client.get(f"/policy/whatif/{run.pk}/apply/?candidate=nope").status_code == 404


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # The form's own bound now (before the service), in the service's words.
        ({"window_days": "120"}, "must be more than 0 and at most 90 days"),
        (
            {"candidate_config": '{"queue_aging_s": -1}'},
            "candidates.candidate.engine_config.queue_aging_s",
        ),
        ({"weight__nlp": "-2"}, "Ensure this value is greater than or equal to 0"),
        ({"class__research__value": "1.5"}, "Enter a whole number"),
        ({"candidate_config": "{nope"}, "candidate_config: not valid JSON"),
        ({"candidate_name": "gpuplatform2"}, "candidates.gpuplatform2: a name"),
    ],
)
def test_bad_input_comes_back_on_the_form(admin_client, fields, message):
    body = {"cluster": "demo", "window_days": "2", "candidate_config": "{}", **fields}
    response = admin_client.post("/policy/whatif/", body)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not WhatIfRun.objects.exists()


def test_a_second_run_of_a_busy_cluster_is_refused_and_the_first_can_be_cancelled(admin_client):
    body = {"cluster": "demo", "window_days": "2", "candidate_config": "{}"}
    admin_client.post("/policy/whatif/", body)
    first = WhatIfRun.objects.get()
    refused = admin_client.post("/policy/whatif/", body)
    assert refused.status_code == 400
    assert "one replay per cluster at a time" in refused.content.decode()
    assert WhatIfRun.objects.count() == 1
    admin_client.post(f"/policy/whatif/{first.pk}/cancel/")
    first.refresh_from_db()
    assert first.status == "cancelled"
    page = admin_client.get(f"/policy/whatif/{first.pk}/").content.decode()
    assert 'id="whatif-cancelled"' in page and 'id="whatif-cancel"' not in page


def test_a_candidate_edited_in_the_form_carries_its_weights_and_classes(admin_client):
    """The form starts from what the loop reads; what the admin changes is the candidate: a
    team's weight and a class, with the engine configuration in force. The run page shows the
    candidate whole and says which class change a replay cannot show; applying it puts all of
    it in force after the diff."""
    form = admin_client.get("/policy/whatif/").context["form"]
    assert form["weight__nlp"].initial == 1.0 and form["class__research__value"].initial == 500
    response = admin_client.post(
        "/policy/whatif/",
        {
            "cluster": "demo",
            "window_days": "2",
            "candidate_name": "nlp_first",
            "candidate_config": "",
            "weight__nlp": "5",
            "weight__vision": "2",
            "class__research__value": "600",
            "class__research__preemptible_by_default": "on",
            "class__research__restricted": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    run = WhatIfRun.objects.get()
    assert run.candidates == {
        "nlp_first": {
            "team_weights": {"nlp": 5.0},
            "priority_classes": {
                "research": {"value": 600, "preemptible_by_default": True, "restricted": True}
            },
        }
    }
    run_whatif(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    page = admin_client.get(f"/policy/whatif/{run.pk}/")
    html = page.content.decode()
    assert 'data-team-weight="nlp"' in html and "research: 600" in html
    assert page.context["notes"] == [("nlp_first", ["priority_classes.research.restricted"])]
    assert 'data-not-replayed="nlp_first"' in html
    nlp = next(t for t in page.context["teams"] if t["team"] == "nlp")
    assert nlp["policies"][1]["fair_share"] > nlp["policies"][0]["fair_share"]

    confirm = admin_client.get(f"/policy/whatif/{run.pk}/apply/?candidate=nlp_first")
    assert [(r.section, r.key) for r in confirm.context["changes"]] == [
        ("team weight", "nlp"),
        ("priority class", "research"),
    ]
    applied = admin_client.post(
        f"/policy/whatif/{run.pk}/apply/", {"candidate": "nlp_first", "reason": "nlp first"}
    )
    assert applied.status_code == 302
    newest = PolicyVersion.objects.order_by("-number").first()
    assert newest.team_weights["nlp"] == 5.0 and newest.team_weights["vision"] == 2.0
    assert newest.priority_classes["research"]["value"] == 600
    assert newest.engine_config == PolicyVersion.objects.get(number=newest.number - 1).engine_config


def test_a_form_without_any_change_is_no_candidate(admin_client):
    response = admin_client.post(
        "/policy/whatif/", {"cluster": "demo", "window_days": "2", "candidate_config": ""}
    )
    assert response.status_code == 400
    assert "candidates: 1 to 4 named candidate policies" in response.content.decode()
    assert not WhatIfRun.objects.exists()
