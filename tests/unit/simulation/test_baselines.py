"""Each baseline's defining behaviour on tiny hand-made traces (1 node x 4 GPUs unless noted)."""

from __future__ import annotations

from scheduler.simulation import SimConfig
from scheduler.simulation.baselines import Tiresias

from .builders import job, run, starts


def test_fifo_is_strict_no_backfill():
    # big2 cannot fit next to big1; the small job would fit but waits behind big2
    trace = [job("big1", 0, 100, 3), job("big2", 10, 100, 4), job("small", 20, 10, 1)]
    assert starts(run(trace, "fifo")) == {"big1": 0, "big2": 100, "small": 200}


def test_fifo_places_on_the_fullest_node_that_fits():
    # a: 3 GPUs on node 0; b: 2 GPUs on node 1; c (1 GPU) must fill node 0's last GPU so that
    # node 1 keeps 2 free GPUs for e
    trace = [
        job("a", 0, 1000, 3),
        job("b", 1, 1000, 2),
        job("c", 2, 1000, 1),
        job("e", 3, 1000, 2),
    ]
    assert starts(run(trace, "fifo", nodes=2))["e"] == 3


def test_fifo_backfill_starts_a_short_job_that_does_not_delay_the_head():
    trace = [job("big1", 0, 100, 3), job("big2", 10, 100, 4), job("small", 20, 10, 1)]
    assert starts(run(trace, "fifo-backfill")) == {"big1": 0, "big2": 100, "small": 20}


def test_fifo_backfill_refuses_a_job_that_would_delay_the_head():
    trace = [job("big1", 0, 100, 3), job("big2", 10, 100, 4), job("long", 20, 500, 1)]
    got = starts(run(trace, "fifo-backfill"))
    assert got["big2"] == 100 and got["long"] == 200


def test_fifo_backfill_uses_nodes_the_head_does_not_need():
    # 2 nodes: head needs 1 whole node (node 0 frees at 100); a long 1-GPU job may use node 1
    trace = [
        job("a", 0, 100, 4),
        job("b", 0, 1000, 3),
        job("head", 10, 100, 4),
        job("long", 20, 5000, 1),
    ]
    got = starts(run(trace, "fifo-backfill", nodes=2))
    assert got["head"] == 100 and got["long"] == 20


def test_sjf_orders_by_true_duration_and_is_strict():
    trace = [job("a", 0, 100, 4), job("long", 10, 100, 4), job("short", 20, 10, 1)]
    got = starts(run(trace, "sjf"))
    assert got == {"a": 0, "short": 100, "long": 110}


def test_tiresias_preempts_the_job_with_more_attained_service():
    cfg = SimConfig(checkpoint_interval_s=60.0, restart_overhead_s=10.0)
    trace = [job("old", 0, 1000, 1), job("new", 200, 50, 1)]
    sim = run(trace, Tiresias(thresholds_gpu_s=(100.0,)), nodes=1, gpus_per_node=1, config=cfg)
    old, new = sim.by_id["old"], sim.by_id["new"]
    assert new.first_start == 200 and new.finish == 250
    assert old.preemptions == 1
    # old had 200 s done, checkpointed at 180: 20 s lost, then 10 s restart overhead
    assert old.finish == 250 + 10 + (1000 - 180)
    assert sim.lost_gpu_s == 30
    assert old.queue_s == 50


def test_tiresias_wakes_up_when_a_running_job_is_demoted():
    # "new" arrives while "old" is still in the top queue: it waits until old crosses 100 GPU-s
    trace = [job("old", 0, 1000, 1), job("new", 50, 50, 1)]
    sim = run(trace, Tiresias(thresholds_gpu_s=(100.0,)), nodes=1, gpus_per_node=1)
    assert round(sim.by_id["new"].first_start, 3) == 100.0
    assert sim.by_id["old"].preemptions == 1
