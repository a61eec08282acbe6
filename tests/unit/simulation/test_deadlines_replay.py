"""Deadlines in the simulator: traces get them deterministically, the engine sees them only when
asked to, and the hit rate is a metric; the learned run-time model drives a replay."""

from __future__ import annotations

from scheduler.simulation import SimConfig, Simulator, generate_synthetic, uniform_cluster
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy, ModelPredictor
from scheduler.simulation.metrics import compute_metrics
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


def test_model_predictor_learns_in_batches_and_doubles_past_its_prediction():
    p = ModelPredictor()
    assert p.estimate("a", 8) is None
    for _ in range(40):
        p.observe("a", 8, 7200.0)
        p.observe("b", 1, 600.0)
    est_a, est_b = p.estimate("a", 8), p.estimate("b", 1)
    assert 3600 <= est_a <= 14400 and 300 <= est_b <= 1200
    assert p.estimate("a", 8, attained_s=est_a + 100) == 2 * (est_a + 100)
