"""Routing across clusters, database side: the snapshot carries the clusters' facts only when
there is something to route, the price book in force reaches the engine per cluster, and a job
started on a routed snapshot records where it runs and why there."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PriceRate
from scheduler.loop.cycle import run_cycle
from scheduler.models import ClusterDataset, Dataset, Job, TeamClusterAccess
from scheduler.policy import snapshot_from_dict, snapshot_to_dict
from scheduler.snapshot import build_snapshot
from tenants.models import Team
from tests.integration.routing_setup import make_two_clusters

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_clusters(platform, gpu_models):
    """The ``test`` cluster (on-prem, eu-west) plus a cloud of two H100 nodes in us-east, one of
    them spot; the book prices H100 at 2.00 on demand and 0.80 spot."""
    return make_two_clusters(platform, gpu_models)


def test_one_cluster_without_constraints_lists_no_clusters(platform, submit):
    submit(platform["alice"], gpu_model="h100-80gb")
    snapshot, _ = build_snapshot(now=timezone.now())
    assert snapshot.clusters == () and snapshot.datasets == ()
    assert {n.cluster for n in snapshot.nodes} == {""}


def test_one_cluster_with_a_job_routing_constraint_is_routed(platform, submit):
    # The book has no price: a job with a price cap may run nowhere, and says so.
    response = submit(
        platform["alice"], gpu_model="h100-80gb", routing={"max_price_per_gpu_h": 1.0}
    )
    assert response.status_code == 201, response.json()
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == "pending"
    assert job.why_pending.startswith("no allowed cluster can ever hold it")
    assert "has no price, above the job's cap of 1" in job.why_pending


def test_a_routing_typo_is_a_400_naming_the_field(platform, submit):
    for routing, field, reason in (
        ({"regions": ["mars"]}, "routing.regions[0]", "no cluster is in region 'mars'"),
        ({"clusters": ["tset"]}, "routing.clusters[0]", "no cluster is named 'tset'"),
        ({"spto": True}, "routing.spto", "unknown routing field"),
        ({"max_price_per_gpu_h": -1}, "routing.max_price_per_gpu_h", "must be >= 0"),
        ([], "routing", "must be an object"),
    ):
        response = submit(platform["alice"], routing=routing)
        assert response.status_code == 400, routing
        assert response.json()[field] == [reason], response.json()
    assert not Job.objects.exists()


def test_a_routing_list_of_100000_names_is_answered(platform, submit):
    """The check for a name listed twice searched the names read so far for each one: 100,000
    regions (a 1 MB body) held a web worker for about two minutes (50,000: about 30 s), about
    1 s now. Not timed here: tests/unit/policy/test_routing.py counts the comparisons."""
    names = [f"region-{i}" for i in range(100_000)]
    response = submit(platform["alice"], routing={"prefer_regions": names})
    assert response.status_code == 400
    assert response.json()["routing.prefer_regions"] == ["and 99980 more not shown"]
    doubled = submit(platform["alice"], routing={"prefer_regions": [*names, "region-7"]})
    assert doubled.json() == {"routing.prefer_regions[100000]": ["'region-7' listed twice"]}
    assert not Job.objects.exists()


def test_a_routing_list_of_300000_bad_names_lists_the_first_20_and_counts_the_rest(
    platform, submit
):
    """Every unknown name was listed: 300,000 of them (a 5 MB request) made a 400 body of tens
    of MB. The answer names the first 20, then how many more, per list."""
    clusters = [f"cluster-{i}" for i in range(300_000)]
    response = submit(
        platform["alice"], routing={"clusters": clusters, "regions": ["mars", "venus"]}
    )
    assert response.status_code == 400
    body = response.json()
    assert len(response.content) < 4_000, len(response.content)
    listed = [key for key in body if key.startswith("routing.clusters[")]
    assert listed == [f"routing.clusters[{i}]" for i in range(20)]
    assert body["routing.clusters[19]"] == ["no cluster is named 'cluster-19'"]
    assert body["routing.clusters"] == ["and 299980 more not shown"]
    # The cap is over the whole object: the regions list's problems are counted, not listed.
    assert body["routing.regions"] == ["and 2 more not shown"]
    assert not Job.objects.exists()
    # A short list is listed in full, with no count.
    few = submit(platform["alice"], routing={"clusters": ["tset", "tsst"]}).json()
    assert few == {
        "routing.clusters[0]": ["no cluster is named 'tset'"],
        "routing.clusters[1]": ["no cluster is named 'tsst'"],
    }


def test_two_clusters_carry_prices_regions_datasets_and_team_clusters(two_clusters, submit):
    dataset = Dataset.objects.create(name="c4", size_gb=500, residency_regions=["eu-west"])
    ClusterDataset.objects.create(
        cluster=two_clusters["cluster"], dataset=dataset, egress_price_per_gb=Decimal("0.05")
    )
    vision = Team.objects.get(slug="vision")
    TeamClusterAccess.objects.create(team=vision, cluster=two_clusters["cloud"])
    TeamClusterAccess.objects.create(team=vision, cluster=two_clusters["cluster"])
    submit(two_clusters["alice"], gpu_model="h100-80gb", dataset="c4", routing={"spot": False})

    snapshot, _ = build_snapshot(now=timezone.now())
    clusters = {c.name: c for c in snapshot.clusters}
    assert set(clusters) == {"test", "cloud"}
    assert clusters["cloud"].prices == {"h100-80gb": {"on_demand": 2.0, "spot": 0.8}}
    assert clusters["cloud"].interconnect == "ethernet" and clusters["cloud"].region == "us-east"
    assert clusters["test"].datasets == {"c4": 0.05} and clusters["cloud"].datasets == {}
    assert [(d.name, d.regions) for d in snapshot.datasets] == [("c4", ("eu-west",))]
    assert {t.name: t.clusters for t in snapshot.teams}["vision"] == ("cloud", "test")
    (pending,) = snapshot.pending
    assert pending.dataset_size_gb == 500 and pending.routing.spot is False
    assert {n.name: n.cluster for n in snapshot.nodes}["c2"] == "cloud"
    # what the loop keeps for dump_snapshot reads back as the same snapshot
    assert snapshot_from_dict(snapshot_to_dict(snapshot)) == snapshot


def test_residency_keeps_the_job_home_and_the_start_says_why_there(two_clusters, submit):
    dataset = Dataset.objects.create(name="c4", size_gb=500, residency_regions=["eu-west"])
    ClusterDataset.objects.create(cluster=two_clusters["cluster"], dataset=dataset)
    pinned = submit(two_clusters["alice"], gpu_model="h100-80gb", dataset="c4").json()["id"]
    free = submit(two_clusters["alice"], gpu_model="h100-80gb", routing={"spot": True}).json()["id"]
    run_cycle()

    pinned_job, free_job = Job.objects.get(pk=pinned), Job.objects.get(pk=free)
    assert pinned_job.state == free_job.state == "running"
    assert pinned_job.cluster.name == "test"
    (route,) = pinned_job.events.filter(kind="routed")
    assert route.data["cluster"] == "test"
    excluded = {a["pool"]: a["excluded"] for a in route.data["alternatives"]}
    assert "dataset c4 must stay in eu-west" in excluded["h100-80gb@cloud"]
    # the cheapest allowed pool: spot in the cloud at 0.80 (on-prem has no price here: 0)
    (free_route,) = free_job.events.filter(kind="routed")
    assert free_route.message.startswith(f"runs on {free_route.data['pool']}: expected")
    assert free_job.cluster.name == free_route.data["cluster"]


def test_a_cheaper_cluster_wins_and_the_event_names_the_alternatives(two_clusters, submit):
    # Price on-prem H100 above the cloud: a job that tolerates no spot goes to the cloud's
    # on-demand node, the cheapest pool it may use.
    onprem_book = PriceRate.objects.get(capacity="on_demand")
    PriceRate.objects.create(
        gpu_model=onprem_book.gpu_model,
        capacity="on_demand",
        effective_from=onprem_book.effective_from + timedelta(minutes=1),
        rate_per_gpu_hour=Decimal("1.50"),
    )
    job_id = submit(
        two_clusters["alice"], gpu_model="h100-80gb", runtime_limit_s=3600, routing={"spot": False}
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    (route,) = job.events.filter(kind="routed")
    # one book for every cluster: both on-demand pools cost 1.50; name order breaks the tie
    assert route.data["expected_cost"] == 1.5
    assert route.data["price_per_gpu_h"] == 1.5
    spot = {a["pool"]: a for a in route.data["alternatives"]}["h100-80gb@cloud/spot"]
    assert (
        spot["excluded"]
        == "h100-80gb@cloud/spot is spot capacity and the job does not tolerate spot"
    )
    assert job.cluster.name == route.data["cluster"]


def test_the_finish_estimate_honours_where_the_job_may_run(two_clusters, submit):
    from scheduler.feasibility import job_feasibility
    from scheduler.services import JobRequest

    only_cloud_on_demand = {"clusters": ["cloud"], "spot": False}
    first = submit(
        two_clusters["alice"],
        gpu_model="h100-80gb",
        gpus_per_worker=8,
        runtime_limit_s=3600,
        routing=only_cloud_on_demand,
    ).json()["id"]
    run_cycle()
    assert Job.objects.get(pk=first).state == "running"

    def estimate(routing):
        request = JobRequest(
            name="next",
            team="vision",
            workers=1,
            gpus_per_worker=8,
            gpu_model="h100-80gb",
            runtime_limit_s=3600,
            routing=routing,
        )
        return job_feasibility(user=two_clusters["alice"], request=request, now=timezone.now())

    # the cloud's only on-demand node is taken: it would wait; anywhere, it starts at once
    assert not estimate(only_cloud_on_demand).starts_now
    assert estimate(None).starts_now


def test_the_observed_spot_interruption_rate_is_the_share_of_spot_time_lost(two_clusters, submit):
    from django.core.cache import cache

    from scheduler.models import Allocation
    from scheduler.transitions import job_requeue

    cache.clear()
    job_id = submit(
        two_clusters["alice"],
        gpu_model="h100-80gb",
        gpus_per_worker=8,
        routing={"clusters": ["cloud"], "spot": True},
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert {a.node.name for a in job.allocations.all()} == {"c2"}  # spot: the cheapest
    now = timezone.now()
    # An hour on the spot node, the last checkpoint half an hour ago, then reclaimed: half of
    # the 8 GPU-hours run there were lost.
    Job.objects.filter(pk=job_id).update(
        started_at=now - timedelta(hours=1), last_checkpoint_at=now - timedelta(minutes=30)
    )
    Allocation.objects.filter(job_id=job_id).update(started_at=now - timedelta(hours=1))
    assert job_requeue(job=job, now=now, reason="spot capacity reclaimed")
    cache.clear()
    snapshot, _ = build_snapshot(now=now)
    rates = {c.name: c.spot_interruption_rate for c in snapshot.clusters}
    assert rates["test"] == 0.0
    assert rates["cloud"] == pytest.approx(0.5, rel=1e-6)


def test_a_job_with_a_choice_leaves_a_confined_cluster_and_says_why(two_clusters, submit):
    # On-prem is cheaper (its own rate, 1.00) but dataset c4 may be read only in its region:
    # a job that may run anywhere starts in the cloud and leaves on-prem to the c4 jobs.
    PriceRate.objects.create(
        cluster=two_clusters["cluster"],
        gpu_model=PriceRate.objects.first().gpu_model,
        capacity="on_demand",
        effective_from=timezone.now() - timedelta(hours=1),
        rate_per_gpu_hour=Decimal("1.00"),
    )
    Dataset.objects.create(name="c4", size_gb=100, residency_regions=["eu-west"])
    job_id = submit(
        two_clusters["alice"], gpu_model="h100-80gb", runtime_limit_s=3600, routing={"spot": False}
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    (route,) = job.events.filter(kind="routed")
    assert (job.cluster.name, route.data["confined"]) == ("cloud", False)
    onprem = {a["pool"]: a for a in route.data["alternatives"]}["h100-80gb@test"]
    assert (onprem["expected_cost"], onprem["confined"]) == (1.0, True)
    assert route.message == (
        "runs on h100-80gb@cloud: expected 2.00; the cheaper pools are on clusters some jobs may "
        "only use: it leaves them to those"
    )


def test_an_expected_total_beyond_a_float_does_not_stop_the_loop(two_clusters, submit):
    """A policy's default run time of 1e306 s and a price of 100,000 per GPU-hour made 8 GPUs'
    expected total inf: the routed event's JSON held Infinity, PostgreSQL refused it, and the
    cycle failed, every cycle, for every team. The codec now refuses such a run time (a century
    at most); the largest it takes still gives a total the event can store, and the engine caps
    totals at COST_CEILING anyway (tests/unit/policy/test_routing.py)."""
    from core.errors import FieldErrors
    from policyversions.services import policy_apply
    from scheduler.policy.routing import COST_CEILING

    PriceRate.objects.update(rate_per_gpu_hour=Decimal("100000"))
    with pytest.raises(FieldErrors, match="must be <= 3153600000"):
        policy_apply(
            user=two_clusters["admin"],
            reason="no estimate means forever",
            engine_config={"default_runtime_s": 1e306},
        )
    policy_apply(
        user=two_clusters["admin"],
        reason="no estimate means a century",
        engine_config={"default_runtime_s": 3_153_600_000},
    )
    job_id = submit(two_clusters["alice"], gpu_model="h100-80gb", gpus_per_worker=8).json()["id"]
    assert run_cycle().started == [job_id]
    routed = Job.objects.get(pk=job_id).events.get(kind="routed")
    assert 0 < routed.data["expected_cost"] <= COST_CEILING
