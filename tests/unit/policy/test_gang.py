"""Rule 4: a gang job's workers start together or not at all."""

from scheduler.policy import decide

from .helpers import check_invariants, job, node, snap, started, why


def test_rule_4_gang_does_not_start_partially():
    s = snap([node("n1"), node("n2", 6), node("n3", 4)], [job("g", 2, 8)])
    d = decide(s)
    check_invariants(s, d)
    assert not d.start
    assert why(d, "g") == (
        "gang of 2x8 h100 GPUs does not fit: free GPUs per node leave room for 1 of 2 workers "
        "(18 GPUs free in total, spread too thinly across nodes)"
    )


def test_rule_4_gang_starts_all_workers_at_once():
    s = snap([node("n1"), node("n2", 4)], [job("g", 3, 4)])
    d = decide(s)
    check_invariants(s, d)
    assert started(d) == {"g": {"n1": tuple(range(8)), "n2": (0, 1, 2, 3)}}
    assert d.start[0].workers == 3


def test_rule_4_each_worker_stays_on_one_node():
    s = snap([node("n1", 6), node("n2", 6)], [job("g", 3, 4)])
    d = decide(s)
    assert not d.start  # 12 free GPUs, but each node holds one 4-GPU worker only


def test_rule_4_gang_that_can_never_fit_says_so():
    s = snap([node("n1"), node("n2")], [job("huge", 3, 8), job("wide", 1, 16)])
    d = decide(s)
    assert "can never fit" in why(d, "huge")
    assert why(d, "wide") == "needs 16 h100 GPUs per worker; the largest ready, healthy node has 8"
