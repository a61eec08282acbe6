"""What-if runs (kept, listed, run off the request): a run's replay gives the metrics of
``python -m scheduler.simulation compare`` on the same export, progress is published to the
admins' what-if group only, a cancelled run stops and says so, one live run per cluster, the
window limit and bad candidates are refused by field with nothing written, a failed replay says
why, a candidate is applied as the next version; everyone but platform admins gets a 404.

The Celery path itself (a real worker process taking the run from the broker) is in
``test_whatif_worker.py``; here the task is called in the test's process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from core import streams
from core.errors import Conflict
from policyversions import services, whatif_runs
from policyversions.models import PolicyVersion, WhatIfRun
from policyversions.tasks import run_whatif
from policyversions.whatif import compare_arguments
from tenants.models import AuditEntry

# Wall-clock costs of the replay itself, and the file names it was given.
TIMING = {"wall_s", "decide_p50_ms", "decide_p99_ms", "params"}


def comparable(results: dict) -> dict:
    return {name: {k: v for k, v in m.items() if k not in TIMING} for name, m in results.items()}


def cli_results(run: WhatIfRun, tmp_path) -> dict:
    """What the two commands give by hand on the run's window and candidates."""
    trace, out = tmp_path / "history.json", tmp_path / "results.json"
    call_command(
        "export_trace", out=str(trace), since=run.since.isoformat(), until=run.until.isoformat(),
        cluster=run.cluster.name, stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.simulation",
            *compare_arguments(trace, out, run.candidates),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())["results"]


@pytest.fixture
def demo(db, settings):
    from demo.seed import seed

    settings.DEBUG = True
    seed(jobs=0, history_days=3)
    return {u.username: u for u in get_user_model().objects.all()}


@pytest.fixture
def heard():
    """The what-if group's messages, as the channel layer gets them (after commit)."""
    messages: list[dict] = []

    def listener(batch):
        messages.extend(p for g, p in batch if g == streams.WHATIF_GROUP)

    streams.subscribe(listener)
    yield messages
    streams._listeners.remove(listener)


