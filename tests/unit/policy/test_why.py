"""Rule 10: every job left pending says which constraint holds it, with a start estimate when
a reservation exists."""

from scheduler.policy import decide

from .helpers import check_invariants, job, node, run, snap, team, why


def test_rule_10_each_constraint_has_a_readable_why():
    teams = [team("capped", quota={"h100": (0, 0)}), team("heavy", usage=1e6), team("light")]
    nodes = [node("n1", [4, 5, 6, 7]), node("n2", [6, 7])]
    running = [
        run("r1", {"n1": [0, 1, 2, 3]}, end=5000.0, preemptible=False),
        run("r2", {"n2": range(6)}, end=9000.0, preemptible=False),
    ]
    pend = [
        job("quota", team="capped", pc="high"),
        job("data", dataset="imagenet", dataset_ready=False),
        job("light-4", 1, 4, team="light", est=100_000),
        job("heavy-4", 1, 4, team="heavy"),
        job("gang", 2, 8, team="light", pc="low"),
        job("model", model="mi300", pc="low"),
        job("after-res", 1, 2, team="light", pc="low", est=100_000),
    ]
    s = snap(nodes, pend, running, teams=teams)
    d = decide(s)
    check_invariants(s, d)
    assert why(d, "quota").startswith("quota: team capped would use 1 h100 GPUs, above its limit")
    assert why(d, "data").startswith("dataset imagenet is not ready yet")
    assert why(d, "heavy-4") == (
        "needs 4 free h100 GPUs on one node; the largest free block is 2; the free GPUs went "
        "to higher-ranked jobs this cycle (priority, fair share); reserved to start at t=5000"
    )
    assert why(d, "gang").startswith(
        "gang of 2x8 h100 GPUs does not fit: free GPUs per node leave room for 0 of 2 workers"
    )
    assert why(d, "model") == "no ready, healthy nodes with mi300 GPUs"
    estimates = {p.job: p.estimated_start for p in d.pending}
    assert estimates["heavy-4"] == 5000.0
    assert estimates["gang"] is None


def test_rule_10_reservation_ahead_is_named():
    nodes = [node("n1", [4, 5, 6, 7])]
    running = [run("r1", {"n1": [0, 1, 2, 3]}, end=2000.0, preemptible=False)]
    s = snap(nodes, [job("big", 1, 8, pc="high"), job("small", 1, 2)], running)
    d = decide(s)
    assert why(d, "small") == (
        "needs 2 free h100 GPUs on one node; the largest free block is 0; the free GPUs are held "
        "for big (reserved at t=2000); an estimated end before then would let it backfill"
    )


def test_rule_10_a_job_the_planner_had_no_plan_left_for_says_so():
    # Two low-class runs fill two nodes; each high-class job could preempt one of them, but with
    # one plan per cycle only the first in the queue plans, and the second must not read as if
    # nobody could give way.
    nodes = [node("n1", []), node("n2", [])]
    running = [run("r1", {"n1": range(8)}, end=90_000.0), run("r2", {"n2": range(8)}, end=90_000.0)]
    pending = [job("small", 1, 2, pc="high"), job("big", 1, 4, pc="high", submitted=1.0)]
    one_plan = snap(nodes, pending, running, max_preemption_attempts=1)
    d = decide(one_plan)
    check_invariants(one_plan, d)
    assert len(d.preempt) == 1
    assert why(d, "big").startswith(
        "needs 4 free h100 GPUs on one node; the largest free block is 0; no preemption plan "
        "left for it this cycle (1 per cycle went to jobs ahead of it);"
    )
    two_plans = decide(snap(nodes, pending, running, max_preemption_attempts=2))
    assert len(two_plans.preempt) == 2
    assert why(two_plans, "big") == "waiting for 8 preempted GPUs to be released (grace 120 s)"


def test_rule_10_a_job_the_reservations_ran_out_before_says_so():
    # Two runs fill two nodes and end at 2000 and 3000. With one reservation per GPU model only
    # the first of the two 8-GPU jobs gets one, and the second must say that it waits its turn
    # for a reservation (Slurm's "Priority"), not only for GPUs.
    nodes = [node("n1", []), node("n2", [])]
    running = [
        run("r1", {"n1": range(8)}, end=2000.0, preemptible=False),
        run("r2", {"n2": range(8)}, end=3000.0, preemptible=False),
    ]
    pending = [job("big1", 1, 8, submitted=1.0), job("big2", 1, 8, submitted=2.0)]
    one = snap(nodes, pending, running, queue_order="fifo", reservations_per_model=1)
    d = decide(one)
    check_invariants(one, d)
    assert [r.job for r in d.reserve] == ["big1"]
    assert why(d, "big2") == (
        "needs 8 free h100 GPUs on one node; the largest free block is 0; no reservation left "
        "for it this cycle (1 per GPU model went to jobs ahead of it)"
    )
    two = decide(snap(nodes, pending, running, queue_order="fifo", reservations_per_model=2))
    assert [r.job for r in two.reserve] == ["big1", "big2"]
    assert why(two, "big2").endswith("reserved to start at t=3000")
