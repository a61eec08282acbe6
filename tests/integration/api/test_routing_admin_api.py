"""The admin API for routing facts (docs/routing.md, "Admins: setting the facts"): platform
admins set a cluster's region and interconnect, describe datasets with their copies and egress
prices, and hold teams to clusters; everyone else gets a 403 and changes nothing; bad input is a
400 naming each field and writes nothing; every change leaves an audit entry, and the snapshot
reads what was set."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler.models import Cluster, ClusterDataset, Dataset, TeamClusterAccess
from scheduler.snapshot import build_snapshot
from tenants.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def cloud(platform):
    return Cluster.objects.create(name="cloud", backend_kind="simulated", region="us-east")


def test_an_admin_sets_a_clusters_region_and_interconnect_audited(platform, api_as, cloud):
    admin = api_as(platform["admin"])
    response = admin.patch(
        "/api/v1/admin/clusters/test/",
        {"region": "eu-west", "interconnect": "ethernet"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["region"] == "eu-west"
    cluster = Cluster.objects.get(name="test")
    assert (cluster.region, cluster.interconnect) == ("eu-west", "ethernet")
    (entry,) = AuditEntry.objects.filter(action="cluster.routing_set")
    assert entry.actor == platform["admin"] and entry.target_repr == "test"
    assert entry.before == {"region": "", "interconnect": "infiniband"}
    assert entry.after == {"region": "eu-west", "interconnect": "ethernet"}
    listed = {c["name"]: c for c in admin.get("/api/v1/admin/clusters/").json()}
    assert listed["test"]["interconnect"] == "ethernet" and listed["cloud"]["region"] == "us-east"


def test_bad_cluster_facts_are_400s_naming_the_field_and_change_nothing(platform, api_as):
    admin = api_as(platform["admin"])
    for body, field, reason in (
        ({"region": "EU West"}, "region", "is not a region name"),
        ({"interconnect": "carrier-pigeon"}, "interconnect", "must be one of"),
        ({"regoin": "eu-west"}, "regoin", "unknown field"),
    ):
        response = admin.patch("/api/v1/admin/clusters/test/", body, format="json")
        assert response.status_code == 400, body
        assert reason in response.json()[field][0], response.json()
    assert admin.patch("/api/v1/admin/clusters/nowhere/", {}, format="json").status_code == 404
    cluster = Cluster.objects.get(name="test")
    assert (cluster.region, cluster.interconnect) == ("", "infiniband")
    assert not AuditEntry.objects.exists()


def test_datasets_with_copies_are_created_changed_and_deleted_audited(platform, api_as, cloud):
    admin = api_as(platform["admin"])
    created = admin.post(
        "/api/v1/admin/datasets/",
        {
            "name": "c4",
            "size_gb": 800,
            "residency_regions": ["eu-west", "eu-central"],
            "copies": [
                {"cluster": "test", "egress_price_per_gb": "0.02"},
                {"cluster": "cloud", "egress_price_per_gb": 0.09},
            ],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["residency_regions"] == ["eu-west", "eu-central"]
    assert {c["cluster"]: c["egress_price_per_gb"] for c in body["copies"]} == {
        "cloud": "0.0900",
        "test": "0.0200",
    }
    dataset = Dataset.objects.get(name="c4")
    # the engine reads it: residency and the copies' egress prices
    Cluster.objects.filter(name="test").update(region="eu-west")
    snapshot, _ = build_snapshot(now=timezone.now())
    assert [(d.name, d.regions) for d in snapshot.datasets] == [("c4", ("eu-west", "eu-central"))]
    assert {c.name: c.datasets for c in snapshot.clusters}["test"] == {"c4": 0.02}

    changed = admin.patch(
        f"/api/v1/admin/datasets/{dataset.pk}/",
        {"residency_regions": None, "copies": [{"cluster": "test", "egress_price_per_gb": 0}]},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    dataset.refresh_from_db()
    assert dataset.residency_regions is None and dataset.size_gb == 800
    assert list(dataset.copies.values_list("cluster__name", flat=True)) == ["test"]

    assert admin.delete(f"/api/v1/admin/datasets/{dataset.pk}/").status_code == 204
    assert not Dataset.objects.exists() and not ClusterDataset.objects.exists()
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["dataset.create", "dataset.update", "dataset.delete"]
    update = AuditEntry.objects.get(action="dataset.update")
    assert update.before["residency_regions"] == ["eu-west", "eu-central"]
    assert update.after["residency_regions"] is None and len(update.after["copies"]) == 1


def test_bad_datasets_are_400s_naming_every_field_and_write_nothing(platform, api_as, cloud):
    admin = api_as(platform["admin"])
    Dataset.objects.create(name="taken")
    response = admin.post(
        "/api/v1/admin/datasets/",
        {
            "name": "c4",
            "size_gb": -5,
            "residency_regions": ["eu-west", "Mars Base"],
            "copies": [
                {"cluster": "test", "egress_price_per_gb": -0.01},
                {"cluster": "nowhere", "egress_price_per_gb": 0.01},
                {"cluster": "cloud", "egress_price_per_gb": 0.01},
                {"cluster": "cloud", "egress_price_per_gb": 0.02},
            ],
        },
        format="json",
    )
    assert response.status_code == 400
    errors = response.json()
    assert errors["size_gb"] == ["must be >= 0"]
    assert "is not a region name" in errors["residency_regions[1]"][0]
    assert errors["copies[0].egress_price_per_gb"] == ["must be >= 0"]
    assert errors["copies[1].cluster"] == ["no cluster is named 'nowhere'"]
    assert errors["copies[3].cluster"] == ["'cloud' listed twice"]
    duplicate = admin.post("/api/v1/admin/datasets/", {"name": "taken"}, format="json")
    assert duplicate.status_code == 400
    assert duplicate.json()["name"] == ["a dataset named 'taken' exists already"]
    missing = admin.post("/api/v1/admin/datasets/", {"size_gb": 1}, format="json")
    assert missing.status_code == 400 and missing.json()["name"] == ["is required"]
    assert list(Dataset.objects.values_list("name", flat=True)) == ["taken"]
    assert not ClusterDataset.objects.exists() and not AuditEntry.objects.exists()


def test_teams_clusters_are_replaced_and_emptied_audited(platform, api_as, cloud, teams):
    admin = api_as(platform["admin"])
    response = admin.put(
        "/api/v1/admin/team-clusters/vision/", {"clusters": ["cloud", "test"]}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["clusters"] == ["cloud", "test"]
    snapshot, _ = build_snapshot(now=timezone.now())
    assert {t.name: t.clusters for t in snapshot.teams}["vision"] == ("cloud", "test")

    bad = admin.put(
        "/api/v1/admin/team-clusters/vision/", {"clusters": ["test", "tset", "test"]}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json() == {
        "clusters[1]": ["no cluster is named 'tset'"],
        "clusters[2]": ["'test' listed twice"],
    }
    assert set(TeamClusterAccess.objects.values_list("cluster__name", flat=True)) == {
        "cloud",
        "test",
    }
    emptied = admin.put("/api/v1/admin/team-clusters/vision/", {"clusters": []}, format="json")
    assert emptied.status_code == 200 and emptied.json()["clusters"] == []
    assert not TeamClusterAccess.objects.exists()
    entries = AuditEntry.objects.filter(action="team.clusters_set").order_by("id")
    assert [(e.before, e.after) for e in entries] == [
        ({"clusters": []}, {"clusters": ["cloud", "test"]}),
        ({"clusters": ["cloud", "test"]}, {"clusters": []}),
    ]
    assert all(e.team == teams["vision"] for e in entries)
    missing = admin.put("/api/v1/admin/team-clusters/nope/", {"clusters": []}, format="json")
    assert missing.status_code == 404


def test_a_list_that_leaves_a_team_no_cluster_in_common_with_its_ancestors_is_a_400(
    platform, api_as, cloud, teams
):
    """The clusters a team may use are its list intersected with its ancestors' (docs/routing.md);
    a list that makes that empty, for the team or for a sub-team below it, left every job of
    that team pending for ever. It is refused, naming the team and the lists, and nothing is
    written; emptying a list (any cluster) never is."""
    admin = api_as(platform["admin"])

    def put(slug, clusters):
        return admin.put(
            f"/api/v1/admin/team-clusters/{slug}/", {"clusters": clusters}, format="json"
        )

    assert put("research", ["test"]).status_code == 200
    disjoint = put("vision", ["cloud"])
    assert disjoint.status_code == 400, disjoint.json()
    message = disjoint.json()["clusters"][0]
    assert "no cluster in common" in message and "research" in message and "test" in message
    assert put("vision", ["cloud", "test"]).status_code == 200
    assert put("research", ["cloud"]).status_code == 200  # vision keeps cloud
    assert put("vision", ["test"]).status_code == 400  # research now allows cloud only
    assert put("nlp", ["cloud"]).status_code == 200
    # From above: research's new list would leave nlp (cloud) with nothing.
    above = put("research", ["test"])
    assert above.status_code == 400, above.json()
    assert "nlp" in above.json()["clusters"][0]
    assert sorted(TeamClusterAccess.objects.values_list("team__slug", "cluster__name")) == [
        ("nlp", "cloud"),
        ("research", "cloud"),
        ("vision", "cloud"),
        ("vision", "test"),
    ]
    assert put("research", []).status_code == 200


def test_a_team_clusters_list_of_300000_bad_names_lists_20_and_counts_the_rest(
    platform, api_as, cloud
):
    """Each unknown or repeated name was listed (tens of MB of 400 body for 300,000 names), and
    each repeat was looked for in the list of names kept so far (quadratic: quicker than the
    test's own time limit now, not before)."""
    admin = api_as(platform["admin"])
    names = ["test", *(f"tset-{i}" for i in range(150_000)), *(["test"] * 150_000)]
    bad = admin.put("/api/v1/admin/team-clusters/vision/", {"clusters": names}, format="json")
    assert bad.status_code == 400
    assert len(bad.content) < 4_000, len(bad.content)
    body = bad.json()
    assert list(body)[:20] == [f"clusters[{i}]" for i in range(1, 21)]
    assert body["clusters[1]"] == ["no cluster is named 'tset-0'"]
    assert body["clusters"] == ["and 299980 more not shown"]
    assert not TeamClusterAccess.objects.exists()


@pytest.mark.parametrize("who", ["alice", "charlie", "anonymous"])
def test_everyone_but_a_platform_admin_is_refused_and_changes_nothing(platform, api_as, cloud, who):
    client = api_as(None if who == "anonymous" else platform[who])
    dataset = Dataset.objects.create(name="c4", size_gb=1)
    expected = 401 if who == "anonymous" else 403
    for method, path, body in (
        ("get", "/api/v1/admin/clusters/", None),
        ("patch", "/api/v1/admin/clusters/test/", {"region": "eu-west"}),
        ("get", "/api/v1/admin/datasets/", None),
        ("post", "/api/v1/admin/datasets/", {"name": "x"}),
        ("patch", f"/api/v1/admin/datasets/{dataset.pk}/", {"size_gb": 2}),
        ("delete", f"/api/v1/admin/datasets/{dataset.pk}/", None),
        ("get", "/api/v1/admin/team-clusters/", None),
        ("put", "/api/v1/admin/team-clusters/vision/", {"clusters": ["test"]}),
    ):
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code == expected, (method, path, response.status_code)
    assert Cluster.objects.get(name="test").region == ""
    assert list(Dataset.objects.values_list("name", "size_gb")) == [("c4", 1.0)]
    assert not TeamClusterAccess.objects.exists() and not AuditEntry.objects.exists()


def test_a_dataset_size_beyond_the_float_range_is_a_400_not_a_500(platform, api_as):
    admin = api_as(platform["admin"])
    created = admin.post(
        "/api/v1/admin/datasets/", {"name": "ovf", "size_gb": 10**309}, format="json"
    )
    assert created.status_code == 400 and created.json()["size_gb"] == ["must be >= 0"]
    assert not Dataset.objects.exists()
    dataset = Dataset.objects.create(name="c4", size_gb=10)
    changed = admin.patch(
        f"/api/v1/admin/datasets/{dataset.pk}/", {"size_gb": 10**309}, format="json"
    )
    assert changed.status_code == 400 and "size_gb" in changed.json()
    dataset.refresh_from_db()
    assert dataset.size_gb == 10
