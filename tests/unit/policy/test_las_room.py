"""How a blocked job gets room under LAS queues: the cheapest complete node for a one-node job,
FIFO inside a queue for one-node jobs, and no idle-holding reservation while attained service
can still make room (``las_fifo_one_node``, ``las_reserve_after_s``)."""

from dataclasses import replace

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
SERVED = 10_000.0  # x 4 GPUs = 40,000 GPU-s: queue 2, above a fresh job's queue 0


def test_one_node_job_preempts_the_node_that_loses_the_least_work_in_total():
    # Lost work = 4 GPUs x seconds since start (no checkpoints). n1: a (4) + b (400) = 404;
    # n2: c (240) + d (240) = 480. Cheapest-first over the cluster would complete n2 first
    # (a, c, d are the three cheapest); the engine compares whole nodes and takes n1.
    running = [
        run("a", {"n1": range(4)}, pc="normal", started=NOW - 1, attained=SERVED),
        run("b", {"n1": range(4, 8)}, pc="normal", started=NOW - 100, attained=SERVED),
        run("c", {"n2": range(4)}, pc="normal", started=NOW - 60, attained=SERVED),
        run("d", {"n2": range(4, 8)}, pc="normal", started=NOW - 60, attained=SERVED),
    ]
    s = snap(
        [node("n1", 0), node("n2", 0)],
        [job("fresh", 1, 8, pc="normal")],
        running,
        now=NOW,
        las_thresholds_gpu_s=TH,
    )
    d = decide(s)
    check_invariants(s, d)
    assert sorted(p.job for p in d.preempt) == ["a", "b"]
    assert [(r.job, r.nodes) for r in d.reserve] == [("fresh", ("n1",))]


def _queue_peers(**config):
    # The submission-order rule is off by default: these tests turn it on at its former 600 s.
    config.setdefault("las_fifo_one_node_after_s", 600.0)
    # Both running jobs are in queue 0 like 'big' (served 400 GPU-s); n1 and n2 have 4 free.
    running = [
        run("early", {"n1": range(4)}, pc="normal", started=NOW - 100, submitted=100.0),
        run("late", {"n2": range(4)}, pc="normal", started=NOW - 100, submitted=900.0),
    ]
    nodes = [node("n1", [4, 5, 6, 7]), node("n2", [4, 5, 6, 7])]
    pending = [job("big", 1, 8, pc="normal", submitted=500.0)]
    config.setdefault("las_thresholds_gpu_s", TH)
    return snap(nodes, pending, running, now=NOW, **config)


def test_one_node_job_preempts_a_same_queue_job_submitted_after_it():
    s = _queue_peers()
    d = decide(s)
    check_invariants(s, d)
    # 'early' was submitted before 'big' and is never preempted for it; 'late' is.
    assert [p.job for p in d.preempt] == ["late"]
    assert d.preempt[0].reason.startswith(
        "submission order: big needs 8 h100 GPUs on one node and was submitted before late"
    )
    assert why(d, "big") == "waiting for 4 preempted GPUs to be released (grace 120 s)"
    assert [(r.job, r.nodes) for r in d.reserve] == [("big", ("n2",))]


def test_submission_order_needs_las_the_knob_a_submit_time_and_a_one_node_job():
    assert not decide(_queue_peers(las_fifo_one_node_after_s=None)).preempt
    assert not decide(_queue_peers(las=None)).preempt
    s = _queue_peers()
    # A running job without submitted_at (a caller that does not send it) is never preempted
    # by this rule.
    late = replace(s.running[1], submitted_at=None)
    assert not decide(replace(s, running=(s.running[0], late))).preempt
    # A gang (2 workers of 4) does not use it either.
    gang = replace(s.pending[0], workers=2, gpus_per_worker=4)
    nodes = (node("n1", [4, 5, 6]), node("n2", [4, 5, 6]))
    assert not decide(replace(s, nodes=nodes, pending=(gang,))).preempt
    # A job submitted after both preempts neither.
    young = replace(s.pending[0], submitted_at=1000.0)
    assert not decide(replace(s, pending=(young,))).preempt
    # A job that has waited less than las_fifo_after_s (600 s) does not preempt yet.
    fresh = replace(s.pending[0], submitted_at=NOW - 599)
    fresh_late = replace(s.running[1], submitted_at=NOW - 500)
    assert not decide(replace(s, pending=(fresh,), running=(s.running[0], fresh_late))).preempt
    fresh = replace(s.pending[0], submitted_at=NOW - 600)
    d = decide(replace(s, pending=(fresh,), running=(s.running[0], fresh_late)))
    assert [p.job for p in d.preempt] == ["late"]