@pytest.mark.django_db(transaction=True)
def test_a_run_replays_on_the_task_like_the_simulation_command(demo, api_as, heard, tmp_path):
    admin = demo["admin"]
    response = api_as(admin).post(
        "/api/v1/policy/whatif",
        {"window_days": 2, "candidates": {"faster_aging": {"queue_aging_s": 3600}}},
        format="json",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    # The request only queued it (the broker has it; no worker runs in this test).
    assert WhatIfRun.objects.get(pk=run_id).status == "queued"
    run_whatif(run_id)
    run = WhatIfRun.objects.get(pk=run_id)
    assert run.status == "succeeded", run.error
    assert run.progress_fraction == 1.0 and run.finished_at is not None
    assert set(run.results) == {"gpuplatform", "faster_aging"}
    assert run.results["gpuplatform"]["jobs"] > 50
    assert comparable(run.results) == comparable(cli_results(run, tmp_path))
    # Chart data per policy: wait quantiles, utilization over time, per-team shares.
    for name in ("gpuplatform", "faster_aging"):
        details = run.details[name]
        assert len(details["wait_quantiles_s"]) == 51
        assert details["wait_quantiles_s"] == sorted(details["wait_quantiles_s"])
        assert details["utilization"]["hours"] and max(details["utilization"]["fraction"]) <= 1
        teams = details["teams"]
        assert teams and abs(sum(t["gpu_share"] for t in teams.values()) - 1) < 1e-3
        assert sum(t["jobs"] for t in teams.values()) == run.results[name]["jobs"]
        assert all(0 < t["fair_share"] <= 1 for t in teams.values())
    # Progress went out to the admins' group, rising, and ended with the result.
    mine = [m for m in heard if m["run"] == run_id]
    fractions = [m["fraction"] for m in mine if m["status"] == "running"]
    assert len(fractions) > 20 and fractions == sorted(fractions)
    assert mine[-1]["status"] == "succeeded" and mine[-1]["fraction"] == 1.0
    shown = api_as(admin).get(f"/api/v1/policy/whatif/{run_id}").json()
    assert shown["results"] == run.results and shown["policies"] == ["gpuplatform", "faster_aging"]
    listed = api_as(admin).get("/api/v1/policy/whatif").json()
    assert [r["id"] for r in listed] == [run_id] and "results" not in listed[0]


def add_a_sweep_of_both_teams(*, hours_ago: float) -> None:
    """48 finished whole-node jobs of vision and nlp submitted at one instant: more than the
    H100s and both teams' quotas hold, so the replay has a queue in which fair share decides
    (the demo's own history is too light for weights to matter at some hours of the day).
    They are not preemptible: preemptible, they take turns by attained service (rule 1a ranks
    the queue before fair share), which leaves nlp's waits under the two weights a few hundred
    seconds apart, in either order depending on the hour the demo was seeded."""
    from catalogue.models import GpuModel
    from scheduler.models import Cluster, Job
    from tenants.models import PriorityClass, Team

    at = timezone.now() - timedelta(hours=hours_ago)
    users = {u.username: u for u in get_user_model().objects.filter(username__in=["alice", "bob"])}
    teams = {t.slug: t for t in Team.objects.filter(slug__in=["vision", "nlp"])}
    shared = {
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": "python sweep.py",
        "workers": 1,
        "gpus_per_worker": 8,
        "gpu_model": GpuModel.objects.get(name="h100-80gb"),
        "priority_class": PriorityClass.objects.get(name="research"),
        "checkpoint_interval_s": 1800,
        "preemptible": False,
        "state": "succeeded",
        "submitted_at": at,
        "started_at": at,
        "attempts": 1,
        "exit_code": 0,
        "cluster": Cluster.objects.get(name="demo"),
    }
    Job.objects.bulk_create(
        Job(
            team=teams["vision" if i % 2 else "nlp"],
            submitter=users["alice" if i % 2 else "bob"],
            name=f"sweep-{i}",
            finished_at=at + timedelta(hours=2 + i % 4),
            runtime_limit_s=4 * 3600 * 2,
            **shared,
        )
        for i in range(48)
    )


@pytest.mark.django_db(transaction=True)
def test_a_candidate_with_another_team_weight_changes_that_teams_wait(demo, api_as, tmp_path):
    """The issue's first example, a team's weight: one candidate weighs nlp 20 times less,
    another 20 times more. The replay (through the task, as the portal runs it) equals the
    simulation command on the same export; nlp's fair share falls and rises with its weight,
    and it waits longer weighed less than weighed more."""
    admin = demo["admin"]
    add_a_sweep_of_both_teams(hours_ago=30)
    services.policy_version_seed()
    weights, _ = services.current_tables()
    response = api_as(admin).post(
        "/api/v1/policy/whatif",
        {
            "window_days": 2,
            "candidates": {
                "nlp_light": {"team_weights": {"nlp": weights["nlp"] / 20}},
                "nlp_heavy": {"team_weights": {"nlp": weights["nlp"] * 20}},
            },
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    run_whatif(run_id)
    run = WhatIfRun.objects.get(pk=run_id)
    assert run.status == "succeeded", run.error
    assert run.candidates["nlp_light"] == {
        "team_weights": {"nlp": weights["nlp"] / 20},
        "priority_classes": {},
    }
    assert comparable(run.results) == comparable(cli_results(run, tmp_path))
    now, light, heavy = (run.details[n]["teams"] for n in ("gpuplatform", "nlp_light", "nlp_heavy"))
    assert light["nlp"]["fair_share"] < now["nlp"]["fair_share"] < heavy["nlp"]["fair_share"]
    assert light["vision"]["fair_share"] > now["vision"]["fair_share"]
    # Against each other, not against the policy in force: the demo's seeded history changes
    # with the hour it is seeded at, and at some hours nlp already ranks behind vision (light
    # then waits as long as now: 7,390.76 s both at 13:20 UTC) or ahead of it (heavy then).
    assert light["nlp"]["avg_wait_s"] > heavy["nlp"]["avg_wait_s"]
    assert run.results["nlp_light"]["jobs"] == run.results["gpuplatform"]["jobs"]


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_run_stops_and_says_so(demo, heard):
    admin = demo["admin"]
    run = whatif_runs.whatif_run_start(
        user=admin, window_days=3, candidates={"a": {"queue_aging_s": 600}}
    )

    def cancel_at_ten_percent(batch):
        for _, payload in batch:
            if payload.get("status") == "running" and payload.get("fraction", 0) >= 0.1:
                whatif_runs.whatif_run_cancel(user=admin, run_id=run.pk)

    streams.subscribe(cancel_at_ten_percent)
    try:
        run_whatif(run.pk)
    finally:
        streams._listeners.remove(cancel_at_ten_percent)
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert run.results == {} and run.progress_fraction < 0.2
    assert "cancelled" in run.progress_text
    assert heard[-1]["status"] == "cancelled"
    # The cluster is free again.
    again = whatif_runs.whatif_run_start(user=admin, window_days=1, candidates={"a": {}})
    assert again.status == "queued"


@pytest.mark.django_db
def test_one_live_run_per_cluster(demo, api_as):
    admin = demo["admin"]
    first = whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    response = api_as(admin).post("/api/v1/policy/whatif", {"candidates": {"b": {}}}, format="json")
    assert response.status_code == 409
    message = response.json()["cluster"][0]
    assert f"run {first.pk}" in message and "one replay per cluster" in message
    assert WhatIfRun.objects.count() == 1
    # A queued run is cancelled at once; then a new one may start.
    whatif_runs.whatif_run_cancel(user=admin, run_id=first.pk)
    assert WhatIfRun.objects.get(pk=first.pk).status == "cancelled"
    assert (
        api_as(admin)
        .post("/api/v1/policy/whatif", {"candidates": {"b": {}}}, format="json")
        .status_code
        == 201
    )
    # A finished run cannot be cancelled.
    response = api_as(admin).post(f"/api/v1/policy/whatif/{first.pk}/cancel")
    assert response.status_code == 409 and "already cancelled" in response.json()["run"][0]


@pytest.mark.django_db
def test_a_run_whose_worker_died_no_longer_holds_the_cluster(demo):
    admin = demo["admin"]
    stuck = whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    long_ago = timezone.now() - timedelta(hours=1)
    WhatIfRun.objects.filter(pk=stuck.pk).update(
        status="running", started_at=long_ago, heartbeat_at=long_ago
    )
    whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    stuck.refresh_from_db()
    assert stuck.status == "failed" and "stopped answering" in stuck.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"window_days": 120, "candidates": {"c": {}}}, "window_days"),
        ({"window_days": 0, "candidates": {"c": {}}}, "window_days"),
        ({"window_days": "x", "candidates": {"c": {}}}, "window_days"),
        ({"candidates": {}}, "candidates"),
        ({"candidates": {f"c{i}": {} for i in range(5)}}, "candidates"),
        ({"candidates": {"gpuplatform": {}}}, "candidates.gpuplatform"),
        ({"candidates": {"fifo": {}}}, "candidates.fifo"),
        ({"candidates": {"c": {"queue_aging_s": -1}}}, "candidates.c.queue_aging_s"),
        ({"candidates": {"c": {"no_such_knob": 1}}}, "candidates.c.no_such_knob"),
        ({"cluster": "nowhere", "candidates": {"c": {}}}, "cluster"),
        ({"candidate_versions": {"old": 99}}, "candidate_versions.old"),
        ({"candidates": {"c": {"team_weights": {"ghost": 2}}}}, "candidates.c.team_weights.ghost"),
        ({"candidates": {"c": {"team_weights": {"nlp": -1}}}}, "candidates.c.team_weights.nlp"),
        # an integer beyond the float range (JSON's are unbounded): was a 500
        (
            {"candidates": {"c": {"team_weights": {"nlp": 10**309}}}},
            "candidates.c.team_weights.nlp",
        ),
        ({"window_days": 10**309, "candidates": {"c": {}}}, "window_days"),
        (
            {"candidates": {"c": {"priority_classes": {"research": {"value": "x"}}}}},
            "candidates.c.priority_classes.research.value",
        ),
        (
            {"candidates": {"c": {"priority_classes": {"urgent": {"value": 1}}}}},
            "candidates.c.priority_classes.urgent",
        ),
        (
            {"candidates": {"c": {"engine_config": {"queue_aging_s": -1}}}},
            "candidates.c.engine_config.queue_aging_s",
        ),
        ({"candidates": {"c": {"team_weights": {}, "weights": {}}}}, "candidates.c.weights"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written(demo, api_as, body, field):
    response = api_as(demo["admin"]).post("/api/v1/policy/whatif", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not WhatIfRun.objects.exists()


@pytest.mark.django_db
def test_the_window_limit_says_what_it_is(demo, api_as):
    response = api_as(demo["admin"]).post(
        "/api/v1/policy/whatif", {"window_days": 91, "candidates": {"c": {}}}, format="json"
    )
    assert "at most 90 days" in response.json()["window_days"][0]


@pytest.mark.django_db
def test_an_earlier_version_is_a_candidate(demo):
    admin = demo["admin"]
    services.policy_version_seed()
    services.policy_apply(user=admin, reason="faster", engine_config={"queue_aging_s": 900})
    run = whatif_runs.whatif_run_start(user=admin, window_days=3, candidate_versions={"v1": 1})
    v1 = PolicyVersion.objects.get(number=1)
    assert run.candidates == {"v1": services.version_content(v1)}
    assert run.baseline_version == 2 and run.candidate_versions == {"v1": 1}


@pytest.mark.django_db(transaction=True)
def test_an_earlier_version_is_replayed_whole_engine_weights_and_classes(demo, tmp_path):
    """v1 differs from the version in force in its engine configuration, a team's weight and a
    class's value: the replay runs v1 as a rollback would put it in force, not the policy in
    force with v1's engine configuration on top."""
    admin = demo["admin"]
    services.policy_version_seed()
    services.policy_apply(
        user=admin,
        reason="favour nlp, age faster",
        engine_config={"queue_aging_s": 900},
        team_weights={"nlp": 8},
        priority_classes={
            "research": {"value": 50, "preemptible_by_default": True, "restricted": False}
        },
    )
    run = whatif_runs.whatif_run_start(user=admin, window_days=2, candidate_versions={"v1": 1})
    v1 = run.candidates["v1"]
    assert v1["team_weights"]["nlp"] != 8 and v1["priority_classes"]["research"]["value"] != 50
    args = compare_arguments(tmp_path / "t", tmp_path / "o", run.candidates)
    assert "--team-weights" in args and "--priority-classes" in args
    run_whatif(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert comparable(run.results) == comparable(cli_results(run, tmp_path))
    teams_now, teams_v1 = run.details["gpuplatform"]["teams"], run.details["v1"]["teams"]
    assert teams_v1["nlp"]["fair_share"] < teams_now["nlp"]["fair_share"]
    assert run.details["v1"]["not_replayed"] == []


@pytest.mark.django_db
def test_a_replay_that_fails_says_why(demo):
    admin = demo["admin"]
    # A window with no finished job in it: nothing to replay.
    run = whatif_runs.whatif_run_start(
        user=admin,
        window_days=1,
        until=timezone.now() - timedelta(days=60),
        candidates={"a": {}},
    )
    run_whatif(run.pk)
    run.refresh_from_db()
    assert run.status == "failed"
    assert "no finished job was submitted in this window" in run.error, run.error
    assert run.results == {}


@pytest.mark.django_db
def test_a_candidate_is_applied_as_the_next_version(demo, api_as):
    admin = demo["admin"]
    run = whatif_runs.whatif_run_start(
        user=admin, window_days=1, candidates={"calm": {"queue_aging_s": 7777}}
    )
    response = api_as(admin).post(
        f"/api/v1/policy/whatif/{run.pk}/apply", {"candidate": "calm", "reason": "r"}, format="json"
    )
    assert response.status_code == 400 and "finished" in response.json()["candidate"][0]
    WhatIfRun.objects.filter(pk=run.pk).update(status="succeeded")
    response = api_as(admin).post(
        f"/api/v1/policy/whatif/{run.pk}/apply", {"candidate": "nope", "reason": "r"}, format="json"
    )
    assert response.status_code == 400 and "candidate" in response.json()
    before = PolicyVersion.objects.count()
    response = api_as(admin).post(
        f"/api/v1/policy/whatif/{run.pk}/apply",
        {"candidate": "calm", "reason": "the replay says so"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert PolicyVersion.objects.count() == before + 1
    newest = PolicyVersion.objects.order_by("-number").first()
    assert newest.engine_config == {"queue_aging_s": 7777}
    assert newest.reason == "the replay says so"
    # The audit log says which replay the version came from.
    entry = AuditEntry.objects.get(action="policy.whatif.apply")
    assert entry.target_id == str(run.pk)
    assert entry.after == {"candidate": "calm", "version": newest.number}


@pytest.mark.django_db
def test_a_whole_candidate_is_applied_with_its_weights_and_classes(demo, api_as, client):
    admin = demo["admin"]
    services.policy_version_seed()
    _, classes = services.current_tables()
    research = {**classes["research"], "value": classes["research"]["value"] + 7}
    run = whatif_runs.whatif_run_start(
        user=admin,
        window_days=1,
        candidates={
            "whole": {
                "engine_config": {"queue_aging_s": 7777},
                "team_weights": {"nlp": 6},
                "priority_classes": {"research": research},
            }
        },
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status="succeeded")
    client.force_login(admin)
    page = client.get(f"/policy/whatif/{run.pk}/apply/?candidate=whole")
    assert page.status_code == 200
    shown = {(r.section, r.key) for r in page.context["changes"]}
    assert shown == {
        ("engine", "queue_aging_s"),
        ("team weight", "nlp"),
        ("priority class", "research"),
    }
    response = api_as(admin).post(
        f"/api/v1/policy/whatif/{run.pk}/apply",
        {"candidate": "whole", "reason": "all three"},
        format="json",
    )
    assert response.status_code == 201, response.content
    newest = PolicyVersion.objects.order_by("-number").first()
    assert newest.engine_config == {"queue_aging_s": 7777}
    assert newest.team_weights["nlp"] == 6.0 and newest.priority_classes["research"] == research
    # What the loop reads now is the candidate too.
    weights, classes = services.current_tables()
    assert weights["nlp"] == 6.0 and classes["research"] == research


@pytest.mark.django_db
def test_members_get_a_404_on_every_whatif_route(demo, api_as):
    run = whatif_runs.whatif_run_start(user=demo["admin"], window_days=1, candidates={"a": {}})
    alice = demo["alice"]
    for method, url in [
        ("get", "/api/v1/policy/whatif"),
        ("post", "/api/v1/policy/whatif"),
        ("get", f"/api/v1/policy/whatif/{run.pk}"),
        ("post", f"/api/v1/policy/whatif/{run.pk}/cancel"),
        ("post", f"/api/v1/policy/whatif/{run.pk}/apply"),
    ]:
        response = getattr(api_as(alice), method)(url, {}, format="json")
        assert response.status_code == 404, (method, url)
    assert WhatIfRun.objects.get(pk=run.pk).status == "queued"


def test_only_admin_sockets_join_the_whatif_group(demo):
    assert streams.WHATIF_GROUP in streams.groups_for(topics=["whatif"], team_ids=[], is_admin=True)
    assert streams.groups_for(topics=["whatif"], team_ids=[1], is_admin=False) == []


@pytest.mark.django_db(transaction=True)
def test_a_cancel_after_the_last_progress_report_still_cancels(demo, heard):
    admin = demo["admin"]
    run = whatif_runs.whatif_run_start(user=admin, window_days=1, candidates={"a": {}})

    def cancel_at_the_end(batch):
        for _, payload in batch:
            if (
                payload.get("status") == "running" and payload.get("fraction", 0) >= 1.0
            ):  # the very last report
                whatif_runs.whatif_run_cancel(user=admin, run_id=run.pk)

    streams.subscribe(cancel_at_the_end)
    try:
        run_whatif(run.pk)
    finally:
        streams._listeners.remove(cancel_at_the_end)
    run.refresh_from_db()
    assert run.status == "cancelled" and run.results == {}
    assert heard[-1]["status"] == "cancelled"


@pytest.mark.django_db
def test_a_candidate_is_not_applied_over_a_policy_changed_since_the_run(demo, api_as, client):
    """The replay measured the candidate against the version then in force; applying it over a
    later version would also undo that version's changes, which nobody compared."""
    admin = demo["admin"]
    run = whatif_runs.whatif_run_start(
        user=admin, window_days=1, candidates={"calm": {"queue_aging_s": 7777}}
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status="succeeded")
    services.policy_apply(user=admin, reason="meanwhile", engine_config={"queue_aging_s": 900})
    versions = PolicyVersion.objects.count()
    response = api_as(admin).post(
        f"/api/v1/policy/whatif/{run.pk}/apply",
        {"candidate": "calm", "reason": "the replay says so"},
        format="json",
    )
    assert response.status_code == 409, response.content
    assert "v2 is in force now" in response.json()["candidate"][0]
    client.force_login(admin)
    page = client.get(f"/policy/whatif/{run.pk}/apply/?candidate=calm")
    assert page.status_code == 200 and b"whatif-apply-stale" in page.content
    assert b"whatif-apply-form" not in page.content
    posted = client.post(
        f"/policy/whatif/{run.pk}/apply/", {"candidate": "calm", "reason": "the replay says so"}
    )
    assert posted.status_code == 409 and b"is in force now" in posted.content
    assert PolicyVersion.objects.count() == versions
    newest = PolicyVersion.objects.order_by("-number").first()
    assert newest.engine_config == {"queue_aging_s": 900}


@pytest.mark.django_db
def test_a_name_both_edited_and_taken_from_a_version_is_refused(demo, api_as):
    services.policy_version_seed()
    response = api_as(demo["admin"]).post(
        "/api/v1/policy/whatif",
        {"candidates": {"v1": {"queue_aging_s": 60}}, "candidate_versions": {"v1": 1}},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "also given in candidates" in response.json()["candidate_versions.v1"][0]
    assert not WhatIfRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"window": 7, "candidates": {"c": {}}}, "window"),
        ({"window_days": -3, "candidates": {"c": {}}}, "window_days"),
        ({"window_days": 1e300, "candidates": {"c": {}}}, "window_days"),
        ({"window_days": None, "candidates": {"c": {}}}, "window_days"),
        ({"candidates": "c"}, "candidates"),
        ({"candidates": {"c": []}}, "candidates.c"),
        ({"candidates": {"c": {}}, "candidate_versions": {"old": 10**30}}, "candidate_versions"),
        ({"candidates": {"c": {}}, "cluster": ["x"]}, "cluster"),
        (
            {"candidates": {"c": {"max_preemption_attempts": 1e30}}},
            "candidates.c.max_preemption_attempts",
        ),
        (
            {"candidates": {"c": {"engine_config": {"reservations_per_model": 1e30}}}},
            "candidates.c.engine_config.reservations_per_model",
        ),
    ],
)
def test_more_bad_input_is_a_400_naming_the_field(demo, api_as, body, field):
    response = api_as(demo["admin"]).post("/api/v1/policy/whatif", body, format="json")
    assert response.status_code == 400, response.content
    assert any(k == field or k.startswith(field + ".") for k in response.json()), response.json()
    assert not WhatIfRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"candidate_versions": {"old": 1.5}}, "candidate_versions.old", "integer"),
        ({"candidate_versions": {"old": "two"}}, "candidate_versions.old", "integer"),
    ],
)
def test_a_bad_value_inside_an_object_is_named_with_its_reason(demo, api_as, body, field, reason):
    """The serializer's error for a value inside an object is an object itself; it was read as
    a list, so the answer was ``{"candidate_versions": ["old"]}``: the key, and no reason."""
    response = api_as(demo["admin"]).post("/api/v1/policy/whatif", body, format="json")
    assert response.status_code == 400, response.content
    problems = response.json()
    assert list(problems) == [field], problems
    assert reason in problems[field][0], problems
    assert not WhatIfRun.objects.exists()


