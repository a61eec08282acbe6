"""`gpuplatform`: the engine driven through snapshot -> decide -> apply, knowing only the past."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import config_from_dict
from scheduler.simulation import SimConfig, Simulator, generate_synthetic, uniform_cluster
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy, RuntimePredictor
from scheduler.simulation.runner import make_policy

from ..policy.test_config_range import engine_configs
from .builders import EXACT, job
from .test_simulator import FAILING, assert_conserved


def test_predictor_uses_finished_jobs_only_with_fallbacks():
    p = RuntimePredictor(window=4, min_samples=2)
    assert p.estimate("a", 1) is None
    p.observe("b", 8, 500.0)
    assert p.estimate("a", 1) == 500.0  # global fallback
    for d in (100.0, 300.0, 200.0):
        p.observe("x", 1, d)
    assert p.estimate("a", 1) == 200.0  # same GPU count, any tenant
    p.observe("a", 1, 1000.0)
    p.observe("a", 1, 2000.0)
    assert p.estimate("a", 1) == 2000.0  # the tenant's own median (upper of two)
    assert p.estimate("a", 1, attained_s=2500.0) == 5000.0  # outran it: doubling
    for d in (10.0, 10.0, 10.0, 10.0):
        p.observe("a", 1, d)
    assert p.estimate("a", 1) == 10.0  # only the last `window` samples count


def test_predictor_conditions_on_what_a_job_has_already_run():
    p = RuntimePredictor(window=10, min_samples=1)
    for d in (100.0, 200.0, 300.0, 5000.0, 9000.0):
        p.observe("a", 1, d)
    assert p.estimate("a", 1) == 300.0
    # ran 400 s already: the median of the finished jobs that ran longer than that
    assert p.estimate("a", 1, attained_s=400.0) == 9000.0
    assert p.estimate("a", 1, attained_s=9500.0) == 19000.0  # longer than any: doubling


class Recording(GpuPlatformPolicy):
    """Records, at every call, the estimates handed over and the durations known by then."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def schedule(self, sim, now):
        snap = self.snapshot(sim, now)
        known = {sim.jobs[i].duration for i in sim.finished}
        # the true end of each current run, taken now: the jobs change as the replay goes on
        true_end = {j.id: (j.expected_end(), j.duration) for j in sim.running.values()}
        self.seen.append((snap, known, true_end))
        super().schedule(sim, now)


def test_snapshots_carry_no_future_durations():
    trace = generate_synthetic(60, seed=4, mean_interarrival_s=200.0)
    policy = Recording()
    sim = Simulator(trace, uniform_cluster(3, 8), policy, SimConfig()).run()
    assert_conserved(sim)
    assert policy.seen[0][0].pending[0].runtime_estimate_s is None
    for snap, known, true_end in policy.seen:
        for p in snap.pending:
            est = p.runtime_estimate_s
            # a doubling of the checkpointed progress, which is at most the service received
            assert est is None or est in known or est <= 2.0 * p.attained_service_s
        for r in snap.running:
            end, duration = true_end[r.id]
            # the true end of the run is never what the engine is told (unless by coincidence of
            # an estimate equal to a past duration)
            assert r.expected_end is None or r.expected_end != end or duration in known


def test_gpuplatform_conserves_work_with_failures():
    cluster = uniform_cluster(6, 8).with_spot_fraction(0.5, seed=1)
    trace = generate_synthetic(80, seed=1, mean_interarrival_s=150.0)
    sim = Simulator(trace, cluster, make_policy("gpuplatform"), FAILING).run()
    assert_conserved(sim)
    assert sim.interruptions > 0
    assert sim.start_conflicts == 0


def test_gpuplatform_backfills_around_a_blocked_gang():
    # 2 nodes x 4: a holds node 0 for 1000 s, b holds 3 GPUs of node 1; the 8-GPU gang waits;
    # a short 1-GPU job fills node 1's last GPU instead of idling behind the gang
    trace = [
        job("a", 0, 1000, 4),
        job("b", 0, 1000, 3),
        job("gang", 10, 100, 8),
        job("small", 20, 50, 1),
    ]
    sim = Simulator(trace, uniform_cluster(2, 4), make_policy("gpuplatform"), SimConfig()).run()
    assert sim.by_id["small"].first_start == 20
    assert sim.by_id["gang"].first_start == 1000


