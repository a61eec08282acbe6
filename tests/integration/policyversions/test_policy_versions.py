"""The policy as versioned data: SCHEDULER_POLICY seeds version 1; apply and rollback make new
versions (audited, tables written, read by the loop's next cycle); bad fields are refused with
``field: reason`` in the API (400) and the form, with nothing written; everyone but platform
admins gets a 404."""

import pytest

from policyversions import selectors, services
from policyversions.models import PolicyVersion
from tenants import teams as team_services
from tenants.models import AuditEntry, PriorityClass, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def env_policy(settings):
    settings.SCHEDULER_POLICY = {"queue_aging_s": 7200}
    return settings.SCHEDULER_POLICY


def test_the_environment_seeds_version_one_and_the_loop_falls_back_to_it(platform, env_policy):
    from scheduler.snapshot import policy_config

    assert policy_config().queue_aging_s == 7200  # no version yet: the environment's
    first = services.policy_version_seed()
    assert first.number == 1 and first.source == "environment"
    assert first.engine_config == {"queue_aging_s": 7200}
    assert first.team_weights == {"nlp": 1.0, "research": 1.0, "vision": 2.0}
    assert first.priority_classes["production"] == {
        "value": 1000,
        "preemptible_by_default": False,
        "restricted": False,
    }
    assert services.policy_version_seed().pk == first.pk


