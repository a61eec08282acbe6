"""Rule 9: preemptible jobs prefer spot nodes; others avoid them unless nothing else fits."""

from scheduler.policy import decide

from .helpers import check_invariants, job, node, snap, started


def test_rule_9_preemptible_jobs_prefer_spot_nodes():
    nodes = [node("ondemand"), node("spot", spot=True)]
    s = snap(nodes, [job("p", 1, 4, preemptible=True), job("np", 1, 4, submitted=1)])
    d = decide(s)
    check_invariants(s, d)
    assert sorted(started(d)["p"]) == ["spot"]
    assert sorted(started(d)["np"]) == ["ondemand"]


def test_rule_9_non_preemptible_uses_spot_only_when_nothing_else_fits():
    nodes = [node("ondemand", 2), node("spot", spot=True)]
    s = snap(nodes, [job("np", 1, 4)])
    assert sorted(started(decide(s))["np"]) == ["spot"]


def test_rule_9_preemptible_falls_back_to_on_demand():
    nodes = [node("ondemand"), node("spot", 2, spot=True)]
    s = snap(nodes, [job("p", 1, 4, preemptible=True)])
    assert sorted(started(decide(s))["p"]) == ["ondemand"]
