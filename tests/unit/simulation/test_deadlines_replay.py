"""Deadlines in the simulator: traces get them deterministically, the engine sees them only when
asked to, and the hit rate is a metric; the learned run-time model drives a replay."""

from __future__ import annotations

from scheduler.simulation import SimConfig, Simulator, generate_synthetic, uniform_cluster
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy, ModelPredictor
from scheduler.simulation.metrics import compute_metrics
from scheduler.simulation.simulator import SimJob
from scheduler.simulation.trace_job import TraceJob
from scheduler.simulation.traces import with_deadlines


def test_with_deadlines_is_deterministic_and_feasible_on_an_idle_cluster():
    trace = generate_synthetic(300, seed=4)
    a = with_deadlines(trace, share=0.3, seed=1)
    assert a == with_deadlines(trace, share=0.3, seed=1)
    due = [j for j in a if j.deadline is not None]
    assert 60 <= len(due) <= 120  # about 30 %
    assert all(j.submit + 1.5 * j.duration <= j.deadline <= j.submit + 4 * j.duration for j in due)


def test_the_hit_rate_is_a_metric_and_the_rule_is_off_when_hidden():
    trace = with_deadlines(generate_synthetic(200, seed=2), share=0.5, seed=0)
    cluster = uniform_cluster(2, 8)
    seen = Simulator(trace, cluster, GpuPlatformPolicy(), SimConfig(seed=0)).run()
    hidden = Simulator(trace, cluster, GpuPlatformPolicy(deadlines=False), SimConfig(seed=0)).run()
    for sim in (seen, hidden):
        m = compute_metrics(sim)
        due = [j for j in sim.jobs if j.deadline is not None]
        assert m["deadline_jobs"] == len(due) > 0
        hits = sum(j.finish <= j.deadline for j in due)
        assert m["deadline_hit_rate"] == round(hits / len(due), 6)
    assert (
        compute_metrics(seen)["deadline_hit_rate"] >= compute_metrics(hidden)["deadline_hit_rate"]
    )
    no_deadlines = Simulator(generate_synthetic(20, seed=2), cluster, GpuPlatformPolicy()).run()
    assert compute_metrics(no_deadlines)["deadline_hit_rate"] is None


def _sim_job(idx: int, tenant: str, gpus: int, duration: float, **over) -> SimJob:
    fields = dict(
        idx=idx,
        id=str(idx),
        tenant=tenant,
        priority_class="research",
        submit=0.0,
        duration=duration,
        gpus=gpus,
        workers=1,
        gpus_per_worker=gpus,
        models=None,
        preemptible=True,
        checkpoint_interval_s=None,
    )
    return SimJob(**{**fields, **over})


def test_model_predictor_learns_in_batches_and_doubles_past_its_prediction():
    p = ModelPredictor()
    a, b = _sim_job(0, "a", 8, 7200.0), _sim_job(1, "b", 1, 600.0)
    assert p.estimate_job(a) is None
    for _ in range(40):
        p.observe_job(a)
        p.observe_job(b)
    est_a, est_b = p.estimate_job(a), p.estimate_job(b)
    assert 3600 <= est_a <= 14400 and 300 <= est_b <= 1200
    assert p.estimate_job(a, attained_s=est_a + 100) == 2 * (est_a + 100)


def test_model_predictor_learns_from_users_names_and_images_where_the_trace_has_them():
    # One team, one shape: only the user and the job's name tell a 10-minute job from a 10-hour
    # one, as in the platform's own history (export_trace carries them).
    p = ModelPredictor()
    short = dict(user="alice", name="eval-3", image="pytorch:24.05")
    long = dict(user="bob", name="pretrain-3", image="pytorch:24.05")
    for i in range(40):
        p.observe_job(_sim_job(2 * i, "vision", 8, 600.0, **short))
        p.observe_job(_sim_job(2 * i + 1, "vision", 8, 36000.0, **long))
    s = p.estimate_job(_sim_job(100, "vision", 8, 1.0, **{**short, "name": "eval-9"}))
    ln = p.estimate_job(_sim_job(101, "vision", 8, 1.0, **{**long, "name": "pretrain-9"}))
    assert 300 <= s <= 1200 and 18000 <= ln <= 72000


def test_a_deadline_that_passes_while_the_job_waits_is_a_miss():
    # One 8-GPU node held for 10 h by a job that cannot be preempted; the second job, due 2 h
    # after it arrives, waits past its deadline: a miss, and one that passed while waiting.
    trace = (
        TraceJob("hog", 0.0, 36000.0, 8, "a", preemptible=False),
        TraceJob("due", 60.0, 600.0, 8, "b", deadline=60.0 + 7200.0),
        TraceJob("easy", 120.0, 600.0, 8, "b", deadline=120.0 + 30 * 86400.0),
    )
    sim = Simulator(trace, uniform_cluster(1, 8), GpuPlatformPolicy(), SimConfig(seed=0)).run()
    m = compute_metrics(sim)
    assert sim.by_id["due"].first_start >= 36000.0
    assert m["deadline_jobs"] == 2 and m["deadline_hit_rate"] == 0.5
    assert m["deadline_missed_waiting"] == 1