def test_engine_las_queues_preempt_the_job_with_more_attained_service():
    trace = [job("old", 0, 20000, 1), job("new", 5000, 100, 1)]
    cfg = SimConfig(checkpoint_interval_s=600.0, restart_overhead_s=30.0)
    sim = Simulator(trace, uniform_cluster(1, 1), make_policy("gpuplatform"), cfg).run()
    old, new = sim.by_id["old"], sim.by_id["new"]
    assert old.preemptions == 1
    # old runs on to just past its next checkpoint (every 630 s of run time: 30 s restart
    # overhead is not run here, it started fresh), so new waits at most one interval
    assert 5000 < new.first_start <= 5000 + 600 + 30 + 120
    # and old lost only the 30 s it ran past that checkpoint plus its restart overhead
    assert sim.lost_gpu_s <= 30 + 30 + 1e-6
    assert_conserved(sim)
    # the labelled variant without LAS queues never preempts within one class
    sim = Simulator(trace, uniform_cluster(1, 1), make_policy("gpuplatform-nolas"), cfg).run()
    assert sim.by_id["old"].preemptions == 0
    assert sim.by_id["new"].first_start == 20000
    assert_conserved(sim)


def test_the_replay_looks_again_when_a_demoted_job_saves_its_first_checkpoint():
    # old crosses the first attained-service threshold (3,600 GPU-s) at 3,600 s, but no job of
    # its class may preempt it before it has saved a checkpoint in this run (7,200 s). The live
    # loop, cycling every few seconds, preempts it then; so does the replay, instead of at the
    # next unrelated event (here none: new would wait for old's end at 20,000 s).
    trace = [job("old", 0, 20000, 1), job("new", 1000, 100, 1)]
    cfg = SimConfig(checkpoint_interval_s=7200.0, restart_overhead_s=30.0)
    sim = Simulator(trace, uniform_cluster(1, 1), make_policy("gpuplatform"), cfg).run()
    old, new = sim.by_id["old"], sim.by_id["new"]
    assert old.preemptions == 1
    # preempted just after 7,200 s, old runs on to just past its next checkpoint
    assert 14400 <= new.first_start <= 14400 + 120
    assert sim.lost_gpu_s <= 30 + 1e-6  # only its restart overhead
    assert_conserved(sim)


def test_the_replay_looks_again_when_a_running_job_outruns_its_expected_end():
    # The gang waits for a's GPU, reserved at a's expected end (its estimate: 100 s, the only
    # finished 1-GPU job). small (estimated 400 s, like the finished 2-GPU job) would end after
    # that reservation, so it waits. Each time a outruns its expected end the estimate doubles
    # and the reservation moves later; once small's estimated end comes before it, small
    # starts: in the live loop at its next cycle, in the replay at that moment, instead of at
    # the next unrelated event (a's end at 10,500 s, when the gang takes the node).
    from scheduler.policy import Config

    trace = [
        job("w1", 0, 100, 1),
        job("w2", 0, 400, 2),
        job("a", 500, 10000, 1),
        job("gang", 500, 100, 4),
        job("small", 510, 50, 2),
    ]
    policy = GpuPlatformPolicy(Config(queue_order="fifo", las=None), name="easy")
    sim = Simulator(trace, uniform_cluster(1, 4), policy, EXACT).run()
    assert 600 < sim.by_id["small"].first_start < 2000
    assert sim.by_id["gang"].first_start == 10500
    assert_conserved(sim)


def test_an_immediate_preemption_triggers_a_follow_up_cycle():
    # with no grace the victim stops at once; the engine starts the waiting job only in a later
    # cycle, which the job-stop event triggers at the same timestamp
    from scheduler.policy import Config, Las

    policy = GpuPlatformPolicy(
        Config(
            preemption_grace_s=0.0, checkpoint_protect_s=0.0, las=Las(thresholds_gpu_s=(3600.0,))
        ),
        name="las-no-grace",
    )
    # a job of a higher class: a victim of its own class would run on to its next checkpoint
    trace = [
        job("old", 0, 20000, 1),
        replace(job("new", 5000, 100, 1), priority_class="production"),
    ]
    sim = Simulator(trace, uniform_cluster(1, 1), policy, SimConfig()).run()
    assert sim.by_id["old"].preemptions == 1
    assert sim.by_id["new"].first_start == 5000
    assert_conserved(sim)