def _peer_holds_the_node(**config):
    # 'peer' is preemptible and in queue 0 like 'big': no LAS preemption, no fragmentation.
    running = [run("peer", {"n1": range(8)}, pc="normal", started=NOW - 100, end=NOW + 5000)]
    pending = [job("big", 1, 8, pc="normal", submitted=config.pop("submitted", NOW - 600))]
    config.setdefault("las_thresholds_gpu_s", TH)
    return snap([node("n1", 0)], pending, running, now=NOW, **config)


def test_no_reservation_while_preemptible_work_can_still_make_room():
    # 'big' holds nothing (no Reserve), so a short job backfills onto the free GPU; the model's
    # first gated job still gets a start estimate from the release timeline.
    s = _peer_holds_the_node()
    nodes = (node("n1", 0), node("n2", [7], gpus=8))
    small = job("small", 1, 1, pc="normal", submitted=NOW - 10, est=90_000.0)
    s2 = replace(s, nodes=nodes, pending=(*s.pending, small))
    d = decide(s2)
    check_invariants(s2, d)
    assert not d.reserve and not d.preempt
    assert [st.job for st in d.start] == ["small"]
    assert why(d, "big").endswith(
        "; estimated start t=105000; no GPUs held for it before it has waited 86400 s "
        "(preemptible jobs hold enough GPUs and change hands by attained service)"
    )
    assert d.pending[0].estimated_start == NOW + 5000
    # A second gated job of the model gets no estimate (one timeline walk per model and cycle).
    big2 = replace(s.pending[0], id="big2", submitted_at=NOW - 500)
    d = decide(replace(s, pending=(*s.pending, big2)))
    assert why(d, "big2").startswith("needs 8 free h100 GPUs on one node")
    assert [p.estimated_start for p in d.pending] == [NOW + 5000, None]


def test_reservation_after_the_wait_or_when_off_or_without_preemption():
    expected = [("big", NOW + 5000, ("n1",))]
    for config in (
        {"submitted": NOW - 86_400},  # waited a day
        {"las_reserve_after_s": 0},  # gate off
        {"preemption": False},  # nothing will change hands
        {"las_thresholds_gpu_s": ()},  # no LAS queues
    ):
        d = decide(_peer_holds_the_node(**config))
        assert [(r.job, r.at, r.nodes) for r in d.reserve] == expected, config
    # Non-preemptible work never changes hands: the reservation is made at once.
    s = _peer_holds_the_node()
    s = replace(s, running=(replace(s.running[0], preemptible=False),))
    assert [(r.job, r.at) for r in decide(s).reserve] == [("big", NOW + 5000)]


def _spread_gang(**config):
    # 'big' (2 x 8) waits with 16 GPUs free, but none of the three nodes is whole.
    running = [
        run("a", {"n1": range(3)}, pc="normal", started=NOW - 100, submitted=900.0),
        run("b", {"n2": range(1)}, pc="normal", started=NOW - 100, submitted=950.0),
        run("c", {"n3": range(4)}, pc="normal", started=NOW - 100, preemptible=False),
    ]
    nodes = [node("n1", range(3, 8)), node("n2", range(1, 8)), node("n3", range(4, 8))]
    pending = [job("big", 2, 8, pc="normal", submitted=500.0)]
    config.setdefault("las_thresholds_gpu_s", TH)
    return snap(nodes, pending, running, now=NOW, **config)


def test_fragmented_gang_moves_later_jobs_that_fit_elsewhere():
    s = _spread_gang()
    d = decide(s)
    check_invariants(s, d)
    assert sorted(p.job for p in d.preempt) == ["a", "b"]
    assert all(p.reason.startswith("defragment: big needs 2x8 h100 GPUs") for p in d.preempt)
    assert [(r.job, r.nodes) for r in d.reserve] == [("big", ("n1", "n2"))]


