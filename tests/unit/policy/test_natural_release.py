"""Rule 4b: a blocked job preempts (or shrinks, or waits for GPUs being released) only if that
frees its GPUs sooner than running jobs' expected ends would; otherwise it holds the GPUs those
ends free (docs/policy.md)."""

from __future__ import annotations

from scheduler.policy import Reserve, decide

from .helpers import check_invariants, job, node, run, snap, why

NOW = 10_000.0


def two_full_nodes(ending_at: float | None):
    """n1 held by a non-preemptible job that ends at ``ending_at``; n2 by a preemptible
    low-class job that checkpointed a minute ago (the cheapest victim there is)."""
    nodes = [node("n1", 0), node("n2", 0)]
    running = [
        run("ending", {"n1": range(8)}, pc="high", preemptible=False, end=ending_at),
        run("victim", {"n2": range(8)}, ckpt=NOW - 60, interval=3600),
    ]
    return nodes, running


def test_a_job_ending_before_the_grace_is_over_is_waited_for_instead_of_preempting():
    nodes, running = two_full_nodes(ending_at=NOW + 60)  # grace is 120 s
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, las=None)
    d = decide(s)
    check_invariants(s, d)
    assert not d.preempt
    assert d.reserve == (Reserve("urgent", NOW + 60, ("n1",)),)
    assert why(d, "urgent") == (
        "reserved to start at t=10060 on GPUs running or preempted jobs are expected to "
        "release (no preemption frees them sooner)"
    )
    assert d.pending[0].estimated_start == NOW + 60


def test_a_job_ending_exactly_when_the_grace_ends_is_waited_for_too():
    nodes, running = two_full_nodes(ending_at=NOW + 120)
    d = decide(snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, las=None))
    assert not d.preempt
    assert d.reserve == (Reserve("urgent", NOW + 120, ("n1",)),)


def test_a_job_ending_after_the_grace_does_not_stop_the_preemption():
    nodes, running = two_full_nodes(ending_at=NOW + 121)
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, las=None)
    d = decide(s)
    check_invariants(s, d)
    assert [p.job for p in d.preempt] == ["victim"]
    assert d.reserve == (Reserve("urgent", NOW + 120, ("n2",)),)


def test_a_job_past_its_expected_end_is_not_counted_on():
    # It may run on for hours: waiting for it could hold the blocked job off indefinitely.
    nodes, running = two_full_nodes(ending_at=NOW - 300)
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, las=None)
    d = decide(s)
    check_invariants(s, d)
    assert [p.job for p in d.preempt] == ["victim"]


def test_a_job_without_an_expected_end_is_not_counted_on():
    nodes, running = two_full_nodes(ending_at=None)
    d = decide(snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, las=None))
    assert [p.job for p in d.preempt] == ["victim"]


def test_a_same_class_victim_that_runs_on_to_its_checkpoint_loses_to_an_earlier_end():
    # Inside a class the victim runs on to just past its next checkpoint (rule 4a), 30 minutes
    # away here; a job of another team ends in 10: the waiting job takes that one's GPUs.
    nodes = [node("n1", 0), node("n2", 0)]
    running = [
        run("ending", {"n1": range(8)}, pc="normal", preemptible=False, end=NOW + 600),
        run(
            "served",
            {"n2": range(8)},
            pc="normal",
            started=NOW - 50_000,
            ckpt=NOW - 1800,
            interval=3600,
            attained=50_000 * 8,
        ),
    ]
    s = snap(nodes, [job("fresh", 1, 8, pc="normal")], running, now=NOW)
    d = decide(s)
    check_invariants(s, d)
    assert not d.preempt
    assert d.reserve == (Reserve("fresh", NOW + 600, ("n1",)),)
    # and once the other job's end is later than the victim's checkpoint, it preempts
    running[0] = run("ending", {"n1": range(8)}, pc="normal", preemptible=False, end=NOW + 3000)
    d = decide(snap(nodes, [job("fresh", 1, 8, pc="normal")], running, now=NOW))
    assert [p.job for p in d.preempt] == ["served"]
    assert d.preempt[0].grace_s == 1800 + 30
