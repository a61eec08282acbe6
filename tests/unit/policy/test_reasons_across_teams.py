"""What a job's team reads names jobs of that team only: why it waits (the GPUs held for a
reservation, the job a strict queue waits behind) and why it was preempted say "a job of another
team" for the others', whose jobs that team cannot open (cross-team access is a 404)."""

from scheduler.policy import decide

from .helpers import check_invariants, job, node, run, snap, why
from .test_backfill import cluster


def _held_for(big_team: str) -> str:
    nodes, running = cluster()
    pending = [job("big", 1, 8, pc="high", team=big_team), job("long", 1, 4, est=5000)]
    s = snap(nodes, pending, running)
    d = decide(s)
    check_invariants(s, d)
    assert not d.start
    return why(d, "long")


def test_the_gpus_held_for_another_teams_reservation_are_held_for_a_job_of_another_team():
    assert "the free GPUs are held for big (reserved at t=2000)" in _held_for("t")
    across = _held_for("other")
    assert "the free GPUs are held for a job of another team (reserved at t=2000)" in across
    assert "big" not in across


def test_a_strict_queue_waits_behind_a_job_of_another_team():
    nodes, running = cluster()
    for team, ahead in (("t", "big"), ("other", "a job of another team")):
        pending = [job("big", 1, 8, pc="high", team=team), job("short", 1, 1, est=10)]
        d = decide(snap(nodes, pending, running, backfill=False))
        assert f"queued behind {ahead}, which waits for h100 GPUs" in why(d, "short")


def test_a_preemption_for_another_teams_job_names_its_class_not_the_job():
    def reason(team: str) -> str:
        s = snap(
            [node("n1", 0)],
            [job("urgent", 1, 8, pc="high", team=team)],
            [run("victim", {"n1": range(8)}, pc="low", ckpt=900.0)],
            las=None,
        )
        d = decide(s)
        check_invariants(s, d)
        (p,) = d.preempt
        assert p.job == "victim"
        return p.reason

    assert reason("t").startswith("priority: urgent (high) needs 8 h100 GPUs; victim (low) ")
    across = reason("other")
    assert across.startswith(
        "priority: a high job of another team needs 8 h100 GPUs; victim (low) "
    )
    assert "urgent" not in across