def test_gang_defragment_needs_the_knob_room_elsewhere_and_later_submissions():
    assert not decide(_spread_gang(las_defragment=False)).preempt
    s = _spread_gang()
    # 'a' submitted before 'big': n1 cannot be emptied, and n3 holds a non-preemptible job.
    early = replace(s.running[0], submitted_at=100.0)
    assert not decide(replace(s, running=(early, *s.running[1:]))).preempt
    # A 4-GPU 'a' needs a 4-GPU hole elsewhere; the other free GPUs are 3 on n3 and 2 on n4.
    a4 = replace(s.running[0], placement={"n1": (0, 1, 2, 3)}, gpus_per_worker=4)
    c5 = replace(s.running[2], placement={"n3": (0, 1, 2, 3, 4)}, gpus_per_worker=5)
    d6 = run("d", {"n4": range(6)}, pc="normal", started=NOW - 100, preemptible=False)
    nodes = (node("n1", range(4, 8)), s.nodes[1], node("n3", range(5, 8)), node("n4", (6, 7)))
    assert not decide(replace(s, nodes=nodes, running=(a4, s.running[1], c5, d6))).preempt
    # With 4 free on n3 instead, both fit and move.
    c4 = replace(s.running[2], placement={"n3": (0, 1, 2, 3)}, gpus_per_worker=4)
    nodes = (node("n1", range(4, 8)), s.nodes[1], node("n3", range(4, 8)), node("n4", (6, 7)))
    d = decide(replace(s, nodes=nodes, running=(a4, s.running[1], c4, d6)))
    assert sorted(p.job for p in d.preempt) == ["a", "b"]


def _decided(nodes, pending, running, **config):
    config.setdefault("las_thresholds_gpu_s", TH)
    s = snap(nodes, pending, running, now=NOW, **config)
    d = decide(s)
    check_invariants(s, d)
    return d


def _two_queues(pending, **config):
    # 'mid*' sit in queue 1 and lose 480 GPU-s each; 'long*' sit in queue 2 (the most served)
    # and lose 4,800 GPU-s each. No GPU is free.
    running = [
        run("mid1", {"n1": range(8)}, pc="normal", started=NOW - 60, attained=1_000.0),
        run("mid2", {"n2": range(8)}, pc="normal", started=NOW - 60, attained=1_000.0),
        run("long1", {"n3": range(8)}, pc="normal", started=NOW - 600, attained=10_000.0),
        run("long2", {"n4": range(8)}, pc="normal", started=NOW - 600, attained=10_000.0),
    ]
    return _decided([node(f"n{i}", 0) for i in range(1, 5)], pending, running, **config)


def test_victims_come_from_the_most_served_queue_before_cheaper_ones_nearer_the_preemptor():
    for pending, want in (
        ([job("fresh", 1, 8, pc="normal")], ["long1"]),
        ([job("gang", 2, 8, pc="normal")], ["long1", "long2"]),
    ):
        d = _two_queues(pending)
        assert sorted(p.job for p in d.preempt) == want
        assert d.preempt[0].reason.startswith("attained service: ")


def test_cheapest_victims_across_queues_without_lowest_queue_first():
    for pending, want in (
        ([job("fresh", 1, 8, pc="normal")], ["mid1"]),
        ([job("gang", 2, 8, pc="normal")], ["mid1", "mid2"]),
    ):
        d = _two_queues(pending, victims_lowest_rank_first=False)
        assert sorted(p.job for p in d.preempt) == want


def test_a_lower_class_is_preempted_before_a_more_served_job_of_the_preemptors_class():
    # 'served' (normal, queue 2) loses 480 GPU-s, 'low' (low class) 8 x 3,000 = 24,000 GPU-s:
    # cheapest-first took 'served' while a job of a lower class was running.
    running = [
        run("served", {"n1": range(8)}, pc="normal", started=NOW - 60, attained=10_000.0),
        run("low", {"n2": range(8)}, pc="low", started=NOW - 3_000),
    ]
    nodes = [node("n1", 0), node("n2", 0)]
    for flag, want in ((True, "low"), (False, "served")):
        pending = [job("fresh", 1, 8, pc="normal")]
        d = _decided(nodes, pending, running, victims_lowest_rank_first=flag)
        assert [p.job for p in d.preempt] == [want]


def test_the_most_served_queue_is_served_in_submission_order():
    # Both in the last queue (80,000 GPU-s); the default order would put the requeued one first.
    pending = [
        job("younger", 1, 8, pc="normal", submitted=500.0, attained=10_000.0, requeued=True),
        job("older", 1, 8, pc="normal", submitted=100.0, attained=10_000.0),
        job("fresh", 1, 8, pc="normal", submitted=900.0),
    ]
    s = snap([node("n1", 0)], pending, now=NOW, las_thresholds_gpu_s=TH)
    assert [p.id for p in queue_order(s)] == ["fresh", "older", "younger"]
    s = replace(s, config=replace(s.config, las=replace(s.config.las, bottom_fifo_queues=None)))
    assert [p.id for p in queue_order(s)] == ["fresh", "younger", "older"]