def test_decisions_do_not_depend_on_the_engines_cross_call_memos():
    # The adapter hands the engine the same RunningJob and Node objects while nothing changed,
    # so the engine carries ranks, placement views and capacity indexes over between calls.
    # Every call must decide exactly what a call with cleared memos and fresh objects decides.
    import copy

    from scheduler.policy import decide, memo

    def memos():
        return (
            memo._LAST_RANKS[0],
            memo._LAST_PLACEMENTS[0],
            dict(memo._LAST_INDEX),
            memo._LAST_TOPOLOGY[0],
            list(memo._LAST_SUMMARY),
            memo._LAST_FREE[0],
            memo._LAST_PENDING[0],
        )

    def restore(saved):
        ranks, placements, index, topology, summary, free, pending = saved
        memo._LAST_RANKS[0] = ranks
        memo._LAST_PLACEMENTS[0] = placements
        memo._LAST_INDEX.clear()
        memo._LAST_INDEX.update(index)
        memo._LAST_TOPOLOGY[0] = topology
        memo._LAST_SUMMARY[:] = summary
        memo._LAST_FREE[0] = free
        memo._LAST_PENDING[0] = pending

    class Checked(GpuPlatformPolicy):
        calls = 0

        def schedule(self, sim, now):
            snap = self.snapshot(sim, now)
            saved = memos()
            restore((({}, (), {}), {}, {}, None, [], None, {}))
            fresh = decide(copy.deepcopy(snap))
            restore(saved)
            assert decide(snap) == fresh
            self.calls += 1
            super().schedule(sim, now)

    trace = generate_synthetic(120, seed=7, mean_interarrival_s=120.0)
    policy = Checked()
    sim = Simulator(trace, uniform_cluster(4, 8), policy, SimConfig()).run()
    assert_conserved(sim)
    assert policy.calls > 100
    assert sim.preemptions > 0  # the planner's views were exercised


def test_planning_shortcuts_decide_what_the_full_computation_decides(monkeypatch):
    # Two shortcuts inside a cycle: a one-node job's what-if placement without copying the
    # index (Index.pick_node_after), and rule 4b's release walk handed to the reservation that
    # follows. Every call must decide exactly what it decides with both turned off.
    from scheduler.policy import decide
    from scheduler.policy.capacity import Index
    from scheduler.policy.preemption import _Preemption

    released_in_time = _Preemption._released_in_time
    used = {"one node": 0, "walk": 0}
    pick_node_after = Index.pick_node_after

    def counted_pick(self, *args):
        node = pick_node_after(self, *args)
        used["one node"] += node is not None
        return node

    def counted_walk(self, *args):
        in_time, walked = released_in_time(self, *args)
        used["walk"] += walked is not None
        return in_time, walked

    monkeypatch.setattr(Index, "pick_node_after", counted_pick)
    monkeypatch.setattr(_Preemption, "_released_in_time", counted_walk)

    class Checked(GpuPlatformPolicy):
        calls = 0

        def schedule(self, sim, now):
            snap = self.snapshot(sim, now)
            with monkeypatch.context() as off:
                off.setattr(Index, "pick_node_after", lambda self, *args: None)
                off.setattr(
                    _Preemption,
                    "_released_in_time",
                    lambda self, *args: (released_in_time(self, *args)[0], None),
                )
                full = decide(snap)
            assert decide(snap) == full
            self.calls += 1
            super().schedule(sim, now)

    trace = generate_synthetic(150, seed=11, mean_interarrival_s=90.0)
    policy = Checked()
    sim = Simulator(trace, uniform_cluster(4, 8), policy, SimConfig()).run()
    assert_conserved(sim)
    assert policy.calls > 100
    assert used["one node"] > 0 and used["walk"] > 0