@pytest.mark.django_db
def test_garbage_json_is_a_400(demo, api_as):
    response = api_as(demo["admin"]).post(
        "/api/v1/policy/whatif", b'{"candidates": {', content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert not WhatIfRun.objects.exists()


@pytest.mark.django_db
def test_a_run_no_worker_took_no_longer_holds_the_cluster(demo):
    admin = demo["admin"]
    lost = whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    WhatIfRun.objects.filter(pk=lost.pk).update(created_at=timezone.now() - timedelta(hours=2))
    again = whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    lost.refresh_from_db()
    assert lost.status == "failed" and "no worker took the replay" in lost.error
    assert again.status == "queued"
    # A late delivery of the lost run's task does nothing.
    run_whatif(lost.pk)
    lost.refresh_from_db()
    assert lost.status == "failed" and lost.started_at is None


@pytest.mark.django_db
def test_cancelling_a_run_whose_worker_died_ends_it(demo):
    admin = demo["admin"]
    stuck = whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    long_ago = timezone.now() - timedelta(hours=1)
    WhatIfRun.objects.filter(pk=stuck.pk).update(
        status="running", started_at=long_ago, heartbeat_at=long_ago
    )
    whatif_runs.whatif_run_cancel(user=admin, run_id=stuck.pk)
    stuck.refresh_from_db()
    assert stuck.status == "cancelled" and stuck.finished_at is not None
    # A live worker is only asked to stop: its run stays running until it reads the flag.
    live = WhatIfRun.objects.create(
        cluster=stuck.cluster, created_at=timezone.now(), created_by_name="admin",
        since=stuck.since, until=stuck.until, candidates={"a": {}}, status="running",
        started_at=timezone.now(), heartbeat_at=timezone.now(),
    )  # fmt: skip
    whatif_runs.whatif_run_cancel(user=admin, run_id=live.pk)
    live.refresh_from_db()
    assert live.status == "running" and live.cancel_requested


@pytest.mark.django_db(transaction=True)
def test_two_starts_at_once_give_one_run_and_one_conflict(demo, monkeypatch):
    """Both pass the Python check before either commits: the named constraint decides."""
    if connection.vendor != "postgresql":
        pytest.skip("two writers at once need PostgreSQL (SQLite serialises them)")
    admin = demo["admin"]
    services.policy_version_seed()
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    original = WhatIfRun.objects.create

    def create_after_both_checked(**fields):
        barrier.wait(timeout=10)
        return original(**fields)

    def start() -> None:
        try:
            whatif_runs.whatif_run_start(user=admin, window_days=1, candidates={"a": {}})
            outcomes.append("started")
        except Conflict as exc:
            outcomes.append(f"conflict {exc.field}")
        finally:
            connection.close()

    monkeypatch.setattr(WhatIfRun.objects, "create", create_after_both_checked)
    # Not the broker from these threads: Celery's current app is per thread, and a thread
    # without one makes a default app that later tests' enqueues would go to.
    enqueued: list[int] = []
    monkeypatch.setattr(whatif_runs, "_enqueue_whatif", enqueued.append)
    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["conflict cluster", "started"]
    assert WhatIfRun.objects.count() == 1
    assert enqueued == [WhatIfRun.objects.get().pk]
    assert AuditEntry.objects.filter(action="policy.whatif").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_replay_longer_than_its_bound_is_stopped_and_fails_saying_so(demo, heard, settings):
    """Nothing else bounds a replay's length: an overloaded history of 5,000 jobs took more than
    5 minutes per policy. Past WHATIF_MAX_RUNTIME_SECONDS the worker stops it at its next
    progress report and frees its process and its cluster's slot."""
    settings.WHATIF_MAX_RUNTIME_SECONDS = 0.001
    admin = demo["admin"]
    run = whatif_runs.whatif_run_start(
        user=admin, window_days=3, candidates={"a": {"queue_aging_s": 600}}
    )
    run_whatif(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert "WHATIF_MAX_RUNTIME_SECONDS" in run.error and "0.001 s" in run.error
    assert run.results == {} and run.progress_fraction < 0.05
    assert heard[-1]["status"] == "failed"
    again = whatif_runs.whatif_run_start(user=admin, window_days=1, candidates={"a": {}})
    assert again.status == "queued"


@pytest.mark.django_db
def test_a_run_whose_worker_died_is_failed_by_the_beat_alone(demo):
    """Before, only the next start or a cancel on the same cluster ended such a run: until an
    admin did either, it showed "running" for ever and ``gpuctl whatif run`` (which waits while
    a run is live) never returned. A housekeeping task on the beat ends it."""
    from django.conf import settings as live_settings

    from gpuplatform.celery import app

    admin = demo["admin"]
    stuck = whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    long_ago = timezone.now() - timedelta(hours=1)
    WhatIfRun.objects.filter(pk=stuck.pk).update(
        status="running", started_at=long_ago, heartbeat_at=long_ago
    )
    on_beat = [name for name, _every in live_settings.PERIODIC_TASKS if "whatif" in name]
    assert on_beat, "no what-if housekeeping on the beat"
    app.loader.import_default_modules()
    for name in on_beat:
        app.tasks[name].apply()
    stuck.refresh_from_db()
    assert stuck.status == "failed" and "stopped answering" in stuck.error
    assert stuck.finished_at is not None


@pytest.mark.django_db
def test_a_run_queued_behind_a_live_replay_is_not_taken_for_lost(demo):
    """The what-if worker has one process: a second cluster's run waits behind a replay that
    may take WHATIF_MAX_RUNTIME_SECONDS (2 h). Its hour in the queue is no sign it was lost
    while a replay is still heard of, and failing it would say "no worker took the replay"."""
    from scheduler.models import Cluster

    admin = demo["admin"]
    busy = whatif_runs.whatif_run_start(user=admin, window_days=3, candidates={"a": {}})
    now = timezone.now()
    WhatIfRun.objects.filter(pk=busy.pk).update(
        status="running", started_at=now - timedelta(hours=1, minutes=30), heartbeat_at=now
    )
    Cluster.objects.create(name="second")
    waiting = whatif_runs.whatif_run_start(
        user=admin, cluster="second", window_days=3, candidates={"a": {}}
    )
    WhatIfRun.objects.filter(pk=waiting.pk).update(created_at=now - timedelta(hours=2))
    whatif_runs.whatif_run_reap_stale()
    waiting.refresh_from_db()
    assert waiting.status == "queued"
    # Once nothing is replaying, a run still queued after an hour was lost.
    WhatIfRun.objects.filter(pk=busy.pk).update(status="succeeded", finished_at=now)
    whatif_runs.whatif_run_reap_stale()
    waiting.refresh_from_db()
    assert waiting.status == "failed" and "no worker took the replay" in waiting.error


HUGE = {
    "checkpoint_protect_s": 1e300,
    "preemption_grace_s": 1e300,
    "fair_share_half_life_s": 1e300,
    "queue_aging_s": 1e300,
    "default_runtime_s": 1e300,
    "deadline_slack_s": 1e300,
    "fair_share_band": 1e300,
    "wait_price_per_gpu_h": 1e300,
    "las.fifo_one_node_after_s": 1e300,
    "las.reserve_after_s": 1e300,
    "las.long_run_s": 1e300,
    "las.thresholds_gpu_s": [3600, 1e300],
}


def _engine(key: str, value) -> dict:
    section, _, name = key.rpartition(".")
    return {section: {name: value}} if section else {name: value}


@pytest.mark.parametrize("key", HUGE, ids=list(HUGE))
def test_a_huge_engine_number_is_a_400_naming_it_in_a_whatif_and_an_apply(demo, api_as, key):
    """1e300 in any engine field was accepted: a what-if replayed it, an apply put it in force.
    Now both are a 400 naming the field, with nothing written."""
    field = key + ("[1]" if key.endswith("thresholds_gpu_s") else "")
    admin = api_as(demo["admin"])
    response = admin.post(
        "/api/v1/policy/whatif",
        {"candidates": {"c": {"engine_config": _engine(key, HUGE[key])}}},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert f"candidates.c.engine_config.{field}" in response.json(), response.json()
    assert not WhatIfRun.objects.exists()
    services.policy_version_seed()  # version 1, which any apply seeds first
    versions = PolicyVersion.objects.count()
    response = admin.post(
        "/api/v1/policy/versions",
        {"reason": "huge", "engine_config": _engine(key, HUGE[key])},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert f"engine_config.{field}" in response.json(), response.json()
    assert PolicyVersion.objects.count() == versions


@pytest.mark.django_db(transaction=True)
def test_a_cluster_deleted_between_the_claim_and_the_load_ends_the_task_cleanly(demo):
    """An admin deletes a cluster that has no history yet (the Django admin allows it) just
    after the worker claimed a what-if run of it (queued -> running) and before it loaded the
    run: the delete takes the run with it, and loading it raised DoesNotExist in the worker (a
    crashed task) where a run gone is a clean exit."""
    from scheduler.models import Cluster

    Cluster.objects.create(name="spare", enabled=False)
    run = whatif_runs.whatif_run_start(
        user=demo["admin"], cluster="spare", window_days=1, candidates={"a": {}}
    )

    def delete_the_cluster():
        try:
            Cluster.objects.filter(name="spare").delete()
        finally:
            connection.close()  # this thread's own connection

    claimed = []

    def after_the_claim(execute, sql, params, many, context):
        answer = execute(sql, params, many, context)
        if (
            not claimed
            and sql.startswith('UPDATE "policyversions_whatifrun"')
            and "running" in [str(p) for p in params]
        ):
            claimed.append(sql)
            deleter = threading.Thread(target=delete_the_cluster)
            deleter.start()
            deleter.join()
        return answer

    with connection.execute_wrapper(after_the_claim):
        run_whatif(run.pk)
    assert claimed, "the claim's UPDATE was not seen"
    assert not WhatIfRun.objects.filter(pk=run.pk).exists()
