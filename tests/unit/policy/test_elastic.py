"""Rule 8: elastic jobs shrink toward their minimum before anyone is preempted, and grow into
idle GPUs no pending job can use."""

from scheduler.policy import decide
from scheduler.policy.capacity import Index

from .helpers import check_invariants, job, node, run, snap, started, why


def test_rule_8_shrink_before_preempting():
    nodes = [node("n1", 0)]
    running = [
        run("elastic", {"n1": [0, 1, 2, 3]}, gpw=1, elastic=(2, 4), ckpt=990),
        run("victim", {"n1": [4, 5, 6, 7]}, ckpt=990),
    ]
    s = snap(nodes, [job("urgent", 1, 2, pc="high")], running)
    d = decide(s)
    check_invariants(s, d)
    assert not d.preempt
    assert [(r.job, r.workers, dict(r.placement)) for r in d.resize] == [
        ("elastic", 2, {"n1": (0, 1)})
    ]
    assert why(d, "urgent") == (
        "waiting for 2 GPUs released by shrinking elastic jobs (grace 120 s)"
    )


def test_rule_8_shrink_stops_at_the_minimum_then_preempts():
    nodes = [node("n1", 0)]
    running = [
        run("elastic", {"n1": [0, 1, 2, 3]}, gpw=1, elastic=(3, 4), preemptible=False),
        run("victim", {"n1": [4, 5, 6, 7]}, ckpt=990),
    ]
    s = snap(nodes, [job("urgent", 1, 4, pc="high")], running)
    d = decide(s)
    check_invariants(s, d)
    assert [p.job for p in d.preempt] == ["victim"]
    assert not d.resize  # the shrink alone was not enough, and the victim alone is


def test_rule_8_grow_into_idle_gpus():
    nodes = [node("n1", [2, 3, 4, 5, 6, 7])]
    running = [run("elastic", {"n1": [0, 1]}, gpw=1, elastic=(1, 5))]
    s = snap(nodes, [], running)
    d = decide(s)
    check_invariants(s, d)
    assert [(r.job, r.workers, dict(r.placement)) for r in d.resize] == [
        ("elastic", 5, {"n1": (0, 1, 2, 3, 4)})
    ]


def test_rule_8_no_growth_while_a_job_waits_for_capacity():
    nodes = [node("n1", [2, 3, 4, 5, 6, 7])]
    running = [run("elastic", {"n1": [0, 1]}, gpw=1, elastic=(1, 8), preemptible=False)]
    s = snap(nodes, [job("big", 1, 8)], running)
    d = decide(s)
    assert not d.resize


def test_rule_8_pending_elastic_job_starts_with_fewer_workers_when_that_is_all_that_fits():
    s = snap([node("n1", 3)], [job("e", 4, 1, elastic=(2, 6))])
    d = decide(s)
    check_invariants(s, d)
    assert d.start[0].workers == 3
    assert started(d) == {"e": {"n1": (0, 1, 2)}}


def test_a_wide_elastic_range_does_not_walk_through_counts_that_cannot_fit(monkeypatch):
    """A pending elastic job used to try every worker count from its size down to its minimum,
    one placement each, though no view has room for more workers than its free slots: 10,000
    jobs of 1..4,096 workers took 40 s of every cycle (for every team) on a full cluster."""
    calls = 0
    place = Index.place

    def counted(self, w, g, prefer=None):
        nonlocal calls
        calls += 1
        return place(self, w, g, prefer)

    monkeypatch.setattr(Index, "place", counted)
    pending = [job(f"e{i:02}", 4096, 1, elastic=(1, 4096)) for i in range(50)]
    s = snap([node("n1", 0), node("n2", 3)], pending)
    d = decide(s)
    check_invariants(s, d)
    assert started(d) == {"e00": {"n2": (0, 1, 2)}}
    assert why(d, "e01").startswith("needs 1 free h100 GPUs on one node")
    assert calls <= 2 * len(pending)  # 204,798 before: about 4,096 counts for each job
