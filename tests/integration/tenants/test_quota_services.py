"""quota_set and the team tree: validation naming the field, the overcommit confirmation,
platform-admin only, and an audit entry with before -> after for every change."""

import pytest

from core.errors import DomainError, FieldErrors
from tenants import entitlements as entitlement_services
from tenants import quotas as quota_services
from tenants import teams as team_services
from tenants.models import AuditEntry, PriorityClass, Quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def h100(gpu_models):
    return gpu_models["h100"]


@pytest.mark.parametrize(
    "guaranteed,borrow,field,needle",
    [
        (-1, 0, "guaranteed_gpus", ">= 0"),
        (1.5, 0, "guaranteed_gpus", "whole number"),
        ("2.5", 0, "guaranteed_gpus", "whole number"),
        (True, 0, "guaranteed_gpus", "whole number"),
        (1, -3, "borrow_limit_gpus", ">= 0"),
        (1, "many", "borrow_limit_gpus", "whole number"),
        # str.isdigit() says yes to both: int() refused the first with a ValueError (a
        # traceback) and read the second, an Arabic-Indic 3, as 3.
        ("²", 0, "guaranteed_gpus", "whole number"),
        (1, "٣", "borrow_limit_gpus", "whole number"),
    ],
)
def test_bad_values_are_refused_naming_the_field(platform, h100, guaranteed, borrow, field, needle):
    with pytest.raises(FieldErrors) as err:
        quota_services.quota_set(
            user=platform["admin"],
            team=platform["alice"].memberships.get().team,
            gpu_model=h100,
            guaranteed_gpus=guaranteed,
            borrow_limit_gpus=borrow,
        )
    assert needle in " ".join(err.value.errors[field])
    assert Quota.objects.count() == 0 and AuditEntry.objects.count() == 0


def test_only_platform_admins_set_quotas(platform, teams, h100):
    with pytest.raises(DomainError) as err:
        quota_services.quota_set(
            user=platform["alice"],
            team=teams["vision"],
            gpu_model=h100,
            guaranteed_gpus=1,
            borrow_limit_gpus=0,
        )
    assert err.value.status_code == 403
    assert Quota.objects.count() == 0 and AuditEntry.objects.count() == 0


def test_set_records_before_and_after(platform, teams, h100):
    admin = platform["admin"]
    quota_services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=4, borrow_limit_gpus=2
    )
    quota_services.quota_set(
        user=admin,
        team=teams["vision"],
        gpu_model=h100,
        guaranteed_gpus="6",
        borrow_limit_gpus=2,
        comment="grant",
    )
    quota = Quota.objects.get()
    assert (quota.guaranteed_gpus, quota.borrow_limit_gpus) == (6, 2)
    first, second = AuditEntry.objects.order_by("id")
    assert first.before is None and first.after["guaranteed_gpus"] == 4
    assert second.before["guaranteed_gpus"] == 4 and second.after["guaranteed_gpus"] == 6
    assert second.actor == admin and second.team == teams["vision"]
    assert second.comment == "grant" and second.action == "quota.set"
    # An unchanged save is not a change: no entry.
    quota_services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=6, borrow_limit_gpus=2
    )
    assert AuditEntry.objects.count() == 2


def test_guarantees_above_capacity_need_confirmation(platform, teams, h100):
    admin = platform["admin"]  # the cluster has 16 H100s
    quota_services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=10, borrow_limit_gpus=0
    )
    with pytest.raises(FieldErrors) as err:
        quota_services.quota_set(
            user=admin, team=teams["nlp"], gpu_model=h100, guaranteed_gpus=7, borrow_limit_gpus=0
        )
    message = " ".join(err.value.errors["guaranteed_gpus"])
    assert "sum to 17" in message and "capacity of 16" in message and "confirm" in message
    assert not Quota.objects.filter(team=teams["nlp"]).exists()
    quota_services.quota_set(
        user=admin,
        team=teams["nlp"],
        gpu_model=h100,
        guaranteed_gpus=7,
        borrow_limit_gpus=0,
        confirm_overcommit=True,
    )
    assert Quota.objects.get(team=teams["nlp"]).guaranteed_gpus == 7
    entry = AuditEntry.objects.latest("id")
    assert "overcommit confirmed" in entry.comment


