"""Rule 7: checkpoint-aware preemption with protection windows and a grace period."""

from scheduler.policy import Reserve, decide

from .helpers import check_invariants, job, node, run, snap, started, why

NOW = 10_000.0


def full_pair(**b_kwargs):
    """n1 and n2 full with one low-priority 8-GPU job each; 'old' lost more work than 'fresh'."""
    nodes = [node("n1", 0), node("n2", 0)]
    running = [
        run("old", {"n1": range(8)}, ckpt=NOW - 3000, interval=3600),
        run("fresh", {"n2": range(8)}, **({"ckpt": NOW - 60, "interval": 3600} | b_kwargs)),
    ]
    return nodes, running


def test_rule_7_preempts_the_victim_that_loses_least_work_with_a_grace_period():
    nodes, running = full_pair()
    # LAS queues off: the fresh low-class filler would otherwise preempt a more-served peer
    s = snap(
        nodes,
        [job("urgent", 1, 8, pc="high"), job("filler", 1, 1, pc="low")],
        running,
        now=NOW,
        las=None,
    )
    d = decide(s)
    check_invariants(s, d)
    assert [(p.job, p.grace_s) for p in d.preempt] == [("fresh", 120.0)]
    assert d.preempt[0].reason.startswith("priority: urgent (high) needs 8 h100 GPUs")
    # The freed GPUs are not handed out in the same decision set: not to urgent, not to filler.
    assert not d.start
    assert why(d, "urgent") == "waiting for 8 preempted GPUs to be released (grace 120 s)"
    assert d.reserve == (Reserve("urgent", NOW + 120, ("n2",)),)
    assert d.pending[0].estimated_start == NOW + 120


def test_rule_7_victim_due_to_checkpoint_within_the_protection_window_is_not_cut():
    # fresh's next checkpoint is due in 200 s (< 300 s protect window): take 'old' instead.
    nodes, running = full_pair(ckpt=NOW - 3400, interval=3600)
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW)
    d = decide(s)
    check_invariants(s, d)
    assert [p.job for p in d.preempt] == ["old"]


def test_rule_7_only_preemptible_victims_of_lower_priority():
    nodes, running = full_pair(preemptible=False)
    running[0] = run("old", {"n1": range(8)}, pc="high")  # same priority as the pending job
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, las=None)
    d = decide(s)
    assert not d.preempt
    assert "waiting for" not in why(d, "urgent")


def test_rule_7_never_more_victims_than_the_job_needs():
    nodes = [node("n1", 0)]
    running = [run(f"v{i}", {"n1": [2 * i, 2 * i + 1]}, ckpt=NOW - 100 * (i + 1)) for i in range(4)]
    s = snap(nodes, [job("urgent", 1, 4, pc="high")], running, now=NOW)
    d = decide(s)
    check_invariants(s, d)
    # v0 and v1 checkpointed most recently: together they free exactly 4 GPUs.
    assert sorted(p.job for p in d.preempt) == ["v0", "v1"]


def test_rule_7_preemption_off_means_no_victims():
    nodes, running = full_pair()
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, preemption=False)
    assert not decide(s).preempt


def test_rule_7_victims_already_releasing_are_not_preempted_again():
    nodes, running = full_pair()
    running[1] = run("fresh", {"n2": range(8)}, releasing_at=NOW + 60)
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW)
    d = decide(s)
    check_invariants(s, d)
    assert not d.preempt
    # rule 4b: the release is on the timeline, so the job holds those GPUs like any release
    assert why(d, "urgent") == (
        "reserved to start at t=10060 on GPUs running or preempted jobs are expected to "
        "release (no preemption frees them sooner)"
    )
    assert d.reserve == (Reserve("urgent", NOW + 60, ("n2",)),)


def test_rule_7_gang_preemption_takes_whole_victims_across_nodes():
    nodes = [node("n1", 4), node("n2", 4)]
    running = [
        run("a", {"n1": range(4)}, ckpt=NOW - 10),
        run("b", {"n2": range(4)}, ckpt=NOW - 20),
    ]
    s = snap(nodes, [job("g", 2, 8, pc="high"), job("small", 1, 2, pc="low")], running, now=NOW)
    d = decide(s)
    check_invariants(s, d)
    assert sorted(p.job for p in d.preempt) == ["a", "b"]
    # small must not take n1/n2's free GPUs that g is waiting on.
    assert "small" not in started(d)
