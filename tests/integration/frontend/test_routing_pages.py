"""Routing in the portal: the submit form's "Where to run" fields become the job's routing
object (and the finish estimate's; a resubmission keeps it) and their refusals (from the same
``routing_errors`` as the API) show next to the field;
the cluster page shows each cluster's routing facts; the platform admins' routing facts page
sets them (audited), refuses bad input next to the field writing nothing, and is a 403 for
everyone else."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from frontend.forms import JobSubmitForm
from scheduler.models import Cluster, ClusterDataset, Dataset, Job, TeamClusterAccess
from tenants.models import AuditEntry, Team
from tests.integration.routing_setup import make_two_clusters, run_one_cycle

pytestmark = pytest.mark.django_db

FORM = {"name": "routed", "team": "vision", "workers": "1", "gpus_per_worker": "1"}


@pytest.fixture
def two_clusters(platform, gpu_models):
    return make_two_clusters(platform, gpu_models)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def errors_for(page: str, field: str) -> list[str]:
    block = re.search(rf'data-errors-for="{field}">(.*?)</ul>', page, re.S)
    return (
        [html.unescape(e) for e in re.findall(r"<li>(.*?)</li>", block.group(1))] if block else []
    )


def text_of(response) -> str:
    raw = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html.unescape(raw))


# --- the submit form ------------------------------------------------------------------------


def test_the_form_offers_clusters_and_regions_and_stores_the_routing(two_clusters):
    alice = client_for(two_clusters["alice"])
    page = alice.get("/jobs/new/").content.decode()
    assert re.search(r'<select name="routing_clusters"[^>]*multiple', page)
    assert re.search(r'<select name="routing_prefer_clusters"[^>]*multiple', page)
    for option in ("cloud", "test", "eu-west", "us-east"):
        assert f'<option value="{option}">' in page
    response = alice.post(
        "/jobs/new/",
        {
            **FORM,
            "routing_clusters": ["test", "cloud"],
            "routing_regions": ["eu-west"],
            "routing_prefer_clusters": ["test", "cloud"],
            "routing_max_price": "2.5",
            "routing_spot": "no",
        },
    )
    assert response.status_code == 302, errors_for(response.content.decode(), "__all__")
    assert Job.objects.get().routing == {
        "clusters": ["test", "cloud"],
        "regions": ["eu-west"],
        "prefer_clusters": ["test", "cloud"],
        "prefer_regions": [],
        "max_price_per_gpu_h": 2.5,
        "spot": False,
        "comm_heavy": None,
    }


def test_a_form_without_routing_sets_none(two_clusters):
    response = client_for(two_clusters["alice"]).post("/jobs/new/", FORM)
    assert response.status_code == 302
    assert Job.objects.get().routing is None


@pytest.mark.parametrize(
    "changes, field, message",
    [
        ({"routing_clusters": ["tset"]}, "routing_clusters", "no cluster is named 'tset'"),
        ({"routing_regions": ["mars"]}, "routing_regions", "no cluster is in region 'mars'"),
        (
            {"routing_prefer_clusters": ["test", "nope"]},
            "routing_prefer_clusters",
            "no cluster is named 'nope'",
        ),
        (
            {"routing_prefer_regions": ["eu-west", "mars"]},
            "routing_prefer_regions",
            "no cluster is in region 'mars'",
        ),
        (
            {"routing_comm_heavy": "maybe"},
            "routing_comm_heavy",
            "Select a valid choice. maybe is not one of the available choices.",
        ),
        (
            {"routing_max_price": "-1"},
            "routing_max_price",
            "Ensure this value is greater than or equal to 0.",
        ),
    ],
)
def test_routing_refusals_show_next_to_the_field_and_write_nothing(
    two_clusters, changes, field, message
):
    response = client_for(two_clusters["alice"]).post("/jobs/new/", {**FORM, **changes})
    assert response.status_code == 400
    assert errors_for(response.content.decode(), field) == [message]
    assert not Job.objects.exists()


@pytest.mark.parametrize("choice, stored", [("yes", True), ("no", False), ("", None)])
def test_the_form_sets_preferred_regions_and_comm_heavy(two_clusters, choice, stored):
    alice = client_for(two_clusters["alice"])
    page = alice.get("/jobs/new/").content.decode()
    assert re.search(r'<select name="routing_prefer_regions"[^>]*multiple', page)
    assert 'aria-describedby="id_routing_comm_heavy_help"' in page
    assert '<option value="" selected>Automatic (more than one worker)</option>' in page
    response = alice.post(
        "/jobs/new/",
        {**FORM, "routing_prefer_regions": ["us-east", "eu-west"], "routing_comm_heavy": choice},
    )
    assert response.status_code == 302, errors_for(response.content.decode(), "__all__")
    routing = Job.objects.get().routing
    assert routing["prefer_regions"] == ["us-east", "eu-west"]
    assert routing["comm_heavy"] is stored


def test_automatic_comm_heavy_is_left_out_of_the_routing_object(two_clusters):
    # As the other fields do when unset: the request names only what the user chose.
    clusters = Cluster.objects.all()
    automatic = JobSubmitForm({**FORM, "routing_comm_heavy": ""}, clusters=clusters)
    assert automatic.is_valid(), automatic.errors
    assert automatic.to_request().routing is None
    chosen = JobSubmitForm(
        {**FORM, "routing_prefer_regions": ["us-east"], "routing_comm_heavy": "no"},
        clusters=clusters,
    )
    assert chosen.is_valid(), chosen.errors
    assert chosen.to_request().routing == {"prefer_regions": ["us-east"], "comm_heavy": False}


def test_the_estimate_passes_preferred_regions_and_comm_heavy(two_clusters):
    alice = client_for(two_clusters["alice"])
    # An unknown preferred region is refused on the estimate too, next to its field.
    response = alice.post(
        "/jobs/new/", {**FORM, "estimate": "1", "routing_prefer_regions": ["mars"]}
    )
    assert response.status_code == 400
    assert errors_for(response.content.decode(), "routing_prefer_regions") == [
        "no cluster is in region 'mars'"
    ]
    # On Ethernet a communication-heavy gang must fit on one node: two workers of 8 H100s on
    # the two 8-GPU H100 nodes start now only when the user says the job is not one.
    Cluster.objects.filter(name="test").update(interconnect="ethernet")
    gang = {
        **FORM,
        "estimate": "1",
        "workers": "2",
        "gpus_per_worker": "8",
        "gpu_model": "h100-80gb",
        "runtime_limit_s": "3600",
        "routing_clusters": ["test"],
    }
    for choice, starts in (("no", True), ("yes", False), ("", False)):
        response = alice.post("/jobs/new/", {**gang, "routing_comm_heavy": choice})
        assert response.status_code == 200, choice
        assert ("starts now" in text_of(response)) is starts, choice
    assert not Job.objects.exists()


def test_a_resubmission_keeps_preferred_regions_and_comm_heavy(two_clusters):
    alice = client_for(two_clusters["alice"])
    response = alice.post(
        "/jobs/new/",
        {
            **FORM,
            "simulated_duration_s": "10000",
            "routing_prefer_regions": ["us-east"],
            "routing_comm_heavy": "no",
        },
    )
    assert response.status_code == 302
    job = Job.objects.get()
    run_one_cycle()
    job.refresh_from_db()
    assert job.state == "running"  # an attempt, so a record to resubmit from
    response = alice.post(f"/jobs/{job.pk}/resubmit/", {"attempt": "1"})
    assert response.status_code == 302
    again = Job.objects.exclude(pk=job.pk).get()
    assert again.routing == job.routing
    assert (again.routing["prefer_regions"], again.routing["comm_heavy"]) == (["us-east"], False)


# --- the cluster page -----------------------------------------------------------------------


def test_the_cluster_page_shows_each_clusters_routing_facts(two_clusters):
    dataset = Dataset.objects.create(name="c4", size_gb=10)
    ClusterDataset.objects.create(
        cluster=two_clusters["cluster"], dataset=dataset, egress_price_per_gb="0.02"
    )
    TeamClusterAccess.objects.create(
        team=Team.objects.get(slug="vision"), cluster=two_clusters["cloud"]
    )
    page = text_of(client_for(two_clusters["alice"]).get("/cluster/"))
    assert "Region eu-west · InfiniBand between nodes" in page
    assert "Region us-east · Ethernet between nodes" in page
    assert "h100-80gb on demand 2.00 USD/GPU-h, h100-80gb spot 0.80 USD/GPU-h" in page
    assert "holds c4 (egress 0.02 USD/GB)" in page
    # which teams are held to which clusters is for admins
    assert "cluster lists of teams" not in page and "Edit routing facts" not in page
    admin_page = text_of(client_for(two_clusters["admin"]).get("/cluster/"))
    assert "in the cluster lists of teams vision" in admin_page
    assert "Edit routing facts" in admin_page


# --- the admin page -------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "charlie"])
def test_the_routing_facts_page_is_for_platform_admins_only(two_clusters, who):
    client = client_for(two_clusters[who])
    dataset = Dataset.objects.create(name="c4")
    assert client.get("/cluster/routing/").status_code == 403
    for path, body in (
        ("/cluster/routing/clusters/test/", {"c-1-region": "x", "c-1-interconnect": "ethernet"}),
        ("/cluster/routing/datasets/new/", {"new-name": "x"}),
        (f"/cluster/routing/datasets/{dataset.pk}/delete/", {}),
        ("/cluster/routing/teams/vision/", {}),
    ):
        assert client.post(path, body).status_code == 403, path
    assert Cluster.objects.get(name="test").region == "eu-west"
    assert list(Dataset.objects.values_list("name", flat=True)) == ["c4"]
    assert not AuditEntry.objects.exists()


def test_an_admin_sets_every_fact_from_the_page_audited(two_clusters):
    admin = client_for(two_clusters["admin"])
    test = two_clusters["cluster"]
    assert admin.get("/cluster/routing/").status_code == 200

    response = admin.post(
        "/cluster/routing/clusters/test/",
        {f"c-{test.pk}-region": "eu-central", f"c-{test.pk}-interconnect": "nvlink"},
    )
    assert response.status_code == 302
    test.refresh_from_db()
    assert (test.region, test.interconnect) == ("eu-central", "nvlink")

    response = admin.post(
        "/cluster/routing/datasets/new/",
        {
            "new-name": "c4",
            "new-size_gb": "800",
            "new-residency": "eu-central, us-east",
            "new-copies": "test=0.02\ncloud=0.05\n",
        },
    )
    assert response.status_code == 302
    dataset = Dataset.objects.get()
    assert dataset.residency_regions == ["eu-central", "us-east"] and dataset.size_gb == 800
    assert {c.cluster.name: str(c.egress_price_per_gb) for c in dataset.copies.all()} == {
        "test": "0.0200",
        "cloud": "0.0500",
    }
    page = admin.get("/cluster/routing/").content.decode()
    assert "cloud=0.05\ntest=0.02</textarea>" in page  # the edit form holds what is in force

    response = admin.post(
        f"/cluster/routing/datasets/{dataset.pk}/",
        {
            f"d-{dataset.pk}-name": "c4",
            f"d-{dataset.pk}-residency": "",
            f"d-{dataset.pk}-copies": "",
        },
    )
    assert response.status_code == 302
    dataset.refresh_from_db()
    assert dataset.residency_regions is None and dataset.size_gb is None
    assert not dataset.copies.exists()

    vision = Team.objects.get(slug="vision")
    response = admin.post("/cluster/routing/teams/vision/", {f"t-{vision.pk}-clusters": ["cloud"]})
    assert response.status_code == 302
    assert list(TeamClusterAccess.objects.values_list("cluster__name", flat=True)) == ["cloud"]

    assert admin.post(f"/cluster/routing/datasets/{dataset.pk}/delete/").status_code == 302
    assert not Dataset.objects.exists()
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "cluster.routing_set",
        "dataset.create",
        "dataset.update",
        "team.clusters_set",
        "dataset.delete",
    ]


def test_bad_facts_on_the_page_show_next_to_the_field_and_write_nothing(two_clusters):
    admin = client_for(two_clusters["admin"])
    test = two_clusters["cluster"]
    response = admin.post(
        "/cluster/routing/clusters/test/",
        {f"c-{test.pk}-region": "EU West", f"c-{test.pk}-interconnect": "ethernet"},
    )
    assert response.status_code == 400
    (error,) = errors_for(response.content.decode(), "region")
    assert "is not a region name" in error
    response = admin.post(
        "/cluster/routing/datasets/new/",
        {"new-name": "c4", "new-size_gb": "-1", "new-copies": "test=0.02\nnowhere=1\ncloud=-3"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert errors_for(page, "size_gb") == ["Ensure this value is greater than or equal to 0."]
    response = admin.post(
        "/cluster/routing/datasets/new/",
        {
            "new-name": "c4",
            "new-residency": "eu-west, Mars",
            "new-copies": "test=0.02\nnowhere=1\ncloud=-3",
        },
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "is not a region name" in errors_for(page, "residency")[0]
    assert errors_for(page, "copies") == [
        "copy 2: no cluster is named 'nowhere'",
        "copy 3: must be >= 0",
    ]
    test.refresh_from_db()
    assert (test.region, test.interconnect) == ("eu-west", "infiniband")
    assert not Dataset.objects.exists() and not AuditEntry.objects.exists()