def test_apply_puts_a_new_version_in_force_for_the_next_cycle(platform, env_policy, api_as):
    from scheduler.snapshot import build_snapshot, policy_config

    admin = platform["admin"]
    response = api_as(admin).post(
        "/api/v1/policy/versions",
        {
            "reason": "give nlp more, age faster",
            "engine_config": {"queue_aging_s": 3600, "las": {"long_run_s": 86400}},
            "team_weights": {"nlp": 3.0},
            "priority_classes": {
                "best-effort": {"value": 50, "preemptible_by_default": True, "restricted": False}
            },
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["number"] == 2
    config = policy_config()
    assert config.queue_aging_s == 3600 and config.las.long_run_s == 86400
    from scheduler.snapshot import policy_config_data  # what export_trace writes as "config"

    assert policy_config_data() == {"queue_aging_s": 3600, "las": {"long_run_s": 86400}}
    assert Team.objects.get(slug="nlp").fair_share_weight == 3.0
    assert PriorityClass.objects.get(name="best-effort").value == 50
    from django.utils import timezone

    snapshot, _ = build_snapshot(now=timezone.now())
    assert snapshot.config.queue_aging_s == 3600
    entry = AuditEntry.objects.get(action="policy.apply")
    assert entry.actor == admin and entry.comment == "give nlp more, age faster"
    assert entry.before["engine_config"] == {"queue_aging_s": 7200}
    assert entry.after["team_weights"]["nlp"] == 3.0
    assert AuditEntry.objects.filter(action="team.update").count() == 1
    assert AuditEntry.objects.filter(action="priority.set").count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"engine_config": {"queue_agin_s": 1}}, "engine_config.queue_agin_s"),
        ({"engine_config": {"queue_aging_s": -5}}, "engine_config.queue_aging_s"),
        ({"engine_config": [1]}, "engine_config"),
        ({"team_weights": {"nlp": -1}}, "team_weights.nlp"),
        ({"team_weights": {"nlp": "heavy"}}, "team_weights.nlp"),
        ({"team_weights": {"nlp": 10**309}}, "team_weights.nlp"),  # beyond floats: was a 500
        ({"team_weights": {"ghosts": 1}}, "team_weights.ghosts"),
        ({"priority_classes": {"research": {"value": 1.5}}}, "priority_classes.research.value"),
        ({"priority_classes": {"vip": {}}}, "priority_classes.vip"),
        ({"reason": ""}, "reason"),
        # Counts without an upper bound took these and stored them.
        (
            {"engine_config": {"max_preemption_attempts": 1e30}},
            "engine_config.max_preemption_attempts",
        ),
        (
            {"engine_config": {"reservations_per_model": 10**30}},
            "engine_config.reservations_per_model",
        ),
        (
            {"engine_config": {"las": {"bottom_fifo_queues": 1e30}}},
            "engine_config.las.bottom_fifo_queues",
        ),
    ],
)
def test_bad_fields_are_a_400_naming_the_field_and_nothing_changes(
    platform, env_policy, api_as, body, field
):
    services.policy_version_seed()
    response = api_as(platform["admin"]).post(
        "/api/v1/policy/versions", {"reason": "try", **body}, format="json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert PolicyVersion.objects.count() == 1
    assert Team.objects.get(slug="nlp").fair_share_weight == 1.0
    assert not AuditEntry.objects.filter(action__startswith="policy.").exists()


def test_diff_and_rollback(platform, env_policy, api_as):
    client = api_as(platform["admin"])
    client.post(
        "/api/v1/policy/versions",
        {"reason": "r1", "engine_config": {"queue_aging_s": 100}, "team_weights": {"nlp": 5}},
        format="json",
    )
    diff = client.get("/api/v1/policy/diff?a=1&b=2").json()
    assert {(r["section"], r["key"], r["before"], r["after"]) for r in diff} == {
        ("engine", "queue_aging_s", 7200.0, 100.0),
        ("team weight", "nlp", 1.0, 5.0),
    }
    response = client.post("/api/v1/policy/versions/1/rollback", {"reason": "too aggressive"})
    assert response.status_code == 201
    third = PolicyVersion.objects.get(number=3)
    assert third.source == "rollback" and third.restores == 1
    assert third.engine_config == {"queue_aging_s": 7200}
    assert Team.objects.get(slug="nlp").fair_share_weight == 1.0
    assert AuditEntry.objects.filter(action="policy.rollback", comment="too aggressive").exists()
    assert client.get("/api/v1/policy/diff?a=1&b=3").json() == []
    assert client.get("/api/v1/policy/diff?a=1&b=x").status_code == 400
    assert client.post("/api/v1/policy/versions/9/rollback", {"reason": "x"}).status_code == 404


@pytest.mark.parametrize("value", ["\u00b2", "1" * 5000])
def test_a_diff_number_that_int_refuses_is_a_400_not_a_500(platform, env_policy, api_as, value):
    # "²" passes str.isdigit(); 5,000 digits pass it too and go over Python's limit on digits.
    services.policy_version_seed()
    response = api_as(platform["admin"]).get("/api/v1/policy/diff", {"a": value, "b": "1"})
    assert response.status_code == 400
    assert response.json() == {"a": ["must be a version number"]}


def test_an_unchanged_apply_is_refused(platform, env_policy):
    services.policy_version_seed()
    with pytest.raises(services.FieldErrors):
        services.policy_apply(user=platform["admin"], reason="same", engine_config=env_policy)


def test_a_stored_config_the_engine_no_longer_reads_falls_back_to_the_environment(
    platform, env_policy
):
    from scheduler.snapshot import policy_config

    services.policy_version_seed()
    PolicyVersion.objects.filter(number=1).update(engine_config={"renamed_field": 1})
    assert policy_config().queue_aging_s == 7200
    with pytest.raises(services.FieldErrors) as refused:
        services.policy_rollback(user=platform["admin"], number=1, reason="back")
    assert "engine_config.renamed_field" in refused.value.errors


def test_drift_shows_weights_changed_outside_the_policy(platform, env_policy, client):
    from tenants.teams import team_update

    services.policy_version_seed()
    team_update(user=platform["admin"], team=Team.objects.get(slug="vision"), fair_share_weight=7)
    client.force_login(platform["admin"])
    page = client.get("/policy/")
    assert page.status_code == 200
    assert [(r.key, r.before, r.after) for r in page.context["drift"]] == [("vision", 2.0, 7.0)]


def test_a_change_through_the_api_keeps_weights_changed_outside_the_policy(
    platform, env_policy, api_as
):
    from tenants.teams import team_update

    services.policy_version_seed()
    team_update(user=platform["admin"], team=Team.objects.get(slug="vision"), fair_share_weight=7)
    updates = AuditEntry.objects.filter(action="team.update").count()
    response = api_as(platform["admin"]).post(
        "/api/v1/policy/versions",
        {"reason": "age faster", "engine_config": {"queue_aging_s": 3600}},
        format="json",
    )
    assert response.status_code == 201, response.content
    # An engine setting was changed, nothing else: vision keeps the weight set under Teams,
    # as the portal's form keeps it, and the new version records it.
    assert Team.objects.get(slug="vision").fair_share_weight == 7.0
    assert response.json()["team_weights"]["vision"] == 7.0
    assert AuditEntry.objects.filter(action="team.update").count() == updates
    version = PolicyVersion.objects.get(number=2)
    assert selectors.policy_drift(user=platform["admin"], version=version) == []


def test_the_portal_form_applies_and_shows_field_errors(platform, env_policy, client):
    client.force_login(platform["admin"])
    page = client.get("/policy/")
    form = page.context["form"]
    data = {name: form[name].value() for name in form.fields}
    data = {k: v for k, v in data.items() if v not in (False, None)}
    data.update(engine_config='{"queue_aging_s": -1}', reason="try")
    refused = client.post("/policy/", data)
    assert refused.status_code == 400
    assert "engine_config.queue_aging_s: " in refused.content.decode()
    assert PolicyVersion.objects.count() == 1
    data.update(engine_config='{"queue_aging_s": 600}', **{"weight__nlp": "4"})
    applied = client.post("/policy/", data)
    assert applied.status_code == 302 and applied["Location"] == "/policy/versions/2/"
    assert Team.objects.get(slug="nlp").fair_share_weight == 4.0
    shown = client.get("/policy/versions/2/")
    assert [(r.key, r.after) for r in shown.context["changes"]] == [
        ("queue_aging_s", 600.0),
        ("nlp", 4.0),
    ]
    rolled = client.post("/policy/versions/1/rollback/", {"reason": "undo"})
    assert rolled.status_code == 302 and rolled["Location"] == "/policy/versions/3/"
    assert client.get("/policy/diff/?a=1&b=3").context["rows"] == []


def test_everyone_but_platform_admins_gets_404_on_every_policy_route(platform, api_as, client):
    from tests.integration.security.routes import concrete_path, fill_values, iter_routes

    routes = [r for r in iter_routes() if r.regex.startswith(("policy/", "api/v1/policy/"))]
    assert len(routes) >= 9
    services.policy_version_seed()
    for user in (platform["alice"], platform["charlie"]):
        client.force_login(user)
        api = api_as(user)
        for route in routes:
            path = concrete_path(route, fill_values(route, {"number": "1", "run_id": "1"}))
            for method in ("get", "post"):
                caller = api if route.is_api else client
                response = getattr(caller, method)(path, {"reason": "x"})
                assert response.status_code == 404, (user, method, path)
    assert PolicyVersion.objects.count() == 1


def test_a_version_stored_with_todays_flat_keys_still_loads_and_is_logged_once(
    platform, env_policy, api_as, caplog
):
    # Versions are never edited, so one written before the las section keeps its flat keys:
    # the loop reads it through the codec's translation, the same decisions, and logs each
    # key's replacement once per process.
    from django.utils import timezone

    from policyversions import selectors
    from scheduler.policy import Config, Las
    from scheduler.snapshot import policy_config

    flat = {"las_long_run_s": 86400, "las_fifo_one_node": False, "las_lowest_queue_first": False}
    PolicyVersion.objects.create(
        number=7,
        created_at=timezone.now(),
        created_by_name="admin",
        reason="before the las section",
        source="edit",
        engine_config=flat,
    )
    selectors._DEPRECATIONS_LOGGED.discard(7)
    with caplog.at_level("WARNING", logger="policyversions.selectors"):
        for _ in range(3):  # three cycles
            config = policy_config()
    assert config == Config(
        victims_lowest_rank_first=False,
        las=Las(fifo_one_node_after_s=None, long_run_s=86400.0),
    )
    logged = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert logged == [
        "policy v7.las_fifo_one_node is deprecated: use las.fifo_one_node_after_s (false is null)",
        "policy v7.las_long_run_s is deprecated: use las.long_run_s (0 is null)",
        "policy v7.las_lowest_queue_first is deprecated: use victims_lowest_rank_first",
    ]
    # shown and compared by the new keys
    shown = selectors.effective_engine_config(flat)
    assert shown["las.long_run_s"] == 86400 and shown["victims_lowest_rank_first"] is False
    response = api_as(platform["admin"]).get("/api/v1/policy/")
    assert response.status_code == 200


@pytest.mark.django_db(transaction=True)
def test_two_admins_applying_at_once_the_second_is_a_conflict_not_a_500(
    platform, env_policy, api_as
):
    """Two admins apply changes read from the same version. The second waited for the first,
    then wrote the same version number again: an IntegrityError, a 500 in the API. Had it been
    numbered anew it would have undone the first change (its content came from the old version).
    It is now a 409 naming ``number``, and the first change stands alone."""
    from tests.integration.concurrency import race

    admin = platform["admin"]
    services.policy_version_seed()
    response = race(
        lambda: services.policy_apply(
            user=admin, reason="age faster", engine_config={"queue_aging_s": 3600}
        ),
        lambda: api_as(admin).post(
            "/api/v1/policy/versions",
            {"reason": "more for nlp", "team_weights": {"nlp": 3.0}},
            format="json",
        ),
    )
    assert response.status_code == 409, response.content
    assert "version 2 is in force now" in response.json()["number"][0]
    newest = PolicyVersion.objects.get(number=2)
    assert newest.engine_config == {"queue_aging_s": 3600} and newest.team_weights["nlp"] == 1.0
    assert PolicyVersion.objects.count() == 2
    assert Team.objects.get(slug="nlp").fair_share_weight == 1.0
    assert AuditEntry.objects.filter(action="policy.apply").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("weight_commits", ["before the apply reads", "while the apply waits"])
def test_a_weight_changed_under_teams_during_an_apply_is_kept(platform, env_policy, weight_commits):
    """An admin sets vision's weight to 5 under Teams while another applies an engine change.
    The apply read the weights before its transaction: a weight committed while it then waited
    for the version's lock was written back to the old 2.0 (silently undone), and one still
    uncommitted was recorded in the new version as 2.0 while the loop read 5. The apply now
    locks the teams before reading them, so it waits for the weight and keeps it."""
    from tests.integration.concurrency import race

    admin = platform["admin"]
    first = services.policy_version_seed()

    def set_weight():
        team_services.team_update(
            user=admin, team=Team.objects.get(slug="vision"), fair_share_weight=5
        )
        if weight_commits == "while the apply waits":
            # Holds the version as a concurrent policy write does, so the apply reads the
            # weights, then waits here until the weight is committed.
            PolicyVersion.objects.select_for_update().get(pk=first.pk)

    version = race(
        set_weight,
        lambda: services.policy_apply(
            user=admin, reason="age faster", engine_config={"queue_aging_s": 3600}
        ),
    )
    assert isinstance(version, PolicyVersion), version
    assert Team.objects.get(slug="vision").fair_share_weight == 5.0
    version.refresh_from_db()
    assert version.team_weights["vision"] == 5.0
    assert version.engine_config == {"queue_aging_s": 3600}
    updates = AuditEntry.objects.filter(action="team.update")
    assert [e.after["fair_share_weight"] for e in updates] == [5.0]