def test_the_last_bottom_fifo_queues_of_a_class_are_served_in_submission_order():
    # Queue 2 of four ([36,000, 360,000) GPU-s: 10,000 s x 8 GPUs) is not the last queue; the
    # default tie-break there puts the requeued job first, submission order the older one.
    pending = [
        job("younger", 1, 8, pc="normal", submitted=500.0, attained=10_000.0, requeued=True),
        job("older", 1, 8, pc="normal", submitted=100.0, attained=10_000.0),
    ]
    th = (3600.0, 36000.0, 360000.0)
    s = snap([node("n1", 0)], pending, now=NOW, las_thresholds_gpu_s=th, las_bottom_fifo_queues=1)
    assert [p.id for p in queue_order(s)] == ["younger", "older"]
    for queues in (2, 4, 9):  # more queues than the class has: all of them
        s = replace(
            s, config=replace(s.config, las=replace(s.config.las, bottom_fifo_queues=queues))
        )
        assert [p.id for p in queue_order(s)] == ["older", "younger"]
    s = replace(s, config=replace(s.config, las=replace(s.config.las, bottom_fifo_queues=None)))
    assert [p.id for p in queue_order(s)] == ["younger", "older"]


def _older_and_younger():
    # Both served 10,000 s x 8 GPUs; 'older' lost 480 GPU-s since its restart, 'younger' 24,000;
    # a fresh job needs one of their nodes.
    served = {"pc": "normal", "attained": 10_000.0}
    running = [
        run("older", {"n1": range(8)}, started=NOW - 60, submitted=100.0, **served),
        run("younger", {"n2": range(8)}, started=NOW - 3_000, submitted=5_000.0, **served),
    ]
    nodes = [node("n1", 0), node("n2", 0)]
    return nodes, [job("fresh", 1, 8, pc="normal", submitted=NOW)], running


def test_a_queue_served_in_submission_order_gives_up_its_youngest_job_first():
    # Queue 2 of four, which bottom_fifo_queues=2 puts in submission order.
    nodes, pending, running = _older_and_younger()
    four = {"las_thresholds_gpu_s": (3600.0, 36000.0, 360000.0)}
    d = _decided(nodes, pending, running, las_bottom_fifo_queues=2, **four)
    assert [p.job for p in d.preempt] == ["younger"]
    assert d.preempt[0].reason.endswith("(served oldest first)")
    d = _decided(nodes, pending, running, las_bottom_fifo_queues=1, **four)
    assert [p.job for p in d.preempt] == ["older"]


def test_the_most_served_queue_gives_up_its_most_recently_submitted_job_first():
    nodes, pending, running = _older_and_younger()  # both in the last queue
    d = _decided(nodes, pending, running)
    assert [p.job for p in d.preempt] == ["younger"]
    assert d.preempt[0].reason.endswith(
        "which was submitted last of the jobs in its queue (served oldest first)"
    )
    d = _decided(nodes, pending, running, las_bottom_fifo_queues=None)
    assert [p.job for p in d.preempt] == ["older"]  # its run started last (60 s ago)
    assert d.preempt[0].reason.endswith("which was started last of the jobs in its queue")


def _veteran_and_newcomer(pc: str = "normal"):
    # Both in queue 1 of three (served 20,000 s x 8 GPUs = 160,000 GPU-s, not a queue served in
    # submission order with las_bottom_fifo_queues=1), both with 30-minute checkpoints.
    # 'veteran' has run 20,000 s in this run and saved 60 s ago (480 GPU-s unsaved); 'newcomer'
    # restarted 2,000 s ago after 18,000 s of earlier runs and saved 200 s ago (1,600 GPU-s).
    ckpt = {"pc": pc, "interval": 1_800.0}
    running = [
        run("veteran", {"n1": range(8)}, started=NOW - 20_000, ckpt=NOW - 60, submitted=5_000.0,
            **ckpt),
        run("newcomer", {"n2": range(8)}, started=NOW - 2_000, ckpt=NOW - 200, attained=18_000.0,
            submitted=100.0, **ckpt),
    ]  # fmt: skip
    return [node("n1", 0), node("n2", 0)], [job("fresh", 1, 8, pc="normal", submitted=NOW)], running


