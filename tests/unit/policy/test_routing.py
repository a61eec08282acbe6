"""Routing across clusters (rule 3b, docs/routing.md): one scenario per constraint and per part
of the rule, on small snapshots with clusters.

The clusters of most tests: ``onprem`` (eu, InfiniBand, H100 on demand at 2.0 per GPU-hour,
holds dataset c4 with egress 0.05 per GB), ``cloud`` (us, InfiniBand, H100 on demand at 3.0 and
spot at 1.0) and ``edge`` (eu, Ethernet, H100 on demand at 1.5); two nodes of 8 H100s each.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from scheduler.policy import Cluster, Dataset, JobRouting, Snapshot, decide
from scheduler.policy.codec import SnapshotError, snapshot_from_dict, snapshot_to_dict
from scheduler.policy.routing import (
    COST_CEILING,
    egress_cost,
    expected_cost,
    explain_starts,
    start_violations,
)
from scheduler.policy.routing_codec import routing_from_dict

from .helpers import check_invariants, job, node, run, snap, started, team, why

ONPREM = Cluster("onprem", "eu", "infiniband", {"h100": {"on_demand": 2.0}}, datasets={"c4": 0.05})
CLOUD = Cluster("cloud", "us", "infiniband", {"h100": {"on_demand": 3.0, "spot": 1.0}})
EDGE = Cluster("edge", "eu", "ethernet", {"h100": {"on_demand": 1.5}})
CLUSTERS = (ONPREM, CLOUD, EDGE)


def nodes(cluster: str, n: int = 2, *, free: int | None = None, spot: bool = False, gpus=8):
    prefix = cluster + ("-spot" if spot else "")
    return [
        replace(node(f"{prefix}-{i}", free, gpus=gpus, spot=spot, rack=prefix), cluster=cluster)
        for i in range(n)
    ]


def world(
    pending,
    *,
    running=(),
    teams=(),
    clusters=CLUSTERS,
    datasets=(),
    node_list=None,
    **config,
) -> Snapshot:
    if node_list is None:
        node_list = nodes("onprem") + nodes("cloud") + nodes("cloud", spot=True) + nodes("edge")
    s = snap(node_list, pending, running, teams, **config)
    return replace(s, clusters=tuple(clusters), datasets=tuple(datasets))


def decide_checked(s: Snapshot):
    d = decide(s)
    check_invariants(s, d)
    for st in d.start:
        assert start_violations(s, st) == []
    return d


def cluster_of(d, job_id: str) -> str:
    placement = started(d)[job_id]
    clusters = {name.split("-")[0] for name in placement}
    assert len(clusters) == 1
    return clusters.pop()


def routed(id: str, workers=1, gpw=8, **routing) -> object:
    extra = {
        k: routing.pop(k)
        for k in ("est", "preemptible", "team", "dataset", "submitted")
        if k in routing
    }
    size = routing.pop("size_gb", None)
    r = JobRouting(**routing) if routing else None
    return replace(job(id, workers, gpw, **extra), routing=r, dataset_size_gb=size)


# ---------------------------------------------------------------- the cost rule


def test_a_job_starts_on_the_cheapest_pool_that_can_start_it():
    # edge (1.5) is the cheapest on-demand pool; a one-node job needs no fast interconnect
    d = decide_checked(world([routed("a", est=3600)]))
    assert cluster_of(d, "a") == "edge"


def test_data_movement_counts_in_the_expected_total():
    # 8 GPUs x 1 h: edge 12.0 + 1000 GB x 0.05 egress = 62.0, onprem 16.0 (holds c4)
    d = decide_checked(world([routed("a", est=3600, dataset="c4", size_gb=1000.0)]))
    assert cluster_of(d, "a") == "onprem"


def test_spot_is_cheapest_for_a_job_that_tolerates_it_and_interruptions_make_it_dearer():
    d = decide_checked(world([routed("a", est=3600, preemptible=True)]))
    assert started(d)["a"].keys() <= {"cloud-spot-0", "cloud-spot-1"}
    lossy = replace(CLOUD, spot_interruption_rate=0.9)  # 1.0 / 0.1 = 10 per useful GPU-hour
    d = decide_checked(
        world([routed("a", est=3600, preemptible=True)], clusters=(ONPREM, lossy, EDGE))
    )
    assert cluster_of(d, "a") == "edge"


def test_a_preferred_cluster_comes_before_a_cheaper_one():
    d = decide_checked(world([routed("a", prefer_clusters=("onprem",))]))
    assert cluster_of(d, "a") == "onprem"
    d = decide_checked(world([routed("a", prefer_regions=("us",))]))
    assert cluster_of(d, "a") == "cloud"


def test_cost_blind_routing_takes_the_pools_in_name_order():
    d = decide_checked(world([routed("a", est=3600)], route_by_cost=False))
    assert cluster_of(d, "a") == "cloud"  # h100@cloud sorts first


def test_a_job_never_waits_on_a_busy_cheap_cluster_while_another_can_start_it():
    busy_edge = nodes("onprem") + nodes("cloud") + nodes("edge", free=0)
    running = [run("r", {"edge-0": range(8)}, end=2000.0), run("s", {"edge-1": range(8)})]
    d = decide_checked(world([routed("a", est=3600)], running=running, node_list=busy_edge))
    assert cluster_of(d, "a") == "onprem"


def test_a_price_of_waiting_holds_a_job_for_the_cheaper_cluster_only_while_it_pays():
    busy_edge = nodes("onprem") + nodes("cloud") + nodes("edge", free=0)
    running = [run("r", {"edge-0": range(8)}, end=2000.0), run("s", {"edge-1": range(8)})]
    # saving onprem - edge: (2.0 - 1.5) x 8 GPUs x 10 h = 40; at 1.0 per GPU-hour of waiting
    # it is worth 8 x waited hours: it holds out for 5 h, then starts where it can
    fresh = routed("a", est=36000, submitted=1000.0 - 3600)  # waited 1 h: 8 < 40
    d = decide_checked(
        world([fresh], running=running, node_list=busy_edge, wait_price_per_gpu_h=1.0)
    )
    assert "a" not in started(d)
    assert why(d, "a").startswith("holding out for h100@edge")
    assert d.preempt == ()  # saving money does not justify lost work
    old = routed("a", est=36000, submitted=1000.0 - 6 * 3600)  # waited 6 h: 48 > 40
    d = decide_checked(world([old], running=running, node_list=busy_edge, wait_price_per_gpu_h=1.0))
    assert cluster_of(d, "a") == "onprem"


def test_an_expected_total_beyond_a_float_stays_finite_and_holds_no_job_out():
    """A policy's default run time may be any finite number. At 1e306 s, 8 GPUs at 100,000 per
    GPU-hour came to inf: two such pools' saving was inf - inf = NaN, which no price of waiting
    covers, so the job held out ("nan cheaper") for good; and the routed event's inf could not
    be stored (a failed cycle for everyone). Totals now stop at COST_CEILING: the pools tie,
    the busy one first by name, and the job starts on the other."""
    dear = Cluster("dear", "eu", "infiniband", {"h100": {"on_demand": 1e5}})
    dearer = Cluster("pricier", "eu", "infiniband", {"h100": {"on_demand": 2e5}})
    node_list = nodes("dear", free=0) + nodes("pricier")
    running = [run("r", {"dear-0": range(8)}, end=2000.0), run("s", {"dear-1": range(8)})]
    s = world(
        [routed("a", submitted=1000.0 - 60)],  # no estimate: the default run time counts
        running=running,
        node_list=node_list,
        clusters=(dear, dearer),
        default_runtime_s=1e306,
        wait_price_per_gpu_h=1.0,
    )
    d = decide_checked(s)
    assert cluster_of(d, "a") == "pricier", why(d, "a")
    route = explain_starts(s, list(d.start))["a"]
    assert route["expected_cost"] == COST_CEILING
    assert [a["expected_cost"] for a in route["alternatives"]] == [COST_CEILING]
    json.dumps(route, allow_nan=False)  # what the routed event stores


@pytest.mark.parametrize("rate", [0.0, 0.99])
def test_data_movement_and_spot_beyond_a_float_stay_finite(rate):
    cloud = replace(CLOUD, prices={"h100": {"spot": 1e5}}, spot_interruption_rate=rate)
    holder = replace(ONPREM, datasets={"c4": 1000.0})
    big = routed("a", workers=64, preemptible=True, dataset="c4", size_gb=1e306)
    config = snap([], default_runtime_s=1e308).config
    clusters = {"cloud": cloud, "onprem": holder}
    assert egress_cost(big, cloud, clusters) == COST_CEILING
    assert expected_cost(big, cloud, "h100", True, clusters, config) == COST_CEILING


def test_a_job_with_a_choice_leaves_the_pool_another_waiting_job_can_only_use():
    # onprem is the cheapest on-demand pool, but "eu" may only run there: "flex", ranked
    # higher and able to start elsewhere, leaves onprem to it
    one_each = nodes("onprem", 1) + nodes("cloud", 1)
    flex = replace(routed("flex", est=3600), priority_class="high")
    eu = routed("eu", clusters=("onprem",))
    d = decide_checked(world([flex, eu], node_list=one_each))
    assert cluster_of(d, "flex") == "cloud"
    assert cluster_of(d, "eu") == "onprem"
    # alone, flex takes the cheapest
    d = decide_checked(world([flex], node_list=one_each))
    assert cluster_of(d, "flex") == "onprem"


def test_a_job_does_not_take_gpus_a_higher_ranked_job_waits_for_when_it_can_start_elsewhere():
    # "big" (2x8) is blocked on onprem (one of its two nodes is busy) and can never fit
    # cloud's one node; "small" could start on onprem's free node for less, but starts on
    # cloud and leaves that node to big
    node_list = [*nodes("onprem", 2), *nodes("cloud", 1)]
    node_list[1] = replace(node_list[1], free_gpus=())
    running = [run("r", {"onprem-1": range(8)}, end=5000.0, preemptible=False)]
    big = replace(routed("big", workers=2, gpw=8), priority_class="high")
    small = routed("small", gpw=1, est=600)
    d = decide_checked(world([big, small], running=running, node_list=node_list))
    assert "big" not in started(d)
    assert cluster_of(d, "small") == "cloud"


def test_a_job_that_may_run_anywhere_keeps_off_the_clusters_others_are_confined_to():
    # dataset "gdpr" may only be read in the eu (onprem, edge): those clusters are what jobs
    # reading it can use, so a job that may run anywhere starts on cloud, dearer, while cloud
    # can start it; a job reading gdpr takes the cheapest of its own (edge)
    gdpr = (Dataset("gdpr", ("eu",)),)
    free = routed("free", est=3600)
    eu = routed("eu", est=3600, dataset="gdpr")
    d = decide_checked(world([free, eu], datasets=gdpr))
    assert cluster_of(d, "free") == "cloud"
    assert cluster_of(d, "eu") == "edge"
    # when cloud cannot start it, it takes the cheapest of the others (edge), not wait
    full_cloud = nodes("onprem") + nodes("cloud", free=0) + nodes("edge")
    running = [run("r", {"cloud-0": range(8)}), run("s", {"cloud-1": range(8)})]
    d = decide_checked(world([free], datasets=gdpr, running=running, node_list=full_cloud))
    assert cluster_of(d, "free") == "edge"
    # another team confined to edge makes edge such a cluster too: onprem is the cheapest of
    # the rest; without any confinement (no residency, no team's clusters), cost alone decides
    others = [team("t"), replace(team("other"), clusters=("edge",))]
    d = decide_checked(world([free], teams=others))
    assert cluster_of(d, "free") == "onprem"
    d = decide_checked(world([free]))
    assert cluster_of(d, "free") == "edge"
    # the cost-blind order knows no confinement: name order
    d = decide_checked(world([free], datasets=gdpr, route_by_cost=False))
    assert cluster_of(d, "free") == "cloud"


def test_a_job_that_may_use_one_pool_only_gets_its_reservation_without_the_las_gate():
    # onprem is full of preemptible work of the job's own class and queue: a job that could go
    # elsewhere waits for attained-service preemption (no GPUs held for a day, rule 1a); one
    # that may use onprem only gets GPUs held for it at the earliest release
    full = nodes("onprem", 1, free=0) + nodes("cloud", 1, free=0)
    running = [
        run("op", {"onprem-0": range(8)}, pc="normal", started=900.0, end=4000.0),
        run("cl", {"cloud-0": range(8)}, pc="normal", started=900.0, end=3000.0),
    ]
    only = routed("only", clusters=("onprem",), submitted=900.0)
    d = decide_checked(world([only], running=running, node_list=full))
    assert [(r.job, r.at, r.nodes) for r in d.reserve] == [("only", 4000.0, ("onprem-0",))]
    free = routed("free", submitted=900.0)
    d = decide_checked(world([free], running=running, node_list=full))
    assert d.reserve == ()
    assert "no GPUs held for it before it has waited 86400 s" in why(d, "free")


# ---------------------------------------------------------------- hard constraints


def test_allowed_clusters_are_kept_even_when_dearer():
    d = decide_checked(world([routed("a", clusters=("cloud",))]))
    assert cluster_of(d, "a") == "cloud"
    assert set(started(d)["a"]) <= {"cloud-0", "cloud-1"}  # not spot: not preemptible


def test_allowed_regions_are_kept():
    d = decide_checked(world([routed("a", regions=("us",))]))
    assert cluster_of(d, "a") == "cloud"


def test_team_clusters_and_their_ancestors_restrict_where_it_runs():
    teams = [
        replace(team("org"), clusters=("onprem", "cloud")),
        replace(team("t", "org"), clusters=("cloud", "edge")),
    ]
    d = decide_checked(world([routed("a")], teams=teams))
    assert cluster_of(d, "a") == "cloud"  # edge: the parent forbids it; onprem: the team


def test_dataset_residency_is_never_broken():
    d = decide_checked(
        world([routed("a", dataset="c4", size_gb=10.0)], datasets=[Dataset("c4", ("us",))])
    )
    assert cluster_of(d, "a") == "cloud"


def test_a_price_cap_excludes_dearer_and_unpriced_pools():
    d = decide_checked(world([routed("a", max_price_per_gpu_h=2.5, prefer_clusters=("cloud",))]))
    assert cluster_of(d, "a") in {"onprem", "edge"}
    unpriced = replace(EDGE, prices={})
    s = world([routed("a", max_price_per_gpu_h=1.6)], clusters=(ONPREM, CLOUD, unpriced))
    d = decide_checked(s)
    assert "a" not in started(d)
    assert "h100@edge has no price, above the job's cap of 1.6" in why(d, "a")


def test_spot_only_for_jobs_that_tolerate_it():
    only_spot = nodes("cloud", spot=True)
    d = decide_checked(world([routed("a")], node_list=only_spot))  # not preemptible
    assert why(d, "a").startswith("no allowed cluster can ever hold it: ")
    assert "spot capacity and the job does not tolerate spot" in why(d, "a")
    d = decide_checked(world([routed("b", preemptible=True, spot=False)], node_list=only_spot))
    assert "b" not in started(d)
    d = decide_checked(world([routed("c", spot=True)], node_list=only_spot))
    assert cluster_of(d, "c") == "cloud"


def test_communication_heavy_gangs_span_nodes_only_on_fast_interconnect():
    # edge is cheapest, but Ethernet: a 2x8 gang goes to onprem (InfiniBand)
    d = decide_checked(world([routed("a", workers=2, gpw=8)]))
    assert cluster_of(d, "a") == "onprem"
    assert len(started(d)["a"]) == 2
    # a light gang may use Ethernet
    d = decide_checked(world([routed("b", workers=2, gpw=8, comm_heavy=False)]))
    assert cluster_of(d, "b") == "edge"
    # a heavy gang that fits one node goes on one node of the Ethernet cluster
    d = decide_checked(world([routed("c", workers=2, gpw=4)]))
    assert list(started(d)["c"]) == ["edge-0"]
    # ... and one that cannot, only on Ethernet, can never start
    d = decide_checked(world([routed("e", workers=2, gpw=8, clusters=("edge",))]))
    assert why(d, "e") == (
        "no allowed cluster can ever hold it: cluster cloud is not among the job's clusters; "
        "cluster edge has ethernet interconnect: a communication-heavy gang of 2x8 must fit one "
        "node there, and its largest has 8 GPUs; cluster onprem is not among the job's clusters"
    )


def test_a_gang_never_spans_two_clusters():
    # one free node in onprem, one in cloud: 16 GPUs free, but no cluster has both
    split = nodes("onprem", 1) + nodes("cloud", 1)
    d = decide_checked(world([routed("a", workers=2, gpw=8)], node_list=split))
    assert "a" not in started(d)
    assert why(d, "a").startswith("no allowed cluster can ever hold it: gang of 2x8")


def test_an_unreachable_cluster_gets_no_new_work():
    down = replace(EDGE, reachable=False)
    d = decide_checked(world([routed("a")], clusters=(ONPREM, CLOUD, down)))
    assert cluster_of(d, "a") == "onprem"
    d = decide_checked(world([routed("b", clusters=("edge",))], clusters=(ONPREM, CLOUD, down)))
    assert why(d, "b").startswith("no allowed cluster can ever hold it")


def test_preemption_for_a_job_stays_inside_the_clusters_it_may_use():
    # onprem is full of a preemptible low job; cloud is full of another. A high job allowed
    # only on onprem preempts the onprem one, never the cloud one.
    full = nodes("onprem", 1, free=0) + nodes("cloud", 1, free=0)
    running = [
        run("op", {"onprem-0": range(8)}, pc="low", ckpt=900.0),
        run("cl", {"cloud-0": range(8)}, pc="low", ckpt=990.0),  # less lost work
    ]
    d = decide_checked(
        world(
            [replace(routed("a", clusters=("onprem",)), priority_class="high")],
            running=running,
            node_list=full,
        )
    )
    assert [p.job for p in d.preempt] == ["op"]


# ---------------------------------------------------------------- one ledger


def test_quotas_count_a_gpu_model_over_all_clusters():
    teams = [team("t", quota={"h100": (8, 0)})]
    running = [run("r", {"onprem-0": range(8)}, team="t")]
    node_list = nodes("onprem", 1, free=0) + nodes("cloud")
    d = decide_checked(world([routed("a")], running=running, teams=teams, node_list=node_list))
    assert "a" not in started(d)
    assert why(d, "a").startswith("quota: team t would use 16 h100 GPUs")
    # one ledger, one reason: the cloud pools say the same, and it is said once
    assert why(d, "a").count("quota:") == 1, why(d, "a")


def test_priority_is_global_across_clusters():
    # one free node in all; the high job gets it, wherever the low job would have gone
    one = nodes("cloud", 1)
    low = replace(routed("low"), priority_class="low", submitted_at=0.0)
    high = replace(routed("high"), priority_class="high", submitted_at=500.0)
    d = decide_checked(world([low, high], node_list=one))
    assert list(started(d)) == ["high"]


# ---------------------------------------------------------------- old snapshots and codec


def test_without_clusters_nothing_of_routing_is_read():
    plain = snap(nodes("onprem"), [job("a", 1, 8)])
    with_fields = replace(
        plain,
        pending=(
            replace(plain.pending[0], routing=JobRouting(clusters=("x",)), dataset_size_gb=5.0),
        ),
    )
    assert decide(with_fields) == decide(plain)


def test_the_codec_reads_and_writes_every_routing_field():
    s = world(
        [
            routed(
                "a",
                clusters=("cloud",),
                regions=("us",),
                prefer_clusters=("cloud",),
                prefer_regions=("us",),
                max_price_per_gpu_h=3.0,
                spot=True,
                comm_heavy=False,
                dataset="c4",
                size_gb=12.5,
            )
        ],
        teams=[replace(team("t"), clusters=("cloud",))],
        datasets=[Dataset("c4", ("us", "eu")), Dataset("free")],
        wait_price_per_gpu_h=0.5,
        route_by_cost=False,
    )
    data = snapshot_to_dict(s)
    assert snapshot_from_dict(data) == s
    assert data["clusters"][1]["prices"] == {"h100": {"on_demand": 3.0, "spot": 1.0}}
    assert data["config"]["wait_price_per_gpu_h"] == 0.5
    assert "clusters" not in snapshot_to_dict(snap(nodes("onprem"), [job("a")]))


class _CountedName(str):
    """A name that counts how often it is compared for equality with another."""

    comparisons = 0

    def __eq__(self, other):
        type(self).comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_long_routing_list_is_read_in_linear_time():
    """A job's routing lists are as long as its sender makes them: looking for each name among
    those read before took ~n^2/2 comparisons (100,000 names: two minutes of a web worker)."""
    _CountedName.comparisons = 0
    names = [_CountedName(f"region-{i}") for i in range(2_000)]
    routing = routing_from_dict({"prefer_regions": names})
    assert routing is not None and len(routing.prefer_regions) == 2_000
    assert _CountedName.comparisons <= 2_000  # 1,999,000 before
    with pytest.raises(SnapshotError, match=r"prefer_regions\[2000\]: 'region-5' listed twice"):
        routing_from_dict({"prefer_regions": [*names, "region-5"]})


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda d: d["clusters"][0].update(interconnect="roce"),
            "clusters[0].interconnect: must be one of nvlink, infiniband, ethernet",
        ),
        (
            lambda d: d["clusters"][0]["prices"]["h100"].update(reserved=1.0),
            "clusters[0].prices.h100.reserved: unknown capacity type (one of on_demand, spot)",
        ),
        (
            lambda d: d["clusters"][1]["prices"]["h100"].update(spot=-1),
            "clusters[1].prices.h100.spot: must be >= 0",
        ),
        (
            lambda d: d["clusters"][0].update(datasets={"c4": "cheap"}),
            "clusters[0].datasets.c4: must be a number",
        ),
        (
            lambda d: d["clusters"][1].update(spot_interruption_rate=1.0),
            "clusters[1].spot_interruption_rate: must be < 1 (the fraction of spot run time lost)",
        ),
        (
            lambda d: d["clusters"][2].update(reachable="yes"),
            "clusters[2].reachable: must be true or false",
        ),
        (
            lambda d: d["clusters"].append(dict(d["clusters"][0])),
            "clusters[3].name: duplicate cluster 'onprem'",
        ),
        (
            lambda d: d["nodes"][0].update(cluster="mars"),
            "nodes[0].cluster: unknown cluster 'mars'",
        ),
        (
            lambda d: d["nodes"][0].pop("cluster"),
            "nodes[0].cluster: is required when the snapshot lists clusters",
        ),
        (
            lambda d: d.update(datasets=[{"name": "c4", "regions": "eu"}]),
            "datasets[0].regions: must be a list",
        ),
        (
            lambda d: d["teams"].append({"name": "u", "clusters": ["onprem", "onprem"]}),
            "teams[1].clusters[1]: 'onprem' listed twice",
        ),
        (
            lambda d: d["pending"][0].update(routing={"cluster": ["onprem"]}),
            "pending[0].routing.cluster: unknown routing field",
        ),
        (
            lambda d: d["pending"][0].update(routing={"max_price_per_gpu_h": -2}),
            "pending[0].routing.max_price_per_gpu_h: must be >= 0",
        ),
        (
            lambda d: d["pending"][0].update(routing={"spot": "maybe"}),
            "pending[0].routing.spot: must be true or false",
        ),
        (
            lambda d: d["pending"][0].update(routing={"regions": [""]}),
            "pending[0].routing.regions[0]: must not be empty",
        ),
        (
            lambda d: d["pending"][0].update(dataset_size_gb=-1),
            "pending[0].dataset_size_gb: must be >= 0",
        ),
        (
            lambda d: d["config"].update(wait_price_per_gpu_h=-1),
            "config.wait_price_per_gpu_h: must be >= 0",
        ),
    ],
)
def test_bad_routing_fields_are_named(change, error):
    data = snapshot_to_dict(world([routed("a")], teams=[team("t")]))
    change(data)
    with pytest.raises(SnapshotError) as e:
        snapshot_from_dict(data)
    assert str(e.value) == error


def test_a_node_cluster_without_clusters_is_refused():
    data = snapshot_to_dict(snap([replace(node("n1"), cluster="onprem")], [job("a")]))
    with pytest.raises(SnapshotError) as e:
        snapshot_from_dict(data)
    assert str(e.value) == "nodes[0].cluster: unknown cluster 'onprem' (the snapshot lists none)"