def test_children_count_inside_their_parent(platform, teams, h100):
    admin = platform["admin"]
    quota_services.quota_set(
        user=admin, team=teams["research"], gpu_model=h100, guaranteed_gpus=12, borrow_limit_gpus=0
    )
    quota_services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=8, borrow_limit_gpus=0
    )
    # Children inside a parent's guarantee do not add to the cluster-wide sum (12 <= 16)...
    with pytest.raises(FieldErrors) as err:
        quota_services.quota_set(
            user=admin, team=teams["nlp"], gpu_model=h100, guaranteed_gpus=6, borrow_limit_gpus=0
        )
    # ...but they must fit in it: 8 + 6 > 12.
    assert "under research would sum to 14" in " ".join(err.value.errors["guaranteed_gpus"])
    quota_services.quota_set(
        user=admin, team=teams["nlp"], gpu_model=h100, guaranteed_gpus=4, borrow_limit_gpus=0
    )


def test_a_parent_cannot_be_lowered_below_its_childrens_guarantees(platform, teams, h100):
    admin = platform["admin"]
    for slug, gpus in (("research", 12), ("vision", 8), ("nlp", 4)):
        quota_services.quota_set(
            user=admin, team=teams[slug], gpu_model=h100, guaranteed_gpus=gpus, borrow_limit_gpus=0
        )
    entries = AuditEntry.objects.count()
    # The children's 12 no longer fit in 10: the same refusal as raising a child past it.
    with pytest.raises(FieldErrors) as err:
        quota_services.quota_set(
            user=admin,
            team=teams["research"],
            gpu_model=h100,
            guaranteed_gpus=10,
            borrow_limit_gpus=0,
        )
    assert "under research would sum to 12, above its own guarantee of 10" in " ".join(
        err.value.errors["guaranteed_gpus"]
    )
    assert Quota.objects.get(team=teams["research"]).guaranteed_gpus == 12
    assert AuditEntry.objects.count() == entries
    # A parent that takes a guarantee above children that hold theirs must cover them too.
    Quota.objects.filter(team=teams["research"]).delete()
    with pytest.raises(FieldErrors):
        quota_services.quota_set(
            user=admin,
            team=teams["research"],
            gpu_model=h100,
            guaranteed_gpus=6,
            borrow_limit_gpus=0,
        )
    assert not Quota.objects.filter(team=teams["research"]).exists()
    quota_services.quota_set(
        user=admin, team=teams["research"], gpu_model=h100, guaranteed_gpus=12, borrow_limit_gpus=0
    )


def test_team_tree_changes_are_audited_and_cycles_refused(platform, teams):
    admin = platform["admin"]
    team_services.team_update(user=admin, team=teams["vision"], fair_share_weight="3.5")
    teams["vision"].refresh_from_db()
    assert teams["vision"].fair_share_weight == 3.5
    entry = AuditEntry.objects.get(action="team.update")
    assert entry.before["fair_share_weight"] == 2.0 and entry.after["fair_share_weight"] == 3.5
    for bad in (-1, "nan", "x", float("inf")):
        with pytest.raises(FieldErrors) as err:
            team_services.team_update(user=admin, team=teams["vision"], fair_share_weight=bad)
        assert "fair_share_weight" in err.value.errors
    with pytest.raises(FieldErrors) as err:
        team_services.team_update(user=admin, team=teams["research"], parent=teams["vision"])
    assert "cycle" in err.value.errors["parent"][0]
    with pytest.raises(DomainError):
        team_services.team_update(user=platform["alice"], team=teams["vision"], fair_share_weight=9)
    child = team_services.team_create(
        user=admin, slug="vision-3d", name="3D", parent=teams["vision"]
    )
    assert child.parent == teams["vision"]
    assert AuditEntry.objects.filter(action="team.create", target_id=str(child.pk)).exists()


