"""The event engine: conservation, determinism, the job/failure model, error cases."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.simulation import (
    SimConfig,
    SimulationError,
    Simulator,
    generate_synthetic,
    uniform_cluster,
)
from scheduler.simulation.metrics import METRIC_KEYS, compute_metrics
from scheduler.simulation.runner import make_policy
from scheduler.simulation.simulator import TICK_EVERY

from .builders import EXACT, job, run

BASELINES = ("fifo", "fifo-backfill", "sjf", "tiresias")
FAILING = SimConfig(
    seed=7,
    checkpoint_interval_s=900.0,
    restart_overhead_s=30.0,
    mtbf_s=20 * 3600.0,
    repair_s=3600.0,
    spot_mtbi_s=10 * 3600.0,
    spot_outage_s=600.0,
    quarantine_failures=2,
    quarantine_window_s=3 * 86400.0,
    quarantine_probation_s=3600.0,
)


def assert_conserved(sim: Simulator) -> None:
    """Every job finished exactly once; work in == busy GPU-seconds - lost GPU-seconds."""
    assert sim.done == len(sim.jobs) == len(sim.finished) == len(set(sim.finished))
    assert all(j.state == "done" and j.finish >= j.submit for j in sim.jobs)
    assert not sim.running and not sim.pending and sim.used_gpus == 0
    work = sum(j.gpus * j.duration for j in sim.jobs)
    assert sim.busy_gpu_s - sim.lost_gpu_s == pytest.approx(work, rel=1e-9)
    for j in sim.jobs:
        # a job's span is its waits plus its runs
        assert j.finish - j.submit == pytest.approx(j.queue_s + j.executed_s, abs=1e-6)


def replay(policy: str, config: SimConfig, n: int = 120, seed: int = 1, nodes: int = 6):
    trace = generate_synthetic(n, seed=seed, mean_interarrival_s=120.0)
    sim = Simulator(trace, uniform_cluster(nodes, 8), make_policy(policy), config).run()
    return sim


@pytest.mark.parametrize("policy", BASELINES)
def test_conservation_without_failures(policy):
    assert_conserved(replay(policy, SimConfig()))


@pytest.mark.parametrize("policy", BASELINES)
def test_conservation_with_failures_spot_and_quarantine(policy):
    cluster = uniform_cluster(6, 8).with_spot_fraction(0.5, seed=1)
    trace = generate_synthetic(120, seed=1, mean_interarrival_s=120.0)
    sim = Simulator(trace, cluster, make_policy(policy), FAILING).run()
    assert_conserved(sim)
    assert sim.node_failures > 0 and sim.spot_interruptions > 0 and sim.interruptions > 0
    assert sim.quarantines > 0 and sim.lost_gpu_s > 0


@settings(max_examples=25, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.integers(0, 5000), st.integers(1, 3000), st.sampled_from([1, 2, 4, 8, 16])),
        min_size=1,
        max_size=25,
    ),
    policy=st.sampled_from(BASELINES),
    ckpt=st.sampled_from([None, 100.0]),
)
def test_conservation_property(jobs, policy, ckpt):
    trace = [job(f"j{i}", s, d, g) for i, (s, d, g) in enumerate(jobs)]
    cfg = SimConfig(checkpoint_interval_s=ckpt, restart_overhead_s=5.0)
    assert_conserved(run(trace, policy, nodes=2, gpus_per_node=8, config=cfg))


@pytest.mark.parametrize("policy", ["fifo-backfill", "tiresias"])
def test_deterministic_under_a_seed(policy):
    cluster = uniform_cluster(6, 8).with_spot_fraction(0.5, seed=1)
    trace = generate_synthetic(80, seed=3, mean_interarrival_s=120.0)

    def once(seed):
        sim = Simulator(trace, cluster, make_policy(policy), replace(FAILING, seed=seed)).run()
        return compute_metrics(sim), [(j.id, j.first_start, j.finish) for j in sim.jobs]

    assert once(5) == once(5)
    assert once(5) != once(6)


def test_metrics_have_every_required_key():
    m = compute_metrics(replay("fifo", SimConfig(), n=30))
    assert list(m)[: len(METRIC_KEYS)] == list(METRIC_KEYS)
    assert m["jobs"] == 30 and 0 < m["gpu_utilization"] <= 1
    assert m["p50_jct_s"] <= m["p95_jct_s"] <= m["p99_jct_s"]


def test_node_failure_requeues_from_last_checkpoint():
    # one node; it fails (MTBF is tiny) while the job runs; work since the checkpoint is lost
    cfg = SimConfig(
        seed=0,
        checkpoint_interval_s=100.0,
        restart_overhead_s=10.0,
        mtbf_s=500.0,
        repair_s=50.0,
        quarantine_failures=1000,
    )
    sim = run([job("a", 0, 2000, 1)], "fifo", nodes=1, gpus_per_node=1, config=cfg)
    a = sim.by_id["a"]
    assert a.interruptions == sim.node_failures > 0
    assert a.requeued and a.preemptions == 0
    assert_conserved(sim)


def test_idle_while_pending_counts_fragmentation():
    # 2 nodes x 4: two 3-GPU jobs leave 1+1 GPUs idle; a 2-GPU job fits in 2 idle GPUs by count
    # but not on one node, so 2 GPUs sit idle while it waits for 100 s
    trace = [job("a", 0, 100, 3), job("b", 0, 100, 3), job("c", 0, 10, 2)]
    sim = run(trace, "fifo-backfill", nodes=2)
    assert sim.idle_pending_gpu_s == 2 * 100
    assert sim.by_id["c"].first_start == 100


def test_a_job_that_can_never_fit_is_rejected_up_front():
    with pytest.raises(SimulationError, match="never fit"):
        Simulator([job("x", 0, 10, 16)], uniform_cluster(1, 8), make_policy("fifo"))


def test_a_policy_that_starts_nothing_is_reported_stuck():
    class Idle:
        name = "idle"

        def schedule(self, sim, now):
            pass

    with pytest.raises(SimulationError, match="stuck"):
        Simulator([job("x", 0, 10, 1)], uniform_cluster(1, 8), Idle()).run()


def test_invalid_starts_are_dropped_not_applied():
    class Greedy:
        name = "greedy"

        def schedule(self, sim, now):
            for j in list(sim.pending.values()):
                # always GPU 0 of node 0: the second start conflicts and must be refused
                if not sim.start(j, {0: (0,)}):
                    pass

    sim = Simulator([job("x", 0, 10, 1), job("y", 0, 10, 1)], uniform_cluster(1, 2), Greedy())
    sim.run()
    assert sim.start_conflicts >= 1
    assert sim.by_id["y"].first_start == 10


def test_jobs_restricted_to_a_gpu_model_only_land_on_it():
    from scheduler.simulation import ClusterSpec, NodeSpec
    from scheduler.simulation.traces import TraceJob

    cluster = ClusterSpec(
        (NodeSpec("t0", "T4", 2), NodeSpec("t1", "T4", 2), NodeSpec("g0", "G2", 8)), name="mix"
    )
    trace = [TraceJob(f"j{i}", 0.0, 100.0, 2, "a", ("T4",)) for i in range(3)]
    trace.append(TraceJob("any", 0.0, 100.0, 8, "a", None))
    for policy in ("fifo-backfill", "gpuplatform"):
        sim = Simulator(trace, cluster, make_policy(policy), SimConfig())
        seen = {}
        inner = sim.policy.schedule

        def spy(s, now, inner=inner, seen=seen):
            inner(s, now)
            for j in s.running.values():
                seen[j.id] = {s.node_model[n] for n in j.placement}

        sim.policy.schedule = spy
        sim.run()
        assert seen["j0"] == seen["j1"] == seen["j2"] == {"T4"}, policy
        assert seen["any"] == {"G2"}
        # two T4 nodes: the third T4 job waits for one of them
        assert sorted(j.first_start for j in sim.jobs if j.id != "any") == [0.0, 0.0, 100.0]
        assert_conserved(sim)


class _PreemptOnce:
    """Starts pending jobs on node 0 in queue order; at ``at`` (the arrival of a job that needs
    the node) preempts ``victim`` with a grace."""

    name = "preempt-once"

    def __init__(self, victim: str, at: float, grace_s: float) -> None:
        self.victim, self.at, self.grace_s, self.done = victim, at, grace_s, False

    def schedule(self, sim: Simulator, now: float) -> None:
        if not self.done and now >= self.at:
            self.done = sim.preempt(sim.by_id[self.victim], self.grace_s, "test")
        for j in list(sim.pending.values()):
            free = sim.node_free[0]
            if len(free) >= j.gpus:
                sim.start(j, {0: tuple(free[: j.gpus])})


@pytest.mark.parametrize(
    ("grace_s", "on_request_s", "stopped_at", "saved_s"),
    [
        # the grace ends first: what was saved is the periodic checkpoint at 600 s of progress
        (100.0, None, 1100.0, 600.0),
        # the next periodic checkpoint (1,200 s) comes within the grace: it stops there
        (300.0, None, 1200.0, 1200.0),
        # asked at t=1000, it saves the 1,000 s reached then 10 s later and stops
        (100.0, 10.0, 1010.0, 1000.0),
        # the requested checkpoint would come after the grace: not saved
        (100.0, 200.0, 1100.0, 600.0),
    ],
)
def test_a_preempted_job_stops_at_its_first_checkpoint_within_the_grace(
    grace_s, on_request_s, stopped_at, saved_s
):
    cfg = SimConfig(checkpoint_interval_s=600.0, restart_overhead_s=0.0)
    cfg = replace(cfg, checkpoint_on_request_s=on_request_s)
    trace = [job("a", 0, 5000, 1), job("b", 1000, 10, 1)]
    sim = Simulator(trace, uniform_cluster(1, 1), _PreemptOnce("a", 1000.0, grace_s), cfg).run()
    a = sim.by_id["a"]
    assert a.preemptions == 1
    # what it ran past its saved progress until it stopped is lost
    assert sim.lost_gpu_s == pytest.approx(stopped_at - saved_s)
    # b runs from the stop for 10 s, then a resumes from what was saved
    assert sim.by_id["b"].first_start == pytest.approx(stopped_at)
    assert a.finish == pytest.approx(stopped_at + 10.0 + 5000.0 - saved_s)
    assert_conserved(sim)


class _Stop(Exception):
    pass


def _long_jobs() -> list:
    # One GPU each for ten days on 4 GPUs: 4 start, 296 wait, none finishes for ten days.
    return [job(f"j{k}", k * 60.0, 10 * 86400.0) for k in range(300)]


def test_tick_hears_a_replay_where_no_job_finishes_and_can_stop_it():
    """``progress`` is called as jobs finish: a replay whose jobs all run for days made every
    arrival's engine call before a caller heard of it, so a bound or a cancel could not stop
    it. ``tick`` is called every TICK_EVERY rounds and engine calls, finished jobs or not."""
    heard: list[tuple[int, int, float]] = []

    def tick(done: int, total: int, now: float) -> None:
        heard.append((done, total, now))
        raise _Stop

    sim = Simulator(
        _long_jobs(), uniform_cluster(1, 4), make_policy("gpuplatform"), EXACT, tick=tick
    )
    with pytest.raises(_Stop):
        sim.run()
    assert heard == [(0, 300, heard[0][2])]
    assert sim.done == 0
    # At the first TICK_EVERY units of work: rounds plus engine calls.
    assert sim.decide_calls <= TICK_EVERY and heard[0][2] < 86400.0


def test_tick_only_listens():
    ticks: list[int] = []
    heard = Simulator(
        _long_jobs(), uniform_cluster(1, 4), make_policy("gpuplatform"), EXACT,
        tick=lambda done, total, now: ticks.append(done),
    ).run()  # fmt: skip
    alone = Simulator(_long_jobs(), uniform_cluster(1, 4), make_policy("gpuplatform"), EXACT).run()
    assert len(ticks) >= alone.decide_calls // TICK_EVERY > 0
    assert ticks == sorted(ticks) and ticks[0] == 0
    keys = [k for k in METRIC_KEYS if k not in ("wall_s", "decide_p50_ms", "decide_p99_ms")]
    with_tick, without = compute_metrics(heard), compute_metrics(alone)
    assert {k: with_tick.get(k) for k in keys} == {k: without.get(k) for k in keys}