def test_a_job_of_the_victims_class_preempts_the_most_recently_started_run_first():
    # A victim of the job's own class runs on to its next checkpoint and loses no work (rule
    # 4a), so the lost work it would lose now says nothing: the run that started last gives way
    # and the older one finishes. Least lost work, or submission order, would pick 'veteran'.
    nodes, pending, running = _veteran_and_newcomer()
    three = {"las_thresholds_gpu_s": (3600.0, 360000.0), "las_bottom_fifo_queues": 1}
    d = _decided(nodes, pending, running, **three)
    assert [p.job for p in d.preempt] == ["newcomer"]
    assert d.preempt[0].reason.startswith("attained service: fresh")
    assert d.preempt[0].reason.endswith("which was started last of the jobs in its queue")


def test_a_job_of_a_higher_class_preempts_the_run_that_loses_the_least_work_first():
    # A victim of a lower class stops at the end of its grace and loses the work since its last
    # checkpoint: there the least lost work decides, whatever the runs' ages.
    nodes, pending, running = _veteran_and_newcomer(pc="low")
    three = {"las_thresholds_gpu_s": (3600.0, 360000.0), "las_bottom_fifo_queues": 1}
    d = _decided(nodes, pending, running, **three)
    assert [p.job for p in d.preempt] == ["veteran"]
    assert d.preempt[0].reason.endswith(
        "veteran (low) loses the least work since its last checkpoint"
    )


def test_jobs_that_ran_long_are_served_after_the_rest_of_the_last_queue():
    # Both in the last queue (8 GPUs x >= 10,000 s); 'veteran' has run 50,000 s in all.
    pending = [
        job("veteran", 1, 8, pc="normal", submitted=100.0, attained=50_000.0),
        job("recent", 1, 8, pc="normal", submitted=500.0, attained=10_000.0),
    ]
    s = snap([node("n1", 0)], pending, now=NOW, las_thresholds_gpu_s=TH)
    assert [p.id for p in queue_order(s)] == ["veteran", "recent"]
    s = replace(s, config=replace(s.config, las=replace(s.config.las, long_run_s=40_000.0)))
    assert [p.id for p in queue_order(s)] == ["recent", "veteran"]


def test_a_job_that_ran_long_is_the_first_victim_and_preempts_no_one_of_the_last_queue():
    # 'veteran' (run 50,060 s) was submitted first: without the long-run queue the youngest of
    # the last queue goes; with it, the veteran.
    served = {"pc": "normal"}
    running = [
        run(
            "veteran",
            {"n1": range(8)},
            started=NOW - 60,
            submitted=100.0,
            attained=50_000.0,
            **served,
        ),
        run(
            "younger",
            {"n2": range(8)},
            started=NOW - 60,
            submitted=5_000.0,
            attained=10_000.0,
            **served,
        ),
    ]
    nodes = [node("n1", 0), node("n2", 0)]
    fresh = [job("fresh", 1, 8, pc="normal", submitted=NOW)]
    assert [p.job for p in _decided(nodes, fresh, running).preempt] == ["younger"]
    d = _decided(nodes, fresh, running, las_long_run_s=40_000.0)
    assert [p.job for p in d.preempt] == ["veteran"]
    assert d.preempt[0].reason.startswith("attained service: fresh")
    # A waiting long-run job submitted before 'younger' would move it by submission order in
    # the last queue; from the long-run queue it takes nothing.
    waiting = [job("old", 1, 8, pc="normal", submitted=50.0, attained=60_000.0)]
    fifo = {"las_fifo_one_node_after_s": 600.0}
    assert [p.job for p in _decided(nodes, waiting, running[1:], **fifo).preempt] == ["younger"]
    assert _decided(nodes, waiting, running[1:], las_long_run_s=40_000.0, **fifo).preempt == ()


def test_a_running_job_joins_the_long_run_queue_when_its_run_time_reaches_it():
    # The same RunningJob object before and after it has run 40,000 s in all: the engine's
    # cross-call rank memo must not keep the old queue.
    veteran = run(
        "veteran",
        {"n1": range(8)},
        started=NOW - 100,
        submitted=100.0,
        attained=39_950.0,
        pc="normal",
    )
    younger = run(
        "younger",
        {"n2": range(8)},
        started=NOW - 60,
        submitted=5_000.0,
        attained=10_000.0,
        pc="normal",
    )
    nodes = [node("n1", 0), node("n2", 0)]
    cfg = {"las_thresholds_gpu_s": TH, "las_long_run_s": 40_000.0}
    for now, victim in ((NOW - 80, "younger"), (NOW, "veteran")):
        fresh = [job("fresh", 1, 8, pc="normal", submitted=now)]
        s = snap(nodes, fresh, [veteran, younger], now=now, **cfg)
        d = decide(s)
        check_invariants(s, d)
        assert [p.job for p in d.preempt] == [victim]
