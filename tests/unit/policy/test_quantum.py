"""The minimum quantum: inside a priority class, a job is preempted only after it has saved a
checkpoint since it (re)started, and it runs on to just past its next checkpoint before it stops,
so a preemption inside a class throws away no work (docs/policy.md, "Minimum quantum")."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import decide

from .helpers import check_invariants, job, node, run, snap

NOW = 100_000.0
TH = (3600.0, 36000.0)


@st.composite
def contended(draw):
    """One class, full 8-GPU nodes held by preemptible jobs with random run and checkpoint
    times, fresh jobs waiting: attained service, submission order and defragmenting all want
    victims."""
    nodes = draw(st.integers(1, 4))
    running = []
    for n in range(nodes):
        first = 0
        while first < 8:
            size = draw(st.sampled_from([1, 2, 4, 8]))
            size = min(size, 8 - first)
            ran = draw(st.sampled_from([10.0, 600.0, 1800.0, 5000.0, 50_000.0]))
            interval = draw(st.sampled_from([None, 600.0, 1800.0]))
            # None: never checkpointed; before start: an earlier run's; after: this run's
            ckpt = draw(st.sampled_from([None, -1.0, 0.5]))
            started = NOW - ran
            last = None if ckpt is None else started + ckpt * min(ran, interval or ran)
            running.append(
                run(
                    f"r{n}-{first}",
                    {f"n{n}": range(first, first + size)},
                    pc="normal",
                    started=started,
                    ckpt=last,
                    interval=interval,
                    attained=draw(st.sampled_from([0.0, 10_000.0])),
                    submitted=draw(st.sampled_from([0.0, NOW - 1000.0])),
                )
            )
            first += size
    pending = [
        job(
            f"p{i}",
            1,
            draw(st.sampled_from([1, 4, 8])),
            pc="normal",
            submitted=draw(st.sampled_from([-5000.0, NOW - 700.0, NOW])),
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    return snap(
        [node(f"n{n}", 0) for n in range(nodes)],
        pending,
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
        checkpoint_protect_s=draw(st.sampled_from([0.0, 300.0])),
    )


@settings(max_examples=200, deadline=None)
@given(contended())
def test_a_job_is_never_preempted_by_its_class_before_its_first_checkpoint_of_the_run(s):
    d = decide(s)
    check_invariants(s, d)
    running = {r.id: r for r in s.running}
    for p in d.preempt:
        r = running[p.job]
        assert r.last_checkpoint_at is not None and r.last_checkpoint_at > r.started_at, p
        if r.checkpoint_interval_s is None:
            continue  # no checkpoint to wait for: the ordinary grace
        # it stops just past its next checkpoint: nothing since the last one is lost
        due = r.last_checkpoint_at + r.checkpoint_interval_s
        while due <= s.now:
            due += r.checkpoint_interval_s
        assert s.now + p.grace_s >= due


def test_the_quantum_does_not_hold_off_a_higher_class():
    # A job of a higher class preempts at once, checkpoint or not (priority preemption).
    running = [run("fresh-low", {"n1": range(8)}, pc="low", started=NOW - 10)]
    s = snap([node("n1", 0)], [job("urgent", 1, 8, pc="high")], running, now=NOW)
    d = decide(s)
    check_invariants(s, d)
    assert [(p.job, p.grace_s) for p in d.preempt] == [("fresh-low", s.config.preemption_grace_s)]


def test_a_more_served_job_waits_for_its_first_checkpoint_then_yields_at_the_next():
    def state(ckpt):
        r = run(
            "served",
            {"n1": range(8)},
            pc="normal",
            started=NOW - 1000,
            ckpt=ckpt,
            interval=1800,
            attained=50_000.0,
        )
        return snap(
            [node("n1", 0)],
            [job("fresh", 1, 8, pc="normal")],
            [r],
            now=NOW,
            las_thresholds_gpu_s=TH,
        )

    # 1,000 s into its run, its last checkpoint is from before the run: no victim yet
    assert not decide(state(NOW - 5000)).preempt
    # checkpointed 400 s ago in this run: it yields just past the next one (1,400 s from now)
    d = decide(state(NOW - 400))
    assert [(p.job, p.grace_s) for p in d.preempt] == [("served", 1400.0 + 30.0)]