def test_priority_classes(platform):
    admin = platform["admin"]
    entitlement_services.priority_class_set(
        user=admin, name="urgent", value="2000", preemptible_by_default=False
    )
    assert PriorityClass.objects.get(name="urgent").value == 2000
    for value in (1.5, "²", "-٣"):
        with pytest.raises(FieldErrors) as err:
            entitlement_services.priority_class_set(user=admin, name="urgent", value=value)
        assert "value" in err.value.errors, value
    entitlement_services.priority_class_delete(user=admin, name="urgent")
    assert not PriorityClass.objects.filter(name="urgent").exists()
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["priority.set", "priority.delete"]
    with pytest.raises(DomainError):
        entitlement_services.priority_class_set(user=platform["alice"], name="mine", value=1)


def test_priority_class_in_use_is_a_conflict(platform, submit):
    assert submit(platform["alice"], priority_class="research").status_code == 201
    with pytest.raises(DomainError) as err:
        entitlement_services.priority_class_delete(user=platform["admin"], name="research")
    assert err.value.status_code == 409
    assert PriorityClass.objects.filter(name="research").exists()


@pytest.mark.django_db(transaction=True)
def test_two_admins_cannot_together_overcommit_a_gpu_model(platform, teams, h100):
    """Two admins giving two teams 10 of the cluster's 16 H100s at the same moment: each check
    read the other's guarantee as still 0, both saves passed and the guarantees summed to 20
    without anyone confirming an overcommit. The second now waits and is refused."""
    from tests.integration.concurrency import race

    admin = platform["admin"]

    def give(team):
        return quota_services.quota_set(
            user=admin, team=team, gpu_model=h100, guaranteed_gpus=10, borrow_limit_gpus=0
        )

    second = race(lambda: give(teams["vision"]), lambda: give(teams["nlp"]))
    assert isinstance(second, FieldErrors)
    assert "sum to 20" in " ".join(second.errors["guaranteed_gpus"])
    assert list(Quota.objects.values_list("team__slug", "guaranteed_gpus")) == [("vision", 10)]
    assert AuditEntry.objects.filter(action="quota.set").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("shape", ["swap", "triangle"])
