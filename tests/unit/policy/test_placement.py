"""Rule 5: topology-aware, fragmentation-aware placement on ready, healthy nodes."""

from scheduler.policy import decide

from .helpers import check_invariants, job, node, snap, started, why


def placed(s, job_id):
    d = decide(s)
    check_invariants(s, d)
    return sorted(started(d)[job_id])


def test_rule_5_one_node_if_it_fits():
    s = snap([node("a", 4), node("b", 4), node("c")], [job("j", 2, 4)])
    assert placed(s, "j") == ["c"]


def test_rule_5_else_one_nvlink_domain():
    nodes = [
        node("a1", domain="nvl-x", rack="r1"),
        node("b1", domain="nvl-y", rack="r1"),
        node("b2", domain="nvl-y", rack="r1"),
        node("c1", domain="nvl-z", rack="r1"),
    ]
    assert placed(snap(nodes, [job("j", 2, 8)]), "j") == ["b1", "b2"]


def test_rule_5_else_one_rack():
    nodes = [
        node("a1", rack="r1"),
        node("b1", rack="r2"),
        node("b2", rack="r2"),
        node("c1", rack="r3"),
    ]
    assert placed(snap(nodes, [job("j", 2, 8)]), "j") == ["b1", "b2"]


def test_rule_5_else_fewest_racks_then_fewest_fabrics():
    nodes = [
        node("a1", rack="r1", fabric="f1"),
        node("b1", rack="r2", fabric="f1"),
        node("b2", rack="r2", fabric="f1"),
        node("c1", rack="r3", fabric="f2"),
        node("c2", rack="r3", fabric="f2"),
    ]
    # 3 nodes: f1 alone can do it with 2 racks; f2 alone cannot.
    assert placed(snap(nodes, [job("j", 3, 8)]), "j") == ["a1", "b1", "b2"]
    # 4 nodes: no single fabric has room, so the fewest racks across fabrics (r2 + r3).
    assert placed(snap(nodes, [job("j", 4, 8)]), "j") == ["b1", "b2", "c1", "c2"]


def test_rule_5_best_fit_keeps_large_free_blocks_intact():
    s = snap([node("whole"), node("half", 4), node("pair", 2)], [job("j", 1, 2)])
    assert placed(s, "j") == ["pair"]
    s = snap([node("whole"), node("half", 4), node("pair", 2)], [job("j", 1, 3)])
    assert placed(s, "j") == ["half"]


def test_rule_5_only_ready_nodes_above_the_health_threshold():
    nodes = [
        node("down", state="down"),
        node("draining", state="draining"),
        node("quarantined", state="quarantined"),
        node("sick", health=0.4),
        node("ok", 1, health=0.5),
    ]
    s = snap(nodes, [job("j", 1, 1), job("k", 1, 1, submitted=1)])
    d = decide(s)
    check_invariants(s, d)
    assert started(d) == {"j": {"ok": (0,)}}
    assert why(d, "k").startswith("needs 1 free h100 GPUs on one node; the largest free block is 0")
    assert "no ready, healthy nodes with a100" in why(
        decide(snap(nodes, [job("x", model="a100")])), "x"
    )


def test_rule_5_prefers_nodes_caching_the_dataset():
    nodes = [node("tight", 2), node("cached", datasets=["c4"])]
    assert placed(snap(nodes, [job("j", 1, 2, dataset="c4")]), "j") == ["cached"]
    assert placed(snap(nodes, [job("j", 1, 2, dataset="other")]), "j") == ["tight"]


def test_rule_5_dataset_not_ready_waits_without_blocking_others():
    s = snap(
        [node("n1", 1)], [job("data", pc="high", dataset="c4", dataset_ready=False), job("next")]
    )
    d = decide(s)
    assert list(started(d)) == ["next"]
    assert why(d, "data").startswith("dataset c4 is not ready yet")


def test_rule_5_any_model_job_takes_whichever_model_fits():
    nodes = [node("a", model="a100", free=0), node("h", model="h100")]
    s = snap(nodes, [job("any", 1, 4, model=None)])
    assert placed(s, "any") == ["h"]


def test_rule_5_lowest_free_gpu_indices_are_used():
    s = snap([node("n", [1, 3, 5, 6])], [job("j", 1, 2)])
    assert started(decide(s)) == {"j": {"n": (1, 3)}}
