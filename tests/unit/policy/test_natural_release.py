"""Rule 4b: a blocked job preempts (or shrinks, or waits for GPUs being released) only if that
frees its GPUs sooner than running jobs' expected ends would; otherwise it holds the GPUs those
ends free (docs/policy.md)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


def _timeline_fit_at(s, gpus_per_worker: int, workers: int) -> float | None:
    """Independently of the engine: the earliest time the gang fits on the GPUs free now plus
    those released by running jobs' expected ends still ahead (one GPU model, 8-GPU nodes)."""
    free = {n.name: len(n.free_gpus) for n in s.nodes}

    def fits() -> bool:
        return sum(c // gpus_per_worker for c in free.values()) >= workers

    if fits():
        return s.now
    ends = sorted(
        (r.expected_end, r.id, r) for r in s.running if r.expected_end and r.expected_end > s.now
    )
    for end, _, r in ends:
        for name, idxs in r.placement.items():
            free[name] += len(idxs)
        if fits():
            return end
    return None


@st.composite
def contended(draw):
    """Full 8-GPU nodes held by low-class preemptible jobs with random expected ends and
    checkpoints, and one high-class job waiting (nothing else competes for a reservation)."""
    nodes = draw(st.integers(1, 4))
    running = []
    for n in range(nodes):
        first = 0
        while first < 8:
            size = min(draw(st.sampled_from([1, 2, 4, 8])), 8 - first)
            running.append(
                run(
                    f"r{n}-{first}",
                    {f"n{n}": range(first, first + size)},
                    pc=draw(st.sampled_from(["low", "high"])),
                    preemptible=draw(st.booleans()),
                    started=NOW - 5000,
                    ckpt=NOW - draw(st.sampled_from([60.0, 1000.0, 3500.0])),
                    interval=3600.0,
                    end=draw(
                        st.sampled_from([None, NOW - 100.0, NOW + 30.0, NOW + 120.0, NOW + 600.0])
                    ),
                )
            )
            first += size
    shape = draw(st.sampled_from([(1, 1), (1, 4), (1, 8), (2, 8)]))
    pending = [job("urgent", shape[0], shape[1], pc="high")]
    return snap([node(f"n{n}", 0) for n in range(nodes)], pending, running, now=NOW, las=None)


@settings(max_examples=300, deadline=None)
@given(contended())
def test_never_preempts_when_expected_ends_free_the_gpus_no_later(s):
    d = decide(s)
    check_invariants(s, d)
    if not d.preempt:
        return
    job_ = s.pending[0]
    (res,) = [r for r in d.reserve if r.job == job_.id]
    natural = _timeline_fit_at(s, job_.gpus_per_worker, job_.workers)
    assert natural is None or natural > res.at, (natural, res, d.preempt)


def test_the_reservation_after_the_check_counts_an_overdue_job_the_check_did_not():
    # The check (n1's end at +60 comes before the grace) does not count on the overdue job on
    # n3; the reservation it leads to does, like every EASY reservation: its walk of the
    # timeline is its own, not the check's.
    nodes, running = two_full_nodes(ending_at=NOW + 60)
    nodes.append(node("n3", 4))
    running.append(run("overdue", {"n3": range(4)}, pc="high", preemptible=False, end=NOW - 300))
    s = snap(nodes, [job("urgent", 1, 8, pc="high")], running, now=NOW, las=None)
    d = decide(s)
    check_invariants(s, d)
    assert not d.preempt
    assert d.reserve == (Reserve("urgent", NOW, ("n3",)),)
