"""Least-attained-service queues inside a priority class (``Config.las_thresholds_gpu_s``)."""

from scheduler.policy import decide, queue_order

from . import helpers
from .helpers import check_invariants, job, node, snap, why


def run(*args, **kwargs):
    """A running job that, unless the test says otherwise, saved a checkpoint just after it
    started: past its minimum quantum, so these tests see which victim each rule picks
    (test_quantum.py tests the quantum itself)."""
    kwargs.setdefault("ckpt", kwargs.get("started", 0.0) + 1e-3)
    return helpers.run(*args, **kwargs)


NOW = 100_000.0
TH = (3600.0, 36000.0)


def test_las_off_same_class_never_preempts():
    # One class, a long-running preemptible job and a fresh job: without thresholds no preemption.
    running = [
        run("long", {"n1": range(8)}, pc="normal", started=0.0, ckpt=NOW - 900, interval=3600)
    ]
    s = snap(
        [node("n1", 0)],
        [job("fresh", 1, 8, pc="normal")],
        running,
        now=NOW,
        las=None,
    )
    d = decide(s)
    assert not d.preempt


def test_las_fresh_job_preempts_a_more_served_job_of_its_class():
    # 'long' has run 100,000 s x 8 GPUs (queue 2); 'fresh' has nothing (queue 0).
    running = [
        run("long", {"n1": range(8)}, pc="normal", started=0.0, ckpt=NOW - 900, interval=3600)
    ]
    s = snap(
        [node("n1", 0)],
        [job("fresh", 1, 8, pc="normal")],
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
    )
    d = decide(s)
    check_invariants(s, d)
    assert [p.job for p in d.preempt] == ["long"]
    assert d.preempt[0].reason.startswith("attained service: fresh (normal) needs 8 h100 GPUs")
    # it runs on to just past its next checkpoint (NOW + 2,700 s), so it loses no work
    assert d.preempt[0].grace_s == 2700.0 + 30.0
    assert why(d, "fresh") == "waiting for 8 preempted GPUs to be released (grace 2730 s)"


def test_las_same_queue_does_not_preempt_and_protection_window_holds():
    # Both served less than 3,600 GPU-s: same queue, no preemption.
    running = [run("young", {"n1": range(8)}, pc="normal", started=NOW - 100)]
    s = snap(
        [node("n1", 0)],
        [job("fresh", 1, 8, pc="normal")],
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
    )
    assert not decide(s).preempt
    # A more-served victim whose checkpoint is due within the protection window is spared.
    running = [run("long", {"n1": range(8)}, pc="normal", ckpt=NOW - 3500, interval=3600)]
    s = snap(
        [node("n1", 0)],
        [job("fresh", 1, 8, pc="normal")],
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
    )
    assert not decide(s).preempt


def test_las_never_crosses_classes_and_never_takes_non_preemptible():
    # A fresh low-class job must not preempt a served normal-class job; nor a non-preemptible one.
    running = [
        run("served-normal", {"n1": range(8)}, pc="normal", ckpt=NOW - 900, interval=3600),
        run("pinned", {"n2": range(8)}, pc="low", preemptible=False),
    ]
    s = snap(
        [node("n1", 0), node("n2", 0)],
        [job("fresh-low", 1, 8, pc="low")],
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
    )
    assert not decide(s).preempt
    # A higher class still preempts a lower one whatever their attained service.
    running = [run("v", {"n1": range(8)}, pc="low", started=NOW - 10, ckpt=NOW - 10, interval=3600)]
    s = snap(
        [node("n1", 0)],
        [job("hi", 1, 8, pc="high", attained=1e6)],
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
    )
    d = decide(s)
    assert [p.job for p in d.preempt] == ["v"]
    assert d.preempt[0].reason.startswith("priority: hi (high)")


def test_las_counts_service_of_earlier_runs_and_orders_the_queue():
    # attained_service_s of a running job adds to its current run: 400 s x 8 + 100 s x 8 > 3,600.
    running = [run("requeued", {"n1": range(8)}, pc="normal", started=NOW - 100, attained=400)]
    s = snap(
        [node("n1", 0)],
        [job("fresh", 1, 8, pc="normal")],
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
    )
    assert [p.job for p in decide(s).preempt] == ["requeued"]
    # Pending: a job that already received service queues behind a fresh one of its class,
    # even if it is smaller and older; the class still comes first.
    pending = [
        job("served", 1, 1, pc="normal", attained=5000, submitted=0, requeued=True),
        job("fresh", 1, 8, pc="normal", submitted=50),
        job("low", 1, 1, pc="low", submitted=0),
    ]
    s = snap([node("n1")], pending, now=NOW, las_thresholds_gpu_s=TH)
    assert [p.id for p in queue_order(s)] == ["fresh", "served", "low"]
    s = snap([node("n1")], pending, now=NOW, las=None)
    assert [p.id for p in queue_order(s)][0] == "served"  # off: requeued jobs first