def test_two_admins_moving_teams_at_once_cannot_make_a_cycle(platform, teams, shape):
    """Two admins move teams at the same moment. Each cycle check read the tree from before
    the other's move. With a -> b (c under a already) and b -> c, both passed and the tree held
    the cycle a -> b -> c -> a; with vision under nlp and nlp under vision, the two transactions
    deadlocked on each other's foreign-key check (a 500). The second move now waits for the
    first and is refused."""
    from tenants.models import Team
    from tests.integration.concurrency import race

    admin = platform["admin"]
    if shape == "swap":
        (x, y), (u, v) = (teams["vision"], teams["nlp"]), (teams["nlp"], teams["vision"])
    else:
        a = Team.objects.create(slug="a", name="A")
        b = Team.objects.create(slug="b", name="B")
        Team.objects.create(slug="c", name="C", parent=a)
        (x, y), (u, v) = (a, b), (b, Team.objects.get(slug="c"))
    before = dict(Team.objects.values_list("slug", "parent__slug"))
    second = race(
        lambda: team_services.team_update(user=admin, team=x, parent=y),
        lambda: team_services.team_update(user=admin, team=u, parent=v),
    )
    assert isinstance(second, FieldErrors) and "cycle" in second.errors["parent"][0]
    assert dict(Team.objects.values_list("slug", "parent__slug")) == {**before, x.slug: y.slug}
    assert AuditEntry.objects.filter(action="team.update").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_weight_change_racing_a_move_audits_the_parent_the_team_has(platform, teams):
    """One admin moves vision under nlp while another changes its weight. The weight change
    waited for the move, then audited vision's parent from the row read before the wait
    (research), twice: before and after both said research while vision sat under nlp."""
    from tests.integration.concurrency import race

    admin = platform["admin"]
    vision = teams["vision"]
    race(
        lambda: team_services.team_update(user=admin, team=vision, parent=teams["nlp"]),
        lambda: team_services.team_update(user=admin, team=vision, fair_share_weight=5),
    )
    entry = AuditEntry.objects.filter(action="team.update").latest("id")
    assert entry.before["parent"] == "nlp" and entry.after["parent"] == "nlp"
    assert entry.before["fair_share_weight"] == 2.0 and entry.after["fair_share_weight"] == 5.0
    vision.refresh_from_db()
    assert vision.parent == teams["nlp"] and vision.fair_share_weight == 5.0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "change,submission_first",
    [
        ("quota", True),
        ("quota", False),
        ("membership", True),
        ("membership", False),
        ("move", True),
        ("move", False),
        ("entitlements", True),
    ],
)
def test_a_tenancy_change_and_a_submission_to_the_team_at_once_both_succeed(
    platform, teams, h100, change, submission_first
):
    """A submission holds its team's row (the pending caps) and checks the rows it references
    (team, GPU model, class, user) at commit; quota, membership, tree and entitlement changes
    lock the GPU model's or the team's row and write rows referencing them. Their locks must
    not wait on each other both ways: no deadlock (as a quota change and a submission did),
    both succeed, in either order."""
    from scheduler.models import Job
    from scheduler.services import JobRequest, job_submit
    from tests.integration.concurrency import race

    admin, vision = platform["admin"], teams["vision"]
    request = JobRequest(
        name="train", team="vision", workers=1, gpus_per_worker=1, gpu_model="h100-80gb"
    )
    changes = {
        "quota": lambda: quota_services.quota_set(
            user=admin, team=vision, gpu_model=h100, guaranteed_gpus=4, borrow_limit_gpus=0
        ),
        "membership": lambda: team_services.membership_set(
            user=admin, team=vision, username="bob", role="viewer"
        ),
        "move": lambda: team_services.team_update(user=admin, team=vision, parent=None),
        "entitlements": lambda: entitlement_services.entitlements_set(
            user=admin, team=vision, priority_classes=[], may_opt_out_of_preemption=True
        ),
    }
    submit = lambda: job_submit(user=platform["alice"], request=request)  # noqa: E731
    first, second = (submit, changes[change]) if submission_first else (changes[change], submit)
    outcome = race(first, second)
    assert not isinstance(outcome, Exception), repr(outcome)
    assert Job.objects.filter(team=vision).count() == 1
    assert AuditEntry.objects.count() == 1


def test_a_quota_keeps_its_team_and_gpu_model_on_put_and_patch(platform, teams, h100, api_as):
    admin = platform["admin"]
    vision = quota_services.quota_set(
        user=admin, team=teams["vision"], gpu_model=h100, guaranteed_gpus=4, borrow_limit_gpus=0
    )
    url = f"/api/v1/quotas/{vision.pk}/"
    entries = AuditEntry.objects.count()
    api = api_as(admin)
    moved = api.patch(url, {"gpu_model": "a100-40gb"}, format="json")
    assert moved.status_code == 400
    assert "cannot change" in moved.json()["gpu_model"][0]
    body = {"team": "nlp", "gpu_model": "h100-80gb", "guaranteed_gpus": 1, "borrow_limit_gpus": 0}
    assert "cannot change" in api.put(url, body, format="json").json()["team"][0]
    # Nothing else was written: no a100 quota for vision, none for nlp, this one as it was.
    assert list(Quota.objects.values_list("team__slug", "gpu_model__name", "guaranteed_gpus")) == [
        ("vision", "h100-80gb", 4)
    ]
    assert AuditEntry.objects.count() == entries
    # Naming its own team and model is fine: the numbers change.
    body["team"] = "vision"
    changed = api.put(url, body, format="json")
    assert changed.status_code == 200 and changed.json()["id"] == vision.pk
    assert Quota.objects.get().guaranteed_gpus == 1
