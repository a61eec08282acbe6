"""Replays over several clusters (``scheduler.simulation.multicluster``): the cost ledger adds
up, routed policies never break a constraint or split a gang, the pooled engine (no clusters)
does, and cost routing spends less than the cost-blind order on the same trace."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy import Config
from scheduler.simulation import generate_synthetic
from scheduler.simulation.multicluster import replay_policies, three_clusters

TRACE = generate_synthetic(300, seed=3, mean_interarrival_s=120.0)
SPEC = three_clusters(scale=4)  # 8 + 16 + 4 nodes of 8 GPUs

POLICIES = {
    "cost": (Config(), False),
    "cost-blind": (Config(route_by_cost=False), False),
    "pooled": (Config(), True),
}


@pytest.fixture(scope="module")
def results():
    return replay_policies(TRACE, SPEC, POLICIES)


def test_routed_replays_keep_every_constraint_and_pooled_does_not(results):
    for name in ("cost", "cost-blind"):
        r = results[name]
        assert r["jobs"] == len(TRACE)
        assert r["violating_starts"] == 0
        assert r["residency_violations"] == 0
        assert r["gangs_split_across_clusters"] == 0
    # the engine without clusters places EU-only data and the EU-only team anywhere
    assert results["pooled"]["residency_violations"] > 0
    assert results["pooled"]["violating_starts"] >= results["pooled"]["residency_violations"]


def test_cost_routing_spends_less_than_the_cost_blind_order(results):
    assert results["cost"]["total_cost"] < results["cost-blind"]["total_cost"]


def test_gpu_cost_is_price_times_busy_gpu_hours():
    # one price everywhere (1 per GPU-hour): the ledger's GPU cost is the busy GPU-hours
    flat = replace(
        SPEC,
        sites=tuple(
            replace(s, prices={"on_demand": 1.0, "spot": 1.0}, datasets={}) for s in SPEC.sites
        ),
    )
    trace = TRACE[:120]
    r = replay_policies(trace, flat, {"cost": POLICIES["cost"]})["cost"]
    assert r["gpu_cost"] == pytest.approx(r["busy_gpu_hours"], abs=1e-3)  # metrics round it
    assert sum(r["gpu_cost_by_cluster"].values()) == pytest.approx(r["gpu_cost"])
    # nobody holds a dataset: nothing is moved, nothing charged
    assert r["egress_cost"] == 0.0
    assert r["egress_gb"] == 0.0


def test_replays_are_deterministic():
    trace = TRACE[:100]
    a = replay_policies(trace, SPEC, {"cost": POLICIES["cost"]})
    # no timer is injected, so even the wall-clock fields are 0 in both
    assert replay_policies(trace, SPEC, {"cost": POLICIES["cost"]}) == a
