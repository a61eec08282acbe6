"""Rule 2: queue order is priority class, then hierarchical fair share, then the tie-break."""

from scheduler.policy import Config, PendingJob, decide, queue_order

from .helpers import job, node, snap, started, team


def ids(s):
    return [p.id for p in queue_order(s)]


def test_rule_2_priority_class_comes_first():
    s = snap(
        [node("n1", 1)],
        [job("old-low", pc="low", submitted=0), job("new-high", pc="high", submitted=900)],
    )
    assert ids(s) == ["new-high", "old-low"]
    assert list(started(decide(s))) == ["new-high"]


def test_rule_2_fair_share_before_age_within_a_priority_class():
    teams = [team("heavy", usage=100_000), team("light", usage=1_000)]
    s = snap(
        [node("n1", 1)],
        [
            job("heavy-old", team="heavy", submitted=0),
            job("light-new", team="light", submitted=500),
        ],
        teams=teams,
    )
    assert ids(s) == ["light-new", "heavy-old"]


def test_rule_2_fair_share_follows_the_tree_like_fair_tree():
    # p1's subtree used far more than its share, so even its idle child c1 ranks behind c2,
    # which overuses relative to its sibling c3 but sits under the frugal p2.
    teams = [
        team("p1"),
        team("c1", "p1", usage=10_000),
        team("p2"),
        team("c2", "p2", usage=1_000),
        team("c3", "p2"),
    ]
    s = snap(
        [node("n1", 1)],
        [
            job("j-c1", team="c1", submitted=0),
            job("j-c2", team="c2", submitted=1),
            job("j-c3", team="c3", submitted=2),
        ],
        teams=teams,
    )
    assert ids(s) == ["j-c3", "j-c2", "j-c1"]


def test_rule_2_weights_set_the_share():
    # Equal usage: "big" has 4x the weight, so it is under its share and "small" over it.
    teams = [team("big", weight=4, usage=2_000), team("small", weight=1, usage=2_000)]
    s = snap(
        [node("n1", 1)], [job("s", team="small"), job("b", team="big", submitted=5)], teams=teams
    )
    assert ids(s) == ["b", "s"]


def test_rule_2_nearly_equal_teams_tie_so_the_tie_break_decides():
    teams = [team("a", usage=10_000), team("b", usage=11_000)]
    s = snap(
        [node("n1", 1)],
        [job("a-long", team="a", est=36_000), job("b-short", team="b", est=60, submitted=1)],
        teams=teams,
    )
    assert ids(s) == ["b-short", "a-long"]


def test_rule_2_age_orders_equal_jobs_and_fifo_knob_is_pure_age():
    pend = [job("young", submitted=900, est=60), job("old", submitted=100, est=60)]
    assert ids(snap([node("n1")], pend)) == ["old", "young"]
    pend = [job("young-small", submitted=900, est=60), job("old-big", submitted=800, est=9_000)]
    assert ids(snap([node("n1")], pend))[0] == "young-small"
    assert ids(snap([node("n1")], pend, queue_order="fifo"))[0] == "old-big"


def test_rule_2_smallest_predicted_gpu_time_first_counts_gpus_and_attained_service():
    pend = [
        job("wide", 1, 8, est=600, submitted=0),  # 4,800 GPU-s
        job("narrow", 1, 1, est=3_000, submitted=0),  # 3,000 GPU-s
        job("resumed", 1, 2, est=10_000, attained=9_500, submitted=0),  # 1,000 GPU-s left
    ]
    # (LAS queues off: with them, the resumed job's 19,000 GPU-s of service rank it last)
    assert ids(snap([node("n1")], pend, las=None)) == ["resumed", "narrow", "wide"]


def test_rule_2_aging_stops_starvation_of_big_jobs():
    big = job("big", 1, 8, est=36_000, submitted=0)  # 2^18.1 GPU-s predicted
    small = job("small", 1, 1, est=60)  # 2^5.9 GPU-s
    period = Config().queue_aging_s  # waiting one period halves a job's effective size
    assert ids(snap([node("n1")], [big, small], now=0))[0] == "small"
    # After ~12.2 aging periods the big job outranks even a brand-new small job.
    late = 13 * period
    newcomer = PendingJob(**{**_d(small), "submitted_at": late})
    assert ids(snap([node("n1")], [big, newcomer], now=late))[0] == "big"
    early = 12 * period
    newcomer = PendingJob(**{**_d(small), "submitted_at": early})
    assert ids(snap([node("n1")], [big, newcomer], now=early))[0] == "small"
    # The knob: with 1 h periods the same happens 13 h after submission.
    assert (
        ids(
            snap(
                [node("n1")],
                [big, PendingJob(**{**_d(small), "submitted_at": 13 * 3600.0})],
                now=13 * 3600.0,
                queue_aging_s=3600.0,
            )
        )[0]
        == "big"
    )


def test_rule_2_requeued_jobs_go_ahead_of_their_peers():
    pend = [job("fresh", est=60), job("requeued", est=36_000, requeued=True, attained=100)]
    assert ids(snap([node("n1")], pend)) == ["requeued", "fresh"]


def test_rule_2_las_and_sjf_knobs():
    pend = [
        job("served", est=60, attained=5_000, requeued=True),
        job("new-long", est=50_000, submitted=1),
    ]
    assert ids(snap([node("n1")], pend, queue_order="las")) == ["new-long", "served"]
    off = {"las_thresholds_gpu_s": ()}  # with LAS queues, 'served' is in a lower queue anyway
    assert ids(snap([node("n1")], pend, queue_order="sjf", **off)) == ["served", "new-long"]


def test_rule_2_unknown_team_and_class_get_neutral_standing():
    teams = [team("heavy", usage=1e9), team("light", usage=1.0)]
    pend = [
        job("h", team="heavy"),
        job("x", team="nobody", submitted=1),
        job("l", team="light", submitted=2),
    ]
    assert ids(snap([node("n1")], pend, teams=teams)) == ["l", "x", "h"]


def _d(p):
    return {f: getattr(p, f) for f in p.__slots__}