def test_pending_jobs_handed_over_equal_fresh_ones_at_every_call():
    # The adapter keeps each pending job's PendingJob while its inputs are unchanged, and
    # across a finished job (a new predictor version) while its estimate is unchanged, asking
    # the predictor once per (tenant, GPUs, progress) in a call. Every call must hand over
    # exactly the jobs an adapter without that cache would build.
    class Checked(GpuPlatformPolicy):
        calls = 0
        kept_across_versions = 0

        def snapshot(self, sim, now):
            before = {idx: (entry[1], entry[2][0]) for idx, entry in self._pending.items()}
            snap = super().snapshot(sim, now)
            cached, self._pending = self._pending, {}
            fresh = tuple(self._pending_job(j, now) for j in sim.pending.values())
            self._pending = cached
            assert snap.pending == fresh
            version = self.predictor.version
            self.kept_across_versions += sum(
                1
                for j, pj in zip(sim.pending.values(), snap.pending, strict=True)
                if j.idx in before and before[j.idx][0] is pj and before[j.idx][1] != version
            )
            self.calls += 1
            return snap

    trace = generate_synthetic(150, seed=3, mean_interarrival_s=60.0)
    policy = Checked()
    sim = Simulator(trace, uniform_cluster(3, 8), policy, SimConfig()).run()
    assert_conserved(sim)
    assert policy.calls > 100
    assert policy.kept_across_versions > 0


def test_a_victim_that_checkpoints_on_request_is_stopped_once_it_has():
    # The same two jobs, but every job saves a checkpoint 10 s after a preemption asks it to
    # (the loop asks every victim): old is stopped once it has, not at its next periodic
    # checkpoint, and loses only those 10 s plus its restart overhead.
    trace = [job("old", 0, 20000, 1), job("new", 5000, 100, 1)]
    cfg = SimConfig(checkpoint_interval_s=600.0, restart_overhead_s=30.0)
    asked = replace(cfg, checkpoint_on_request_s=10.0)
    sim = Simulator(trace, uniform_cluster(1, 1), make_policy("gpuplatform"), asked).run()
    old, new = sim.by_id["old"], sim.by_id["new"]
    assert old.preemptions == 1
    assert new.first_start == 5000 + 10
    assert sim.lost_gpu_s == pytest.approx(10 + 30)
    assert_conserved(sim)
    # without requests, new waits for old's next periodic checkpoint
    periodic = Simulator(trace, uniform_cluster(1, 1), make_policy("gpuplatform"), cfg).run()
    assert periodic.by_id["new"].first_start > 5000 + 10


@settings(max_examples=30, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.integers(0, 4000), st.integers(60, 4000), st.sampled_from([1, 2, 4, 8])),
        min_size=2,
        max_size=20,
    ),
    interval=st.sampled_from([None, 300.0, 900.0]),
    on_request=st.sampled_from([None, 0.0, 10.0, 200.0]),
)
def test_victims_stopped_at_their_checkpoint_conserve_work(jobs, interval, on_request):
    # Whatever stops a victim early (its periodic checkpoint or a requested one inside the
    # grace), every job finishes once, work is conserved and no stop loses more than it ran.
    trace = [job(f"j{i}", s, d, g) for i, (s, d, g) in enumerate(jobs)]
    cfg = SimConfig(
        checkpoint_interval_s=interval, restart_overhead_s=20.0, checkpoint_on_request_s=on_request
    )
    sim = Simulator(trace, uniform_cluster(1, 8), make_policy("gpuplatform"), cfg).run()
    assert_conserved(sim)
    assert 0.0 <= sim.lost_gpu_s <= sim.busy_gpu_s


@settings(max_examples=50, deadline=None)
@given(engine_configs(), st.integers(0, 5))
def test_every_accepted_configuration_replays_a_trace_to_the_end(data, seed):
    # What a what-if replays for a candidate: any configuration validation accepts, with
    # failures, spot interruptions and (with a short half-life) usages decayed to subnormal
    # numbers. Every job must finish with the work conserved, and the usage handed to the
    # engine must stay a number.
    config = config_from_dict(data, path="engine_config")
    trace = generate_synthetic(30, seed=seed, mean_interarrival_s=100.0)
    cluster = uniform_cluster(3, 8).with_spot_fraction(0.5, seed=1)
    sim = Simulator(trace, cluster, GpuPlatformPolicy(config), FAILING).run()
    assert_conserved(sim)
    assert all(0 <= u < float("inf") for u in sim.tenant_usage.values()), sim.tenant_usage
