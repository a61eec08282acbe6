"""Property tests of routing across clusters (rule 3b, docs/routing.md) on random snapshots.

The random snapshots of ``test_properties`` get clusters (regions, interconnects, prices, held
datasets, reachability), dataset residency, teams restricted to clusters and jobs with routing
constraints. On every decision set: the contract's invariants and quotas hold; no start breaks a
routing constraint (``start_violations``, which reads nodes and constraints directly, not the
engine's pools); no start and no elastic growth spans two clusters; and a job told that no
allowed cluster can ever hold it really has no node it may use.
"""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.policy import (
    Cluster,
    Dataset,
    JobRouting,
    Node,
    Snapshot,
    decide,
    snapshot_from_dict,
    snapshot_to_dict,
)
from scheduler.policy.routing import start_violations

from .helpers import check_invariants
from .test_properties import check_quotas, snapshots

CLUSTERS = ("onprem", "cloud-a", "cloud-b")
REGIONS = ("eu", "us")
NAMES = st.lists(st.sampled_from(CLUSTERS), unique=True, max_size=3)


@st.composite
def routed(draw, crowded: bool = False) -> Snapshot:
    s = draw(snapshots(crowded=crowded))
    clusters = []
    for name in CLUSTERS:
        prices = {}
        for model in ("h100", "a100"):
            # mostly priced: an unpriced pool is excluded only under a price cap
            kinds = ["on_demand"] * (draw(st.integers(0, 4)) > 0) + ["spot"] * draw(st.booleans())
            prices[model] = {k: draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])) for k in kinds}
        clusters.append(
            Cluster(
                name=name,
                region=draw(st.sampled_from(REGIONS)),
                interconnect=draw(st.sampled_from(["nvlink", "infiniband", "ethernet"])),
                prices=prices,
                datasets={
                    d: draw(st.sampled_from([0.0, 0.05]))
                    for d in draw(st.lists(st.sampled_from(["c4", "imagenet"]), unique=True))
                },
                reachable=draw(st.integers(0, 9)) > 0,
                spot_interruption_rate=draw(st.sampled_from([0.0, 0.1])),
            )
        )
    nodes = tuple(replace(n, cluster=draw(st.sampled_from(CLUSTERS))) for n in s.nodes)
    # idle nodes too, so that many jobs start and multi-node gangs are placed
    for i in range(draw(st.integers(0, 10))):
        gpus = draw(st.sampled_from([4, 8]))
        nodes += (
            Node(
                name=f"x{i}",
                gpu_model=draw(st.sampled_from(["h100", "a100"])),
                gpus=gpus,
                free_gpus=tuple(range(gpus)),
                rack=draw(st.sampled_from(["r1", "r2"])),
                fabric="f1",
                spot=draw(st.integers(0, 3)) == 0,
                cluster=draw(st.sampled_from(CLUSTERS)),
            ),
        )
    teams = tuple(
        replace(t, clusters=draw(st.sampled_from([None, None, None, ("onprem", "cloud-a")])))
        for t in s.teams
    )
    pending = []
    for p in s.pending:
        routing = None
        if draw(st.integers(0, 2)) == 0:
            routing = JobRouting(
                clusters=draw(st.one_of(st.none(), NAMES.map(tuple))),
                regions=draw(st.one_of(st.none(), st.just(("eu",)), st.just(("us",)))),
                prefer_clusters=tuple(draw(NAMES)),
                prefer_regions=draw(st.sampled_from([(), ("eu",)])),
                max_price_per_gpu_h=draw(st.sampled_from([None, 1.0, 3.0])),
                spot=draw(st.sampled_from([None, True, False])),
                comm_heavy=draw(st.sampled_from([None, True, False])),
            )
        pending.append(
            replace(p, routing=routing, dataset_size_gb=draw(st.sampled_from([None, 100.0])))
        )
    datasets = (
        Dataset("c4", draw(st.sampled_from([None, None, ("eu",), ("us",), ()]))),
        Dataset("imagenet", draw(st.sampled_from([None, ("eu",)]))),
    )
    config = replace(
        s.config,
        route_by_cost=draw(st.booleans()),
        wait_price_per_gpu_h=draw(st.sampled_from([None, 0.0, 1.0, 100.0])),
    )
    return replace(
        s,
        config=config,
        nodes=nodes,
        teams=teams,
        pending=tuple(pending),
        clusters=tuple(clusters),
        datasets=datasets,
    )


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.one_of(routed(), routed(crowded=True)))
def test_no_start_breaks_a_constraint_or_splits_a_gang_across_clusters(s):
    d = decide(s)
    check_invariants(s, d)
    check_quotas(s, d)
    cluster_of = {n.name: n.cluster for n in s.nodes}
    for start in d.start:
        assert start_violations(s, start) == []
        assert len({cluster_of[name] for name in start.placement}) == 1
    for resize in d.resize:
        if resize.placement:
            assert len({cluster_of[name] for name in resize.placement}) == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(routed())
def test_a_job_no_cluster_can_ever_hold_has_no_node_it_may_use(s):
    d = decide(s)
    nodes_ok = [n for n in s.nodes if n.state == "ready" and n.health >= s.config.min_health]
    for p in d.pending:
        if not p.why.startswith("no allowed cluster can ever hold it"):
            continue
        job = next(j for j in s.pending if j.id == p.job)
        # Not one eligible node of the job's model would pass the constraints for a start of
        # the whole gang on that node alone (nor a multi-node gang: those are covered above).
        for n in nodes_ok:
            if job.gpu_model is not None and n.gpu_model != job.gpu_model:
                continue
            if job.workers * job.gpus_per_worker > n.gpus:
                continue
            one = replace(
                d.start[0] if d.start else _probe(),
                job=job.id,
                placement={n.name: tuple(range(job.workers * job.gpus_per_worker))},
            )
            assert start_violations(s, one), (p.why, n)


def _probe():
    from scheduler.policy import Start

    return Start("", {})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(routed())
def test_routed_snapshots_round_trip_through_json(s):
    data = json.loads(json.dumps(snapshot_to_dict(s)))
    assert snapshot_from_dict(data) == s


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(routed(), st.randoms(use_true_random=False))
def test_routed_decisions_do_not_depend_on_the_order_of_any_list(s, rnd):
    d = decide(s)

    def shuffled(items):
        return tuple(rnd.sample(items, len(items)))

    other = replace(
        s,
        teams=shuffled(s.teams),
        nodes=shuffled(s.nodes),
        running=shuffled(s.running),
        pending=shuffled(s.pending),
        clusters=shuffled(s.clusters),
        datasets=shuffled(s.datasets),
    )
    assert decide(other) == d
